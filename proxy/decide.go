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
	// verdictDown: a port of a workspace that is not running, asked for
	// by someone other than its owner: a plain 503, no wake.
	verdictDown
)

// decide maps a workspace's stored phase, desired state and operation to
// the proxy's answer (docs/lifecycle.md). Only a user opening the workspace
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

// decideFor is decide for a stored workspace: one whose home is moving to
// another node is on its way up there, even while its program still shows
// as running on the node it leaves (a drain saving its home).
func decideFor(ws workspace.Workspace, navigate bool) verdict {
	v := decide(ws.Phase, ws.DesiredState, ws.Operation, navigate)
	if _, moving := workspace.Moving(ws); v == verdictProxy && moving && ws.ErrorReason == nil {
		return verdictStarting
	}
	return v
}

// isNavigation reports whether r is a person opening a page of the
// workspace rather than a request a loaded page makes by itself: a fetch,
// a script, an image, a frame inside the page (VS Code's webviews), a
// service worker or a WebSocket, reconnecting ones included.
func isNavigation(r *http.Request) bool {
	if isWebSocketUpgrade(r) {
		// Browsers send no Fetch Metadata on a WebSocket handshake.
		return false
	}
	switch r.Header.Get("Sec-Fetch-Mode") {
	case "navigate":
		dest := r.Header.Get("Sec-Fetch-Dest")
		return dest == "" || dest == "document"
	case "":
		// Browsers send no Fetch Metadata to plain-http hosts other than
		// localhost. There a page load is told by what browsers send with
		// every navigation and never with a fetch.
		return r.Header.Get("Sec-Fetch-Dest") == "" && wantsHTML(r) && r.Header.Get("Upgrade-Insecure-Requests") == "1"
	}
	return false
}

// isActivity reports whether a proxied HTTP request shows a person at
// work: opening a page, or sending something (a form, an upload, any
// method but GET, HEAD and OPTIONS). What a loaded page fetches by itself
// does not count: an idle workbench keeps loading frames and images.
func isActivity(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return isNavigation(r)
	}
	return true
}
