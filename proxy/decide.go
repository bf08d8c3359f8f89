package proxy

import "github.com/codehub-io/codehub/workspace"

// verdict is what the proxy does with a request for a workspace the user owns.
type verdict int

const (
	// verdictProxy: forward to the upstream.
	verdictProxy verdict = iota
	// verdictWakeAndProxy: running, but a policy asked it to stop and no
	// operation has begun; the user is back, so ask for RUNNING again and
	// keep serving.
	verdictWakeAndProxy
	// verdictWake: ask for RUNNING, then show the starting page.
	verdictWake
	// verdictStarting: already on its way up (or finishing another
	// operation first); show the starting page.
	verdictStarting
	verdictArchived
	verdictNotStarted
	verdictError
	verdictGone
)

// decide maps a workspace's stored phase, desired state and operation to
// the proxy's answer (DESIGN.md §8).
func decide(phase workspace.Phase, desired workspace.DesiredState, op workspace.Operation) verdict {
	wantsRunning := desired == workspace.DesiredRunning
	switch phase {
	case workspace.PhaseRunning:
		switch {
		case op == workspace.OpNone && !wantsRunning:
			return verdictWakeAndProxy
		case op == workspace.OpStopping:
			return verdictStarting
		}
		return verdictProxy
	case workspace.PhaseStandby:
		if wantsRunning || op != workspace.OpNone {
			return verdictStarting
		}
		return verdictWake
	case workspace.PhaseArchived:
		if wantsRunning || op != workspace.OpNone {
			return verdictStarting
		}
		return verdictArchived
	case workspace.PhasePending:
		if wantsRunning || op != workspace.OpNone {
			return verdictStarting
		}
		return verdictNotStarted
	case workspace.PhaseError:
		return verdictError
	}
	return verdictGone
}
