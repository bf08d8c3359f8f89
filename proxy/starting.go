package proxy

import (
	"fmt"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

// startFailure is a failed attempt of a workspace still on its way up: the
// engine retries it at Next (or at once, when Next is nil or past).
type startFailure struct {
	// Step says in a user's words where it failed ("while starting the
	// program"), empty when that cannot be told.
	Step    string
	Reason  string
	Message string
	// Attempt is how many attempts failed in a row, of at most Of before
	// the workspace stops in ERROR.
	Attempt int
	Of      int
	Next    *time.Time
}

// startingWords says in a user's words where a workspace on its way up is
// (never phase or operation names), and the failed attempt it is over or
// waiting to retry, if any. The message also goes to the starting page's
// poll, which reloads the page when it changes, so it holds no clock that
// moves by itself.
func startingWords(ws workspace.Workspace) (string, *startFailure) {
	if ws.ErrorReason != nil {
		f := &startFailure{Step: stepWords[workspace.FailedStep(ws)], Reason: *ws.ErrorReason,
			Attempt: ws.ErrorCount, Of: workspace.MaxErrorCount, Next: ws.NextAttemptAt}
		if ws.ErrorMessage != nil {
			f.Message = *ws.ErrorMessage
		}
		return failureWords(f, ws.Operation), f
	}
	return progressWords(ws.Phase, ws.Operation, ws.OpBackup), nil
}

// stepWords says where a start failed (workspace.FailedStep), to follow
// "Attempt n of m failed".
var stepWords = map[string]string{
	workspace.StepProvision: " while preparing the home directory",
	workspace.StepRestore:   " while restoring the home directory",
	workspace.StepSchedule:  " while finding a machine to run it",
	workspace.StepPull:      " while fetching the image",
	workspace.StepStart:     " while starting the program",
	workspace.StepHealth:    " waiting for the program to answer",
}

func failureWords(f *startFailure, op workspace.Operation) string {
	what := fmt.Sprintf("Attempt %d of %d failed%s: %s", f.Attempt, f.Of, f.Step, f.Reason)
	if f.Message != "" {
		what += " (" + f.Message + ")"
	}
	switch {
	case op != workspace.OpNone:
		return what + ". Trying again now."
	case f.Next == nil:
		return what + ". Trying again shortly."
	}
	return what + ". Next attempt at " + f.Next.UTC().Format("15:04:05") + " UTC."
}

func progressWords(phase workspace.Phase, op workspace.Operation, backup bool) string {
	switch {
	case op == workspace.OpArchiving && backup:
		// A backup keeps the home where it is, and yields to a wake.
		return "Ending a backup of its home directory first; it starts right after."
	case op == workspace.OpProvisioning, op == workspace.OpNone && phase == workspace.PhasePending:
		return "Preparing its home directory. This page opens the workspace when it is ready."
	case op == workspace.OpRestoring, op == workspace.OpNone && phase == workspace.PhaseArchived:
		return "Restoring its home directory from the archive. This page opens the workspace when it is ready."
	case op == workspace.OpStopping:
		return "Finishing a stop first; it starts again right after."
	case op == workspace.OpArchiving, op == workspace.OpCreateEmptyArchive:
		return "Finishing archiving first; it is restored and started right after."
	case op == workspace.OpStarting && phase == workspace.PhaseRunning:
		// The program runs and does not pass its health check yet.
		return "Waiting for the editor to answer. This page opens the workspace when it is ready."
	}
	return "Starting the editor. This page opens the workspace when it is ready."
}

// stoppedWords says in a user's words why a workspace is not running:
// who stopped or archived it and when, and for an idle stop after how
// long without use.
func stoppedWords(ws workspace.Workspace, now time.Time) string {
	archived := ws.Phase == workspace.PhaseArchived || ws.DesiredState == workspace.DesiredArchived
	when := ""
	if ws.DesiredAt != nil {
		when = " " + ago(now.Sub(*ws.DesiredAt))
	}
	switch {
	case ws.Phase == workspace.PhasePending && ws.DesiredState != workspace.DesiredArchived:
		return "It has not been started yet."
	case ws.DesiredState == workspace.DesiredRunning:
		return "It is not running."
	case ws.DesiredBy == workspace.CauseIdle && ws.DesiredAt != nil:
		unused := span(ws.DesiredAt.Sub(ws.LastAccessAt))
		if archived {
			return "It was archived after " + unused + " without use," + when + "."
		}
		return "It stopped after " + unused + " without use," + when + "."
	case ws.DesiredBy == workspace.CauseUser && archived:
		return "You archived it" + when + "."
	case ws.DesiredBy == workspace.CauseUser:
		return "You stopped it" + when + "."
	case ws.DesiredBy == workspace.CauseAdmin && archived:
		return "An administrator archived it" + when + "."
	case ws.DesiredBy == workspace.CauseAdmin:
		return "An administrator stopped it" + when + "."
	case archived:
		return "It was archived" + when + "."
	}
	return "It was stopped" + when + "."
}
