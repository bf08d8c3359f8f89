package identity

import "time"

// loginSchedule is a login backoff: a few free mistakes, then a delay that
// doubles per failure up to a ceiling.
type loginSchedule struct {
	free      int
	base, max time.Duration
}

var (
	// clientBackoff counts the failures of one user from one client
	// address: guessing a password from one place costs days, while a user
	// who mistypes twice never notices.
	clientBackoff = loginSchedule{free: 3, base: time.Second, max: 15 * time.Minute}
	// userBackoff counts a user's failures from every address together. It
	// is looser, so that one guesser cannot lock the real user out; it
	// slows a guesser spread over many addresses, at the cost of short
	// waits for the real user while such a guess runs.
	userBackoff = loginSchedule{free: 20, base: time.Second, max: time.Minute}
)

// after is how long logins stay refused after the failures-th consecutive
// failure.
func (s loginSchedule) after(failures int) time.Duration {
	if failures < s.free {
		return 0
	}
	d := s.base
	for i := s.free; i < failures; i++ {
		d *= 2
		if d >= s.max {
			return s.max
		}
	}
	return d
}
