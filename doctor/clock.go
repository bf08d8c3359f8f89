package doctor

import (
	"fmt"
	"net/http"
	"time"
)

// DefaultClockTolerance is how far another machine's clock may be from
// this one's before the doctor fails it. codehub compares times other
// machines wrote (activity, Nomad's task events, leases) with its own;
// S3 refuses signatures more than 15 minutes off.
const DefaultClockTolerance = 2 * time.Second

// HTTPDatePrecision is the resolution of an HTTP Date header.
const HTTPDatePrecision = time.Second

// leastSkew is the least two clocks can be apart given a remote reading
// taken between local times sent and received and truncated to precision:
// the remote clock read some instant in [remote, remote+precision) while
// the local one was in [sent, received]. Zero when the readings agree
// within that uncertainty; its sign says which clock is ahead (positive:
// the remote).
func leastSkew(sent, received, remote time.Time, precision time.Duration) time.Duration {
	low := remote.Sub(received)
	high := remote.Add(precision).Sub(sent)
	switch {
	case low > 0:
		return low
	case high < 0:
		return high
	}
	return 0
}

// Clock judges a reading of what's clock taken between sent and received
// at the given precision.
func Clock(what string, sent, received, remote time.Time, precision, tolerance time.Duration) Finding {
	return judgeClock(what, leastSkew(sent, received, remote, precision), tolerance)
}

// judgeClock turns a skew into a finding for the clock of what.
func judgeClock(what string, skew, tolerance time.Duration) Finding {
	f := Finding{Check: "clock." + what, Status: OK, Detail: fmt.Sprintf("within %s of this machine", tolerance)}
	if skew == 0 {
		f.Detail = "agrees with this machine"
	}
	abs := skew
	if abs < 0 {
		abs = -abs
	}
	if abs > tolerance {
		dir := "ahead of"
		if skew < 0 {
			dir = "behind"
		}
		f.Status = Fail
		f.Detail = fmt.Sprintf("at least %s %s this machine (tolerance %s)", abs.Round(time.Millisecond), dir, tolerance)
		f.Fix = "run NTP (chrony or systemd-timesyncd) on every machine codehub, Nomad, PostgreSQL and S3 run on"
		f.Doc = DocDoctor
	}
	return f
}

// DateOf reads an HTTP response's Date header.
func DateOf(resp *http.Response) (time.Time, error) {
	d := resp.Header.Get("Date")
	if d == "" {
		return time.Time{}, fmt.Errorf("the answer has no Date header")
	}
	t, err := http.ParseTime(d)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse Date header %q: %w", d, err)
	}
	return t, nil
}
