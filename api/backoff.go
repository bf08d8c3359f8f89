package api

import "time"

// Login backoff: a few free mistakes, then a delay that doubles per failure
// up to a ceiling, so guessing a password costs days while a user who mistypes
// twice never notices.
const (
	freeLoginFailures = 3
	loginBackoffBase  = time.Second
	loginBackoffMax   = 15 * time.Minute
)

// loginBackoff is how long logins stay refused after the failures-th
// consecutive failure.
func loginBackoff(failures int) time.Duration {
	if failures < freeLoginFailures {
		return 0
	}
	d := loginBackoffBase
	for i := freeLoginFailures; i < failures; i++ {
		d *= 2
		if d >= loginBackoffMax {
			return loginBackoffMax
		}
	}
	return d
}

// retryAfterSeconds rounds a remaining lock up to whole seconds for the
// Retry-After header, never answering 0 while a lock is in force.
func retryAfterSeconds(remaining time.Duration) int {
	s := int((remaining + time.Second - 1) / time.Second)
	return max(s, 1)
}
