package controller

import (
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// Step is one actuator call of a plan. Steps are submissions: they return
// at once, and what they caused is judged from a later observation.
type Step string

const (
	StepProvisionVolume    Step = "provision-volume"
	StepStartWorkspace     Step = "start-workspace"
	StepStopWorkspace      Step = "stop-workspace"
	StepDiscardWorkspace   Step = "discard-workspace"
	StepSubmitArchive      Step = "submit-archive"
	StepSubmitRestore      Step = "submit-restore"
	StepCreateEmptyArchive Step = "create-empty-archive"
	StepDeleteVolume       Step = "delete-volume"
	StepStopArchiveJob     Step = "stop-archive-job"
	StepStopRestoreJob     Step = "stop-restore-job"
	StepPurgeArchiveJob    Step = "purge-archive-job"
	StepPurgeRestoreJob    Step = "purge-restore-job"
	StepPurgeWorkspaceJob  Step = "purge-workspace-job"
	StepGiveUpStopArchive  Step = "give-up-stop-archive"
)

// submits reports whether a failure of the step fails the operation (it is
// the operation's own submission). Other steps (stop, delete, purge) are
// retried on the next pass, bounded by the operation timeout.
func (s Step) submits() bool {
	switch s {
	case StepProvisionVolume, StepStartWorkspace, StepSubmitArchive, StepSubmitRestore, StepCreateEmptyArchive:
		return true
	}
	return false
}

// Action is the plan for one workspace in one pass.
type Action struct {
	// Next is the row as the controller wants it stored: conditions,
	// phase, operation and error fields, all written in one statement.
	Next workspace.Workspace
	// Write is set when Next differs from the stored row.
	Write bool
	// Steps run in order after the write, or before it when WriteLast is
	// set (the write records what the steps finished).
	Steps     []Step
	WriteLast bool
	// VolumeID is the observed volume StepDeleteVolume deletes.
	VolumeID string
	// BackupFailure is logged once the write commits: a backup's failure,
	// which the row does not record.
	BackupFailure *Failure
}

// ArchiveCheck is the result of looking at one archive object in S3 (Key
// empty: not looked). The controller looks only where a plan depends on
// it: after an archive job succeeded, and while creating an empty archive.
type ArchiveCheck struct {
	Key  string
	Meta archive.Meta
	Err  error
}

// needsArchiveCheck names the archive object the plan for w needs to see,
// or returns "".
func needsArchiveCheck(w workspace.Workspace, obs Observed) string {
	if key := stopArchiveDone(w, obs); key != "" {
		return key
	}
	if w.OpID == nil || workspace.ArchiveCommitted(w) {
		return ""
	}
	key := opArchive(w)
	switch w.Operation {
	case workspace.OpCreateEmptyArchive:
		return key
	case workspace.OpArchiving:
		if job := currentArchiveJob(w, obs); job != nil && job.Status == JobSucceeded {
			return key
		}
	}
	return ""
}

// opArchive is the archive w's operation writes: archive.Key, or a
// builder's prebuild prefix (archive.PrebuildPrefix), which its job
// completes with the commit it built.
func opArchive(w workspace.Workspace) string {
	if workspace.Building(w) {
		return archive.PrebuildPrefix(w.ID, deref(w.OpID), w.Template, w.TemplateVersion)
	}
	return archive.Key(w.ID, deref(w.OpID))
}

// isOpArchive reports whether check looked at the archive of w's
// operation: its key, or under a builder's prefix.
func isOpArchive(w workspace.Workspace, key string) bool {
	want := opArchive(w)
	return key == want || workspace.Building(w) && archive.PrebuiltUnder(key, want)
}

func (c Config) backoff(errorCount int) time.Duration {
	d := c.BackoffBase
	for i := 1; i < errorCount && d < c.BackoffMax; i++ {
		d *= 2
	}
	return min(d, c.BackoffMax)
}

// Plan decides, without I/O, what to do with workspace w given what the
// backend observed and the archive check. It re-derives everything from
// the observation every time (level-triggered): a pass that finds the
// workspace where it should be returns an Action without Write or Steps.
func Plan(w workspace.Workspace, obs Observed, check ArchiveCheck, now time.Time, cfg Config) Action {
	a := plan(w, obs, check, now, cfg)
	a.VolumeID = obs.VolumeID
	return a
}

func plan(w workspace.Workspace, obs Observed, check ArchiveCheck, now time.Time, cfg Config) Action {
	if w.Phase == workspace.PhaseDeleted {
		return Action{Next: w}
	}
	obs = stopArchiveChecked(w, obs, check)
	p := planner{w: w, obs: obs, check: check, now: now, cfg: cfg, home: locateHome(w, obs)}
	p.next = w
	p.next.Conditions = observeConditions(w, obs, now)
	if !obs.VolumeExists {
		// The restore marker speaks of a volume that is gone: a new one
		// holds nothing until a restore fills it. Kept, it would pass an
		// empty volume off as the home once an admin recovered a lost one.
		p.next.RestoreMarker = nil
	}
	p.next.Conditions = moveCondition(w, obs, p.next.Conditions, now)
	if reason, msg := p.broken(); reason != "" {
		return p.fail(reason, msg, true)
	}
	if w.Operation != workspace.OpNone {
		return p.inFlight()
	}
	return p.idle()
}

// Recheck is when time alone may next change the plan of w, a workspace
// with no operation that a plan at now left as it was: its next attempt,
// or its next backup. Zero when only a change of the row or of its
// observation can. A plan in flight is judged every pass (its deadline).
func Recheck(w workspace.Workspace, now time.Time, cfg Config) time.Time {
	var at time.Time
	soonest := func(t time.Time) {
		if t.After(now) && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if w.NextAttemptAt != nil {
		soonest(*w.NextAttemptAt)
	}
	if due, ok := backupDueAt(w, cfg.BackupInterval); ok {
		soonest(due)
	}
	return at
}

type planner struct {
	w     workspace.Workspace
	next  workspace.Workspace
	obs   Observed
	check ArchiveCheck
	now   time.Time
	cfg   Config
	// home is where the stored row and this observation put the home.
	// Every rule that may delete, overwrite or replace a home reads it.
	home workspace.Home
}

// locateHome says where the observation puts the home of the stored row w.
func locateHome(w workspace.Workspace, obs Observed) workspace.Home {
	return workspace.LocateHome(w, observedVolume(obs))
}

func observedVolume(obs Observed) workspace.VolumeState {
	switch {
	case obs.VolumeReady:
		return workspace.VolumeReady
	case obs.VolumeExists:
		return workspace.VolumeUnready
	}
	return workspace.VolumeAbsent
}

// broken finds what must stop the workspace at once: a container without
// its volume, or a home volume that vanished behind our back.
func (p *planner) broken() (reason, message string) {
	if p.w.DeletedAt != nil || p.w.Operation == workspace.OpDeleting {
		return "", ""
	}
	if r := workspace.InvariantViolated(p.next); r != "" {
		if p.w.ErrorReason != nil && *p.w.ErrorReason == r && workspace.ErrorFinal(p.w) {
			return "", ""
		}
		return r, "a container is running without the workspace volume"
	}
	if p.home == workspace.HomeLost && !workspace.ErrorFinal(p.w) {
		return workspace.ReasonDataLost, "the home volume disappeared"
	}
	return "", ""
}

// settle derives phase and the derived conditions of next and returns the
// action that stores it (if it changed) and then runs steps.
func (p *planner) settle(steps ...Step) Action {
	p.stampArchive()
	derive(p.w.Conditions, &p.next, p.now)
	return Action{Next: p.next, Write: changed(p.w, p.next), Steps: steps}
}

// stampArchive records when the archive next names was made, once it
// becomes the workspace's archive: the time its meta in S3 gives when the
// plan looked, else now (the commit follows the archive by one pass).
func (p *planner) stampArchive() {
	n := &p.next
	switch {
	case n.ArchiveKey == nil:
		n.ArchivedAt = nil
	case p.w.ArchiveKey == nil || *p.w.ArchiveKey != *n.ArchiveKey:
		at := p.now
		if p.check.Key == *n.ArchiveKey && p.check.Err == nil && !p.check.Meta.CreatedAt.IsZero() {
			at = p.check.Meta.CreatedAt
		}
		n.ArchivedAt = &at
	}
}

// derive sets the phase of n and the conditions that follow from its
// columns rather than from the backend: archive_ready and policy.healthy.
func derive(prev workspace.Conditions, n *workspace.Workspace, now time.Time) {
	n.Phase = workspace.DerivePhase(*n)
	archiveReady := condition(n.ArchiveKey != nil, "Verified", "NoArchive", "")
	healthy := condition(true, "Healthy", "", "")
	if n.Phase == workspace.PhaseError {
		reason := workspace.InvariantViolated(*n)
		if reason == "" && n.ErrorReason != nil {
			reason = *n.ErrorReason
		}
		healthy = workspace.Condition{Status: workspace.ConditionFalse, Reason: reason, Message: deref(n.ErrorMessage)}
	}
	n.Conditions = withConditions(n.Conditions, prev, now,
		namedCondition{workspace.CondArchiveReady, archiveReady},
		namedCondition{workspace.CondHealthy, healthy})
}

// claim starts operation op: the CAS on the stored operation NONE is the
// write of this action, and steps run only once it is committed.
func (p *planner) claim(op workspace.Operation, steps ...Step) Action {
	n := &p.next
	n.Operation = op
	started := p.now
	n.OpStartedAt = &started
	n.OpAttempt = p.w.OpAttempt + 1
	n.OpBackup = false
	switch op {
	case workspace.OpArchiving, workspace.OpCreateEmptyArchive:
		// A retry reuses the op id of an archive not yet committed, so
		// the data mover finds and skips a finished upload; finishing a
		// committed archive (the home in both) keeps its op id too.
		if p.w.OpID == nil || (workspace.ArchiveCommitted(p.w) && p.home != workspace.HomeInBoth) {
			id := p.cfg.NewOpID()
			n.OpID = &id
		}
	case workspace.OpDeleting:
		// Keep the op id: it protects an unfinished archive from GC.
	case workspace.OpStarting:
		n.OpID = nil
		// Every start is a new run with a new upstream token; retries
		// within the operation keep it.
		n.PreviousRunID = p.w.RunID
		n.RunID = p.cfg.NewOpID()
		if v := p.cfg.templateVersion(p.w.Template); v != "" {
			n.TemplateVersion = v
		}
	default:
		n.OpID = nil
	}
	return p.settle(steps...)
}

// complete ends the operation successfully: error fields reset.
func (p *planner) complete(steps ...Step) Action {
	n := &p.next
	n.Operation = workspace.OpNone
	n.OpStartedAt = nil
	n.ErrorReason, n.ErrorMessage, n.ErrorCount, n.NextAttemptAt = nil, nil, 0, nil
	return p.settle(steps...)
}

// fail ends the operation unsuccessfully. The phase stays what the
// observation says unless the reason is terminal or retries are used up:
// then it is ERROR, in the same write.
func (p *planner) fail(reason, message string, terminal bool, steps ...Step) Action {
	p.next = failed(p.next, reason, message, terminal, p.now, p.cfg)
	return p.settle(steps...)
}

// failed records a failed attempt on w (also used after a step fails);
// the caller derives the phase.
func failed(w workspace.Workspace, reason, message string, terminal bool, now time.Time, cfg Config) workspace.Workspace {
	w.Operation = workspace.OpNone
	w.OpStartedAt = nil
	w.ErrorReason = &reason
	w.ErrorMessage = &message
	w.ErrorCount++
	if terminal && !workspace.TerminalReason(reason) {
		// A backend-classified terminal failure with a retryable reason:
		// use up the retries so the phase is ERROR.
		w.ErrorCount = max(w.ErrorCount, workspace.MaxErrorCount)
	}
	at := now.Add(cfg.backoff(w.ErrorCount))
	w.NextAttemptAt = &at
	return w
}

func (p *planner) idle() Action {
	w := p.w
	if w.NextAttemptAt != nil && p.now.Before(*w.NextAttemptAt) {
		return p.settle(p.purgeStale()...)
	}
	if w.DeletedAt != nil {
		return p.claim(workspace.OpDeleting, p.deletingSteps()...)
	}
	if (p.home == workspace.HomeInVolume || p.home == workspace.HomeUnknown) && p.obs.Move && DrainMove(p.w, p.obs) {
		// Its archive holds the home (or it never ran), even where the
		// drained node went down since and its volume reads as unknown.
		return p.giveUpVolume()
	}
	if p.home == workspace.HomeUnknown {
		// The volume holds, or may hold, a home no archive has: a
		// restore would overwrite it, the cleanup of a failed restore
		// would delete it, and PROVISIONING or an empty archive would
		// put another home in its place. Wait for the volume.
		return p.settle(p.purgeStale()...)
	}
	if key := stopArchiveDone(p.w, p.obs); key != "" && p.home == workspace.HomeInVolume {
		return p.commitStopArchive(key)
	}
	if p.home == workspace.HomeInVolume && p.obs.NodeAway != "" && !p.obs.ContainerLive {
		// The home's node takes no new allocation: neither the workspace
		// nor an archive job could run there. Wait for it, as for a node
		// that is down.
		return p.settle(p.purgeStale()...)
	}
	phase := workspace.DerivePhase(p.next)
	if phase == workspace.PhaseError {
		return p.settle(p.purgeStale()...)
	}
	target := p.target()
	switch {
	case workspace.Level(phase) < workspace.Level(target):
		return p.stepUp(phase)
	case workspace.Level(phase) > workspace.Level(target):
		return p.stepDown(phase)
	case p.home == workspace.HomeInBoth && !p.obs.ContainerLive:
		// An archive was committed but its volume outlived the operation
		// (it timed out deleting it): finish that archiving.
		return p.claim(workspace.OpArchiving, StepDeleteVolume)
	case p.home == workspace.HomeInArchive && p.obs.VolumeExists && !p.obs.ContainerLive && !restoreRunning(p.obs):
		// A volume left by a restore that failed or was given up: it never
		// held the home (the archive is the only copy), and nobody will
		// finish it now that the workspace is to stay archived. Or a
		// volume given up on a drained node (giveUpVolume), whose job a
		// drain may have left wanting to run.
		return p.settle(append(p.purgeStale(), StepStopWorkspace, StepDeleteVolume)...)
	case p.backupDue(phase):
		return p.claimBackup(append(p.purgeStale(), StepSubmitArchive)...)
	}
	return p.settle(p.purgeStale()...)
}

// target is the steady phase to head for: the desired one, or ARCHIVED
// while the home moves off an evacuated node. Once the archive is
// committed and the volume gone, the move no longer applies and the
// workspace comes back up to its desired phase, restored on another node.
func (p *planner) target() workspace.Phase {
	if p.obs.Move && (p.home == workspace.HomeInVolume || p.home == workspace.HomeInBoth) {
		return workspace.PhaseArchived
	}
	return workspace.TargetPhase(p.w.DesiredState)
}

func (p *planner) stepUp(phase workspace.Phase) Action {
	switch phase {
	case workspace.PhasePending:
		if p.w.DesiredState == workspace.DesiredArchived && p.w.PrebuildOf == nil {
			return p.claim(workspace.OpCreateEmptyArchive, StepCreateEmptyArchive)
		}
		// A builder's home is made on a volume by its prebuild, the
		// archiving that follows.
		return p.claim(workspace.OpProvisioning, p.provisionSteps()...)
	case workspace.PhaseArchived:
		return p.claim(workspace.OpRestoring, p.restoreSteps()...)
	}
	return p.claim(workspace.OpStarting, StepStartWorkspace)
}

func (p *planner) stepDown(phase workspace.Phase) Action {
	if phase == workspace.PhaseRunning {
		return p.claim(workspace.OpStopping, StepStopWorkspace)
	}
	var steps []Step
	if p.obs.VolumeReady && !p.obs.ContainerLive {
		steps = append(steps, StepSubmitArchive)
	}
	return p.claim(workspace.OpArchiving, steps...)
}

// purgeStale forgets terminal batch jobs no operation waits for: their
// results are recorded (or belong to an attempt given up). An archive job
// that still runs for no operation (a backup that yielded before its job
// was seen) is stopped: nothing would commit what it makes.
func (p *planner) purgeStale() []Step {
	var steps []Step
	if j := p.obs.Archive; j != nil && p.w.Operation != workspace.OpArchiving {
		if terminalJob(j) {
			steps = append(steps, StepPurgeArchiveJob)
		} else {
			steps = append(steps, StepStopArchiveJob)
		}
	}
	if j := p.obs.Restore; j != nil && terminalJob(j) && p.w.Operation != workspace.OpRestoring {
		steps = append(steps, StepPurgeRestoreJob)
	}
	return steps
}

// inFlight judges the running operation. What the observation shows
// finished (or failed) wins over the timeout: a pass that comes late, after
// a failover or a slow pass, must not call finished work a Timeout. Only an
// operation still unfinished at its deadline fails, except an ARCHIVING
// whose archive is committed: the home is safe, so it ends without error
// and the idle plan claims ARCHIVING again to delete the volume.
func (p *planner) inFlight() Action {
	if a, ok := p.nodeAway(); ok {
		return a
	}
	if a, ok := p.yieldBackup(); ok {
		return a
	}
	a := p.operation()
	w := p.w
	limit := p.cfg.Timeouts[w.Operation]
	if workspace.BackingUp(w) && nodeLeaving(p.obs) && jobPlaced(currentArchiveJob(w, p.obs)) {
		// The backup is the home's way off a node being emptied: it
		// tries until S3 takes the home, however long, as a stop
		// archive does there.
		limit = 0
	}
	if w.Operation == workspace.OpStopping && savingStop(w, p.obs) {
		// The program has stopped; its home is being archived, which
		// may take as long as any archive. On a node being emptied the
		// task tries again until S3 takes the home, however long: the
		// home is safe on its volume meanwhile, and nothing is broken.
		limit = max(limit, p.cfg.Timeouts[workspace.OpArchiving])
		if nodeLeaving(p.obs) {
			limit = 0
		}
	}
	began, counting := p.deadlineSince()
	if a.Next.Operation == workspace.OpNone || limit <= 0 || !counting || p.now.Sub(began) <= limit {
		return a
	}
	// Judged on the row this pass writes: an archive it commits counts.
	if w.Operation == workspace.OpArchiving && locateHome(a.Next, p.obs).Archived() {
		return p.complete(a.Steps...)
	}
	msg := string(w.Operation) + " did not finish in time"
	if w.Operation == workspace.OpArchiving {
		var steps []Step
		if jobLive(currentArchiveJob(w, p.obs)) {
			// Given up: the job must not go on writing an archive
			// nobody will commit, nor hold the volume.
			steps = append(steps, StepStopArchiveJob)
		}
		return p.archiveFailed(workspace.ReasonTimeout, msg, true, steps...)
	}
	return p.fail(workspace.ReasonTimeout, msg, true)
}

// deadlineSince is when the running operation's deadline began, and whether
// it runs now. A start's counts the program's own time: not before the
// controller has submitted it, where the backend reports submissions (a
// failed submission is a failed attempt already, with its own retries);
// not while its node prepares it (Nomad bounds a download or an image pull
// itself and reports its failure); and from the latest of the operation,
// its submission and the program's start. In a wave of hundreds of starts
// a busy control plane submits the last ones, and a busy node prepares
// them, many minutes after they were asked for; their programs are not
// the ones that were slow.
func (p *planner) deadlineSince() (time.Time, bool) {
	w := p.w
	if w.OpStartedAt == nil {
		return time.Time{}, false
	}
	if w.Operation != workspace.OpStarting {
		return *w.OpStartedAt, true
	}
	began := *w.OpStartedAt
	if p.cfg.submissions {
		if p.obs.Submitted.IsZero() || p.obs.SubmittedRun != w.RunID {
			return time.Time{}, false
		}
		began = latest(began, p.obs.Submitted)
	}
	if p.obs.Preparing {
		return time.Time{}, false
	}
	return latest(began, p.obs.RunningSince), true
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// nodeAway ends an operation that needs a new allocation on the home's
// node while that node cannot take one (down, gone, drained), before its
// deadline makes it a Timeout: the workspace is not broken, it waits
// (idle plan) and tries again when the node is back. What was submitted
// and never placed is stopped. A job that already runs there is left to
// finish: Nomad lets it.
func (p *planner) nodeAway() (Action, bool) {
	if p.obs.NodeAway == "" || !p.obs.VolumeExists {
		return Action{}, false
	}
	switch p.w.Operation {
	case workspace.OpProvisioning:
		if p.obs.VolumeReady || p.obs.ContainerLive || !workspace.NeverRan(p.w) {
			return Action{}, false
		}
		// The new volume's node went down or was drained before it was
		// ready: it holds nothing, so it is made again on another node.
		return p.settle(StepDeleteVolume), true
	case workspace.OpStarting:
		if p.obs.ContainerLive {
			return Action{}, false
		}
		if !p.obs.RunStarted {
			// Nomad never placed the program: the home is as the run
			// before left it, and an archive that held it still does.
			p.next.RunID = p.w.PreviousRunID
		}
		return p.complete(StepStopWorkspace), true
	case workspace.OpArchiving:
		if p.home.Archived() || jobPlaced(p.obs.Archive) {
			return Action{}, false
		}
		return p.complete(stopUnplaced(p.obs.Archive, StepStopArchiveJob)...), true
	case workspace.OpRestoring:
		if !p.home.Archived() || jobPlaced(p.obs.Restore) || p.obs.ContainerLive {
			return Action{}, false
		}
		// The volume holds nothing the archive lacks: delete it, so the
		// restore starts over on a node that can take it. A workspace job
		// a drain left wanting to run is stopped first (giveUpVolume).
		return p.settle(append(stopUnplaced(p.obs.Restore, StepStopRestoreJob), StepStopWorkspace, StepDeleteVolume)...), true
	}
	return Action{}, false
}

// jobPlaced reports a batch job that runs or ran (its result counts).
func jobPlaced(j *JobResult) bool {
	return j != nil && j.Status != JobPending
}

// stopUnplaced stops a batch job that is still waiting for a node.
func stopUnplaced(j *JobResult, stop Step) []Step {
	if j != nil && j.Status == JobPending {
		return []Step{stop}
	}
	return nil
}

// operation plans the running operation's next step, deadline aside.
func (p *planner) operation() Action {
	w := p.w
	switch w.Operation {
	case workspace.OpProvisioning:
		if p.obs.VolumeReady {
			return p.complete()
		}
		return p.settle(p.provisionSteps()...)
	case workspace.OpStarting:
		return p.starting()
	case workspace.OpStopping:
		if !p.obs.ContainerLive {
			return p.complete()
		}
		if p.giveUpStopArchive() {
			return p.settle(StepStopWorkspace, StepGiveUpStopArchive)
		}
		return p.settle(StepStopWorkspace)
	case workspace.OpRestoring:
		return p.restoring()
	case workspace.OpArchiving:
		return p.archiving()
	case workspace.OpCreateEmptyArchive:
		return p.creatingEmptyArchive()
	case workspace.OpDeleting:
		return p.deleting()
	}
	return p.settle()
}

// giveUpStopArchive reports a stop archive to end with the attempt under
// way: it has tried for the stop timeout on a node in service, where a
// backup saves the home later, and the workspace must not stay STOPPING
// (nor its user locked out) until S3 comes back. On a node being drained
// the archive is the home's only way off it, and it goes on.
func (p *planner) giveUpStopArchive() bool {
	return savingStop(p.w, p.obs) && !nodeLeaving(p.obs) && p.w.OpStartedAt != nil &&
		p.now.Sub(*p.w.OpStartedAt) > p.cfg.Timeouts[workspace.OpStopping]
}

// nodeLeaving reports a home whose node is being emptied: drained or
// ineligible, whatever its status.
func nodeLeaving(obs Observed) bool {
	return obs.NodeAway == workspace.ReasonNodeIneligible || obs.NodeDraining
}

// provisionSteps makes the volume of a new home; a new volume never takes
// the place of a home that may be lost.
func (p *planner) provisionSteps() []Step {
	if p.obs.VolumeExists || p.home != workspace.HomeNowhere {
		return nil
	}
	return []Step{StepProvisionVolume}
}

func (p *planner) starting() Action {
	switch {
	case p.obs.ContainerLive && p.obs.UpstreamReady:
		return p.complete()
	case p.obs.Failure != nil:
		f := p.obs.Failure
		return p.fail(f.Reason, f.Message, f.Terminal)
	case !p.obs.ContainerLive:
		return p.settle(StepStartWorkspace)
	}
	return p.settle()
}

// currentRestoreJob is the restore job of the running attempt, if observed.
func currentRestoreJob(w workspace.Workspace, obs Observed) *JobResult {
	j := obs.Restore
	if j == nil || w.ArchiveKey == nil || j.ArchiveKey != *w.ArchiveKey || j.Attempt != w.OpAttempt {
		return nil
	}
	return j
}

func (p *planner) restoreSteps() []Step {
	switch {
	case !p.obs.VolumeExists:
		return []Step{StepProvisionVolume}
	case p.obs.VolumeReady && !p.obs.ContainerLive:
		return []Step{StepSubmitRestore}
	}
	return nil
}

func (p *planner) restoring() Action {
	if !p.home.Archived() {
		// Nothing to restore from (the idle plan provisions instead), or
		// the volume holds the home already: never restore over it.
		return p.complete()
	}
	job := currentRestoreJob(p.w, p.obs)
	if job == nil {
		return p.settle(p.restoreSteps()...)
	}
	switch job.Status {
	case JobSucceeded:
		if !p.obs.VolumeReady {
			return p.settle()
		}
		p.next.RestoreMarker = p.w.ArchiveKey
		return p.complete(StepPurgeRestoreJob)
	case JobFailed:
		reason := restoreFailureReason(job.ErrorCode)
		return p.fail(reason, jobMessage(job), workspace.TerminalReason(reason), StepPurgeRestoreJob)
	}
	return p.settle()
}

// restoreRunning reports a restore job that may still write the volume.
func restoreRunning(obs Observed) bool {
	return obs.Restore != nil && !terminalJob(obs.Restore)
}

// currentArchiveJob is the archive job of the running attempt, if observed.
func currentArchiveJob(w workspace.Workspace, obs Observed) *JobResult {
	j := obs.Archive
	if j == nil || w.OpID == nil || j.OpID != *w.OpID || j.Attempt != w.OpAttempt {
		return nil
	}
	return j
}

// archiving: job -> verified -> archive_key committed -> volume deleted.
func (p *planner) archiving() Action {
	if p.home.Archived() {
		var steps []Step
		if j := p.obs.Archive; j != nil && terminalJob(j) {
			steps = append(steps, StepPurgeArchiveJob)
		}
		if p.home == workspace.HomeInArchive {
			return p.complete(steps...)
		}
		if !p.obs.ContainerLive {
			steps = append(steps, StepDeleteVolume)
		}
		return p.settle(steps...)
	}
	job := currentArchiveJob(p.w, p.obs)
	if job == nil {
		if p.obs.VolumeReady && !p.obs.ContainerLive {
			return p.settle(StepSubmitArchive)
		}
		return p.settle()
	}
	switch job.Status {
	case JobSucceeded:
		return p.verified(StepPurgeArchiveJob)
	case JobFailed:
		reason := archiveFailureReason(job.ErrorCode)
		return p.archiveFailed(reason, jobMessage(job), workspace.TerminalReason(reason), StepPurgeArchiveJob)
	}
	return p.settle()
}

// verified commits the archive of the op id once S3 shows it complete.
// Only then may the volume be deleted (next pass); a backup keeps it.
func (p *planner) verified(steps ...Step) Action {
	key := p.check.Key
	switch err := p.check.Err; {
	case !isOpArchive(p.w, key):
		return p.settle()
	case err == nil:
		return p.committed(key, steps...)
	case errors.Is(err, archive.ErrChecksumMismatch):
		return p.archiveFailed(workspace.ReasonArchiveCorrupted, err.Error(), true, steps...)
	case missing(err):
		return p.archiveFailed(workspace.ReasonArchiveFailed, "archive job succeeded but "+err.Error(), false, steps...)
	}
	// S3 unreachable: look again next pass.
	return p.settle()
}

func missing(err error) bool {
	return errors.Is(err, archive.ErrArchiveNotFound) || errors.Is(err, archive.ErrMetaNotFound)
}

func (p *planner) creatingEmptyArchive() Action {
	key := archive.Key(p.w.ID, *p.w.OpID)
	if p.check.Key == key && p.check.Err == nil {
		p.next.ArchiveKey = &key
		return p.complete()
	}
	if p.check.Key == key && (missing(p.check.Err) || errors.Is(p.check.Err, archive.ErrChecksumMismatch)) {
		return p.settle(StepCreateEmptyArchive)
	}
	return p.settle()
}

// deletingSteps removes, in order, the container, the batch jobs that may
// hold the volume, then the volume.
// deletingSteps stop what still runs, then forget the jobs and delete the
// volume. A job still running is stopped rather than purged (a purge is
// refused while it lives), and the volume waits for it: the job holds it.
func (p *planner) deletingSteps() []Step {
	if p.obs.ContainerLive {
		return []Step{StepDiscardWorkspace}
	}
	var steps []Step
	running := false
	for _, j := range []struct {
		result      *JobResult
		stop, purge Step
	}{
		{p.obs.Archive, StepStopArchiveJob, StepPurgeArchiveJob},
		{p.obs.Restore, StepStopRestoreJob, StepPurgeRestoreJob},
	} {
		switch {
		case j.result == nil:
		case terminalJob(j.result):
			steps = append(steps, j.purge)
		default:
			steps = append(steps, j.stop)
			running = true
		}
	}
	if p.obs.VolumeExists && !running {
		steps = append(steps, StepDeleteVolume)
	}
	return steps
}

func (p *planner) deleting() Action {
	if steps := p.deletingSteps(); len(steps) > 0 {
		return p.settle(steps...)
	}
	// Everything is gone: forget the stopped job, then record DELETED.
	p.next.Phase = workspace.PhaseDeleted
	a := p.complete(StepPurgeWorkspaceJob)
	a.WriteLast = true
	return a
}

func terminalJob(j *JobResult) bool {
	return j.Status == JobSucceeded || j.Status == JobFailed
}

func jobMessage(j *JobResult) string {
	msg := "exit code " + strconv.Itoa(j.ExitCode)
	if j.ErrorCode != "" {
		msg += ", " + string(j.ErrorCode)
	}
	if j.Message != "" {
		msg += ": " + j.Message
	}
	return msg
}

func archiveFailureReason(code archive.Code) string {
	switch code {
	case archive.CodeBuildFailed:
		return workspace.ReasonBuildFailed
	case archive.CodeS3Access:
		return workspace.ReasonUnreachable
	case archive.CodeChecksumMismatch:
		return workspace.ReasonArchiveCorrupted
	}
	return workspace.ReasonArchiveFailed
}

func restoreFailureReason(code archive.Code) string {
	switch code {
	case archive.CodeS3Access:
		return workspace.ReasonUnreachable
	case archive.CodeArchiveNotFound, archive.CodeMetaNotFound:
		return workspace.ReasonDataLost
	case archive.CodeChecksumMismatch, archive.CodeTarExtractFailed:
		return workspace.ReasonArchiveCorrupted
	}
	return workspace.ReasonRestoreFailed
}

// observeConditions turns an observation into the conditions of w, keeping
// a condition's transition time while its status holds. archive_ready and
// policy.healthy are derived in settle. Unchanged conditions come back as
// the same map, so a converged pass allocates none.
func observeConditions(w workspace.Workspace, obs Observed, now time.Time) workspace.Conditions {
	volume := condition(obs.VolumeReady, "Ready", "NotFound", "")
	if obs.VolumeExists {
		volume.Node = obs.Node
		if !obs.VolumeReady {
			volume.Reason = workspace.ReasonVolumeCreating
		}
		if obs.NodeAway != "" {
			volume.Reason, volume.Message = obs.NodeAway, workspace.NodeAwayMessage(obs.NodeAway, obs.Node)
			if obs.NodeAway == workspace.ReasonNodeIneligible {
				volume.Message = drainedMessage(w, obs)
			}
		}
	}
	container := condition(obs.ContainerLive, "Live", "NotRunning", "")
	if f := obs.Failure; f != nil {
		container.Reason, container.Message = f.Reason, f.Message
	}
	upstream := condition(obs.UpstreamReady, "Passing", "NotPassing", "")
	return withConditions(w.Conditions, w.Conditions, now,
		namedCondition{workspace.CondVolumeReady, volume},
		namedCondition{workspace.CondContainerReady, container},
		namedCondition{workspace.CondUpstreamReady, upstream})
}

type namedCondition struct {
	name string
	c    workspace.Condition
}

// withConditions returns base with the given conditions set; a condition
// keeps its transition time from prev while its status holds. base is
// copied on the first real change and returned as is otherwise.
func withConditions(base, prev workspace.Conditions, now time.Time, set ...namedCondition) workspace.Conditions {
	next, copied := base, false
	for _, s := range set {
		c := s.c
		c.LastTransitionTime = now.UTC().Truncate(time.Second)
		if old, ok := prev[s.name]; ok && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		if old, ok := base[s.name]; ok && sameCondition(old, c) {
			continue
		}
		if !copied {
			next = make(workspace.Conditions, len(base)+len(set))
			maps.Copy(next, base)
			copied = true
		}
		next[s.name] = c
	}
	return next
}

func condition(ok bool, trueReason, falseReason, message string) workspace.Condition {
	if ok {
		return workspace.Condition{Status: workspace.ConditionTrue, Reason: trueReason, Message: message}
	}
	return workspace.Condition{Status: workspace.ConditionFalse, Reason: falseReason, Message: message}
}

// changed reports whether the controller's columns differ.
func changed(a, b workspace.Workspace) bool {
	return a.Phase != b.Phase || a.Operation != b.Operation || a.OpAttempt != b.OpAttempt || a.OpBackup != b.OpBackup ||
		a.ErrorCount != b.ErrorCount || !eqPtr(a.OpID, b.OpID) ||
		!eqPtr(a.ArchiveKey, b.ArchiveKey) || !eqPtr(a.RestoreMarker, b.RestoreMarker) ||
		!eqPtr(a.ErrorReason, b.ErrorReason) || !eqPtr(a.ErrorMessage, b.ErrorMessage) ||
		!eqTime(a.NextAttemptAt, b.NextAttemptAt) || !eqTime(a.OpStartedAt, b.OpStartedAt) ||
		!sameConditions(a.Conditions, b.Conditions)
}

func sameConditions(a, b workspace.Conditions) bool {
	return maps.EqualFunc(a, b, sameCondition)
}

func sameCondition(x, y workspace.Condition) bool {
	return x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message && x.Node == y.Node &&
		x.LastTransitionTime.Equal(y.LastTransitionTime)
}

func eqPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func eqTime(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
