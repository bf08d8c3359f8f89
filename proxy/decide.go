package proxy

import (
	"net/http"

	"github.com/codehub-io/codehub/workspace"
)

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
// the proxy's answer (DESIGN.md §8). Only a user opening the workspace
// (navigate) wakes it: a page's background requests (service worker
// update checks, reconnecting sockets) must not undo a stop or an archive
// the user just asked for.
func decide(phase workspace.Phase, desired workspace.DesiredState, op workspace.Operation, navigate bool) verdict {
	wantsRunning := desired == workspace.DesiredRunning
	switch phase {
	case workspace.PhaseRunning:
		switch {
		case op == workspace.OpNone && !wantsRunning && navigate:
			return verdictWakeAndProxy
		case op == workspace.OpStopping, op == workspace.OpStarting:
			// Starting: the process exists but does not answer its health
			// check yet; the starting page reloads until it does.
			return verdictStarting
		}
		return verdictProxy
	case workspace.PhaseStandby:
		if wantsRunning || op != workspace.OpNone {
			return verdictStarting
		}
		if !navigate {
			return verdictNotStarted
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

// isNavigation reports whether r is a user opening a page rather than a
// request a loaded page makes by itself. Clients that send no Fetch
// Metadata (curl, scripts, older browsers) count as navigations.
func isNavigation(r *http.Request) bool {
	mode := r.Header.Get("Sec-Fetch-Mode")
	if mode == "" {
		return r.Header.Get("Sec-Fetch-Dest") == ""
	}
	return mode == "navigate"
}
