package nomad

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
	"golang.org/x/sync/errgroup"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/firststart"
	"github.com/codehub-io/codehub/jobspecs"
	"github.com/codehub-io/codehub/workspace"
)

// findVolume returns the home volume of wsID, or nil when there is none.
func (b *Backend) findVolume(ctx context.Context, wsID string) (*api.HostVolumeStub, error) {
	q := b.query(ctx)
	q.Prefix = controller.VolumeName(wsID)
	vols, _, err := b.client.HostVolumes().List(nil, q)
	if err != nil {
		return nil, classify("list host volumes", err)
	}
	for _, v := range vols {
		if v.Name == controller.VolumeName(wsID) {
			return v, nil
		}
	}
	return nil, nil
}

// ProvisionVolume creates ws-{id}-home owned by the workspace uid/gid, on
// the node placeNode picks: Nomad itself would put it on the first
// feasible node, drained or not. An existing volume of that name (ready or
// still being created) is kept.
func (b *Backend) ProvisionVolume(ctx context.Context, spec controller.VolumeSpec) error {
	b.placing.Lock()
	defer b.placing.Unlock()
	if v, err := b.findVolume(ctx, spec.WorkspaceID); err != nil || v != nil {
		return err
	}
	vols, err := b.homeVolumes(ctx)
	if err != nil {
		return err
	}
	nodes, _, err := b.client.Nodes().List(b.query(ctx))
	if err != nil {
		return classify("list nodes", err)
	}
	node, err := placeNode(nodes, vols, b.opts.NodePool, b.opts.Datacenters, spec.AvoidNodes)
	if err != nil {
		return err
	}
	vol := &api.HostVolume{
		Namespace: b.opts.Namespace,
		Name:      controller.VolumeName(spec.WorkspaceID),
		PluginID:  b.opts.VolumePlugin,
		NodePool:  b.opts.NodePool,
		NodeID:    node,
		// The workspace writes; the archive job only reads.
		RequestedCapabilities: []*api.HostVolumeCapability{
			{AttachmentMode: api.HostVolumeAttachmentModeFilesystem, AccessMode: api.HostVolumeAccessModeSingleNodeWriter},
			{AttachmentMode: api.HostVolumeAttachmentModeFilesystem, AccessMode: api.HostVolumeAccessModeSingleNodeReader},
		},
		Parameters: map[string]string{
			"uid":  strconv.Itoa(spec.UID),
			"gid":  strconv.Itoa(spec.GID),
			"mode": "0700",
		},
		// The node pool may span datacenters the jobs that mount the
		// volume may not run in.
		Constraints: datacenterConstraints(b.opts.Datacenters),
	}
	resp, _, err := b.client.HostVolumes().Create(&api.HostVolumeCreateRequest{Volume: vol}, b.write(ctx))
	if err != nil {
		return classify("create host volume "+vol.Name, err)
	}
	// The next placement counts it, before its event arrives.
	b.mirror.created(resp.Volume)
	b.logger.Debug("created host volume", "workspace_id", spec.WorkspaceID, "volume", vol.Name, "node_id", node)
	return nil
}

// homeVolumes are every home volume, for counting homes per node: the
// mirror's while the event stream keeps it current, else a listing.
func (b *Backend) homeVolumes(ctx context.Context) ([]*api.HostVolumeStub, error) {
	if vols, ok := b.mirror.homeVolumes(time.Now()); ok {
		return vols, nil
	}
	q := b.query(ctx)
	q.Prefix = controller.NamePrefix
	vols, _, err := b.client.HostVolumes().List(nil, q)
	if err != nil {
		return nil, classify("list host volumes", err)
	}
	return vols, nil
}

// datacenterConstraints limits a volume to nodes in datacenters, which may
// hold "*" globs as a job's datacenters do; none when any datacenter will do.
func datacenterConstraints(datacenters []string) []*api.Constraint {
	alternatives := make([]string, 0, len(datacenters))
	for _, dc := range datacenters {
		if dc == "*" {
			return nil
		}
		alternatives = append(alternatives, strings.ReplaceAll(regexp.QuoteMeta(dc), `\*`, ".*"))
	}
	if len(alternatives) == 0 {
		return nil
	}
	return []*api.Constraint{{
		LTarget: "${node.datacenter}",
		Operand: "regexp",
		RTarget: "^(?:" + strings.Join(alternatives, "|") + ")$",
	}}
}

// DeleteVolume deletes the home volume the controller observed, by its id,
// and its data. A volume of the same name that replaced it since (two
// leaders, or a restore in between) has another id and is left alone; an
// id naming another workspace's volume is refused. While an allocation
// claims the volume it returns controller.ErrVolumeInUse.
func (b *Backend) DeleteVolume(ctx context.Context, wsID, volumeID string) error {
	if volumeID == "" {
		return fmt.Errorf("delete home volume of %s: no observed volume id", wsID)
	}
	vol, _, err := b.client.HostVolumes().Get(volumeID, b.query(ctx))
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return classify("read host volume "+volumeID, err)
	}
	if vol.Name != controller.VolumeName(wsID) {
		return fmt.Errorf("refusing to delete host volume %s: it is %q, not %s", volumeID, vol.Name, controller.VolumeName(wsID))
	}
	if len(vol.Allocations) > 0 {
		return fmt.Errorf("%w: %s claimed by %d allocation(s)", controller.ErrVolumeInUse, vol.Name, len(vol.Allocations))
	}
	// A node that is down or gone cannot run the plugin's delete: Nomad
	// then only forgets the volume, and its directory stays on that disk.
	force, err := b.nodeUnreachable(ctx, vol.NodeID)
	if err != nil {
		return err
	}
	_, _, err = b.client.HostVolumes().Delete(&api.HostVolumeDeleteRequest{ID: vol.ID, Force: force}, b.write(ctx))
	if err != nil && !isNotFound(err) {
		return classify("delete host volume "+vol.Name, err)
	}
	b.hostPaths.Delete(vol.ID)
	b.logger.Debug("deleted host volume", "workspace_id", wsID, "volume", vol.Name, "volume_id", vol.ID, "forced", force)
	return nil
}

// nodeUnreachable reports whether node id is down, disconnected or gone.
func (b *Backend) nodeUnreachable(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	n, _, err := b.client.Nodes().Info(id, b.query(ctx))
	if isNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, classify("read node "+id, err)
	}
	return n.Status != api.NodeStatusReady, nil
}

// hostPath is the directory of the home volume on its node, which raw_exec
// tasks get as their home because raw_exec cannot mount volumes. The
// mirror names the volume while it counts; only a volume it lacks is
// looked up.
func (b *Backend) hostPath(ctx context.Context, wsID string) (string, error) {
	stub := b.mirror.volumeNamed(controller.VolumeName(wsID), time.Now())
	if stub == nil {
		var err error
		if stub, err = b.findVolume(ctx, wsID); err != nil {
			return "", err
		}
	}
	if stub == nil {
		return "", noVolume(wsID)
	}
	if path, ok := b.hostPaths.Load(stub.ID); ok {
		return path.(string), nil
	}
	vol, _, err := b.client.HostVolumes().Get(stub.ID, b.query(ctx))
	if err != nil {
		return "", classify("read host volume "+stub.Name, err)
	}
	if vol.HostPath == "" {
		return "", fmt.Errorf("home volume %s has no host path yet (state %s)", vol.Name, vol.State)
	}
	// A volume keeps its host path for its whole life.
	b.hostPaths.Store(stub.ID, vol.HostPath)
	return vol.HostPath, nil
}

// noVolume reports that the home volume of wsID does not exist.
func noVolume(wsID string) error {
	return fmt.Errorf("%w: %s does not exist", controller.ErrNoVolume, controller.VolumeName(wsID))
}

// volumeHome is HomeDir for a job that uses the volume: under every driver
// the volume must exist, or Nomad would keep a job it can never place.
func (b *Backend) volumeHome(ctx context.Context, wsID string) (string, error) {
	if b.opts.Driver == DriverRawExec {
		return b.hostPath(ctx, wsID)
	}
	stub, err := b.findVolume(ctx, wsID)
	if err != nil {
		return "", err
	}
	if stub == nil {
		return "", noVolume(wsID)
	}
	return b.opts.Workspace.HomeDir, nil
}

// HomeDir is the home directory as the workspace's tasks see it: the mount
// point, or for raw_exec the volume's host path read from Nomad.
func (b *Backend) HomeDir(ctx context.Context, wsID string) (string, error) {
	if b.opts.Driver != DriverRawExec {
		return b.opts.Workspace.HomeDir, nil
	}
	return b.hostPath(ctx, wsID)
}

// errNoTokens reports upstream auth without a source of tokens.
var errNoTokens = errors.New("nomad: workspace upstream auth is on but the backend has no upstream tokens")

// StartWorkspace renders and registers ws-{id}, writing its upstream token
// variable first: the task's template waits for a variable that is missing.
// Registering the spec that is already running is skipped, and so is the
// variable write.
func (b *Backend) StartWorkspace(ctx context.Context, spec controller.WorkspaceSpec) error {
	home, err := b.volumeHome(ctx, spec.WorkspaceID)
	if err != nil {
		return err
	}
	hcl, err := b.RenderWorkspace(spec, home)
	if err != nil {
		return err
	}
	secrets, err := b.workspaceItems(spec)
	if err != nil {
		return err
	}
	return b.register(ctx, jobID(spec.WorkspaceID), hcl, secrets, b.stopArchiveVariable(spec)...)
}

// workspaceItems is what the job's own variable holds for a start of
// spec: the upstream token, and the environment files of the first-start
// task and of the program's user values (RenderWorkspace reads them from
// there). Nil when there is nothing.
func (b *Backend) workspaceItems(spec controller.WorkspaceSpec) (api.VariableItems, error) {
	items := api.VariableItems{}
	if b.opts.Workspace.UpstreamAuth {
		if b.opts.UpstreamToken == nil {
			return nil, errNoTokens
		}
		items["token"] = b.opts.UpstreamToken(spec.WorkspaceID, spec.RunID)
	}
	if b.runsAgent(spec) {
		items[jobspecs.ItemAgentToken] = b.opts.Agent.Token(spec.WorkspaceID, spec.RunID)
		items[jobspecs.ItemAgentHostKey] = agent.EncodeHostKey(b.opts.Agent.HostKey(spec.WorkspaceID))
	}
	if spec.FirstStart() {
		text, err := jobspecs.EnvFile(envVars(firststart.Env(spec.Repository, spec.Dotfiles, spec.GitToken, spec.Init, "")))
		if err != nil {
			return nil, fmt.Errorf("first start of %s: %w", spec.WorkspaceID, err)
		}
		items[jobspecs.ItemFirstStartEnv] = text
	}
	if len(spec.UserEnv) > 0 {
		text, err := jobspecs.EnvFile(jobspecs.SortedEnv(spec.UserEnv))
		if err != nil {
			return nil, fmt.Errorf("environment of %s: %w", spec.WorkspaceID, err)
		}
		items[jobspecs.ItemUserEnv] = text
	}
	if len(items) == 0 {
		return nil, nil
	}
	return items, nil
}

// runsAgent: the workspace runs under the agent. A docker workspace does
// when its entrypoint is known (workspace.entrypoint, or its template's):
// the agent is put in front of it, and cannot be put in front of an
// image's own ENTRYPOINT that it does not know.
func (b *Backend) runsAgent(spec controller.WorkspaceSpec) bool {
	if b.opts.Agent == nil {
		return false
	}
	if b.opts.Driver != DriverDocker {
		return true
	}
	return len(spec.Entrypoint) > 0 || (spec.Entrypoint == nil && len(b.opts.Workspace.Entrypoint) > 0)
}

// StopWorkspace deregisters ws-{id} without purging it, so its allocations
// stay visible until the client reports them terminal. With StopSave the
// variable of the job's stop-archive task stays, and the task archives the
// home once the program has stopped; with StopDiscard (a home about to be
// deleted) it is removed first, and the task archives nothing. A job that
// is stopped already is left as it is.
func (b *Backend) StopWorkspace(ctx context.Context, wsID string, mode controller.StopMode) error {
	if mode == controller.StopDiscard {
		if err := b.deleteVariable(ctx, stopVariablePath(wsID)); err != nil {
			return err
		}
	}
	id := jobID(wsID)
	job, _, err := b.client.Jobs().Info(id, b.query(ctx))
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return classify("read job "+id, err)
	case job.Stop != nil && *job.Stop:
		return nil
	}
	return b.deregister(ctx, id, false)
}

// GiveUpStopArchive sends SIGUSR1 to the stop-archive task of every live
// allocation of the workspace job where that task runs now: codehub job
// archive --on-stop then ends its attempt and exits 0 with its failure, so
// Nomad runs it no more and the allocation ends. Between attempts (Nomad's
// restart delay) there is nothing to signal; the controller's next pass
// asks again.
func (b *Backend) GiveUpStopArchive(ctx context.Context, wsID string) error {
	id := jobID(wsID)
	allocs, _, err := b.client.Jobs().Allocations(id, true, b.query(ctx))
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return classify("list allocations of "+id, err)
	}
	for _, a := range allocs {
		ts := a.TaskStates[stopArchiveTask]
		if clientTerminal(a.ClientStatus) || ts == nil || ts.State != "running" {
			continue
		}
		if err := b.client.Allocations().Signal(&api.Allocation{ID: a.ID}, b.query(ctx), stopArchiveTask, giveUpSignal); err != nil {
			return classify("signal the stop archive of "+a.ID, err)
		}
	}
	return nil
}

// giveUpSignal is what ends a stop archive's attempts (cmd/codehub's job).
const giveUpSignal = "SIGUSR1"

// stopArchiveVariable is the variable of the job's stop-archive task: it
// archives this run's home if something other than codehub stops it. A
// start without a run id (every start the controller makes has one) has
// no such task.
func (b *Backend) stopArchiveVariable(spec controller.WorkspaceSpec) []variable {
	if spec.RunID == "" {
		return nil
	}
	return []variable{{path: stopVariablePath(spec.WorkspaceID), items: api.VariableItems{
		"access_key": b.opts.S3.AccessKey.Reveal(),
		"secret_key": b.opts.S3.SecretKey.Reveal(),
		"run":        spec.RunID,
	}}}
}

// variable is a Nomad Variable a registration writes besides the job's own.
type variable struct {
	path  string
	items api.VariableItems
}

// deleteVariable deletes the variable at path; one that is gone is done.
func (b *Backend) deleteVariable(ctx context.Context, path string) error {
	if _, err := b.client.Variables().Delete(path, b.write(ctx)); err != nil && !isNotFound(err) {
		return classify("delete variable "+path, err)
	}
	return nil
}

// SubmitArchive writes the S3 credentials variable and registers the
// archive batch job for this attempt.
func (b *Backend) SubmitArchive(ctx context.Context, job controller.JobSpec) error {
	return b.submitBatch(ctx, controller.JobArchive, job)
}

// SubmitRestore is SubmitArchive for the restore job.
func (b *Backend) SubmitRestore(ctx context.Context, job controller.JobSpec) error {
	return b.submitBatch(ctx, controller.JobRestore, job)
}

func (b *Backend) submitBatch(ctx context.Context, kind controller.JobKind, job controller.JobSpec) error {
	home, err := b.volumeHome(ctx, job.WorkspaceID)
	if err != nil {
		return err
	}
	hcl, err := b.RenderBatch(kind, job, home)
	if err != nil {
		return err
	}
	id := controller.JobName(job.WorkspaceID, kind)
	s3 := api.VariableItems{
		"access_key": b.opts.S3.AccessKey.Reveal(),
		"secret_key": b.opts.S3.SecretKey.Reveal(),
	}
	if job.Build == nil {
		return b.register(ctx, id, hcl, s3)
	}
	// The build runs the template's init, the project's own code: each
	// task reads only its own variable, so it never gets the S3 keys.
	text, err := jobspecs.EnvFile(envVars(firststart.Env(job.Build.Repository, "", "", job.Build.Init, "")))
	if err != nil {
		return fmt.Errorf("prebuild of %s: %w", job.WorkspaceID, err)
	}
	return b.register(ctx, id, hcl, nil,
		variable{path: prebuildMoverVariable(id), items: s3},
		variable{path: prebuildBuildVariable(id), items: api.VariableItems{jobspecs.ItemFirstStartEnv: text}})
}

// The variables of a prebuild's archive job, one per task (job, group,
// task): the mover's S3 keys and the build's first-start environment.
func prebuildMoverVariable(jobID string) string {
	return variablePath(jobID) + "/" + jobspecs.MoverArchive + "/" + jobspecs.MoverArchive
}

func prebuildBuildVariable(jobID string) string {
	return variablePath(jobID) + "/" + jobspecs.MoverArchive + "/" + buildTask
}

// envVars splits NAME=value pairs.
func envVars(pairs []string) []jobspecs.EnvVar {
	env := make([]jobspecs.EnvVar, 0, len(pairs))
	for _, kv := range pairs {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, jobspecs.EnvVar{Name: name, Value: value})
	}
	return env
}

// writeVariableAt stores items at path, replacing what was there. Secrets
// of job id go to variablePath(id), where only that job's workload
// identity can read them.
func (b *Backend) writeVariableAt(ctx context.Context, path string, items api.VariableItems) error {
	v := &api.Variable{
		Namespace: b.opts.Namespace,
		Path:      path,
		Items:     items,
	}
	if _, _, err := b.client.Variables().Create(v, b.write(ctx)); err != nil {
		return classify("write variable "+v.Path, err)
	}
	return nil
}

// register submits job id from hcl unless a job from the same source is
// registered and not stopped: resubmitting an actuator is a no-op, and a
// finished batch job is never rerun by accident. A workspace job that
// nothing runs any more is purged first. secrets, when set, are written to
// the job's variable, and more to theirs, before the job: a template waits
// for a variable that is missing.
func (b *Backend) register(ctx context.Context, id, hcl string, secrets api.VariableItems, more ...variable) error {
	current, index, err := b.currentRegistration(ctx, id, hcl)
	if err != nil || current == registeredSame {
		return err
	}
	if current == registeredIdle {
		purged, err := b.purgeIdle(ctx, id)
		if err != nil {
			return err
		}
		if purged {
			current, index = registeredNone, 0
		}
	}
	if secrets != nil {
		more = append([]variable{{path: variablePath(id), items: secrets}}, more...)
	}
	// The variables and the parse do not depend on each other; only the
	// registration must follow the variables.
	var job api.Job
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return b.parse(gctx, id, hcl, &job) })
	for _, v := range more {
		g.Go(func() error { return b.writeVariableAt(gctx, v.path, v.items) })
	}
	err = g.Wait()
	if err == nil {
		err = b.submit(ctx, id, hcl, &job, index)
	}
	if err != nil && current == registeredNone && refused(err) {
		// No job reads the secrets, and no purge would ever name a job
		// that was never registered.
		for _, v := range more {
			if derr := b.deleteVariable(ctx, v.path); derr != nil {
				b.logger.Warn("delete variable of a refused job", "job_id", id, "path", v.path, "error", derr)
			}
		}
	}
	return err
}

// refused reports an error of a request Nomad answered with a client error:
// it did not carry it out.
func refused(err error) bool {
	var f *controller.Failure
	return errors.As(err, &f) && f.Reason == workspace.ReasonBackendError
}

// parse has the server parse hcl into job. It goes through Raw, so the
// request carries the namespace (ACL checks) and the context, which
// ParseHCLOpts does not pass.
func (b *Backend) parse(ctx context.Context, id, hcl string, job *api.Job) error {
	if _, err := b.client.Raw().Write("/v1/jobs/parse", &api.JobsParseRequest{JobHCL: hcl}, job, b.write(ctx)); err != nil {
		return classify("parse jobspec "+id, err)
	}
	return nil
}

// submit registers job, parsed from hcl, with hcl as its submission, only
// while the job's modify index is still index (0: only if no such job
// exists), so a job another leader registered or changed since it was
// judged is never overwritten: that registration fails and the next pass
// judges again.
func (b *Backend) submit(ctx context.Context, id, hcl string, job *api.Job, index uint64) error {
	opts := &api.RegisterOptions{
		EnforceIndex: true,
		ModifyIndex:  index,
		Submission:   &api.JobSubmission{Source: hcl, Format: "hcl2"},
	}
	resp, _, err := b.client.Jobs().RegisterOpts(job, opts, b.write(ctx))
	if err != nil {
		return classify("register job "+id, err)
	}
	b.registrations.Store(id, ownRegistration{source: sha256.Sum256([]byte(hcl)), index: resp.JobModifyIndex})
	b.logger.Debug("registered job", "job_id", id)
	return nil
}

// ownRegistration is a registration this backend made: its source's
// digest and the job modify index Nomad gave it.
type ownRegistration struct {
	source [sha256.Size]byte
	index  uint64
}

// sameAsOwn reports a job that still is this backend's own registration of
// hcl, as the mirror shows it: nothing changed its definition since (its
// modify index), and it neither was stopped nor died. A start repeated
// while Nomad places the job then reads nothing.
func (b *Backend) sameAsOwn(id, hcl string) (uint64, bool) {
	v, ok := b.registrations.Load(id)
	if !ok {
		return 0, false
	}
	own := v.(ownRegistration)
	j := b.mirror.job(id, time.Now())
	if own.index == 0 || j == nil || j.JobModifyIndex != own.index || j.Stop || j.Status == jobStatusDead ||
		own.source != sha256.Sum256([]byte(hcl)) {
		return 0, false
	}
	return own.index, true
}

// registration is how job id stands against the source a submission would
// register.
type registration int

const (
	// registeredNone: there is no such job.
	registeredNone registration = iota
	// registeredOther: a job that registering hcl changes.
	registeredOther
	// registeredSame: the job runs from this source, or finished from it.
	registeredSame
	// registeredIdle: a service job that is stopped, or dead because its
	// allocations failed. Nomad keeps a failed allocation that may not be
	// rescheduled in place of a new one, even across a stop and a
	// registration of an unchanged job, so only a new job runs again.
	registeredIdle
)

// jobStatusDead is Nomad's status of a job with no allocation left to run.
const jobStatusDead = "dead"

// currentRegistration judges the registered job id against hcl, and returns
// its modify index (0 for none), which the registration that follows must
// still find.
func (b *Backend) currentRegistration(ctx context.Context, id, hcl string) (registration, uint64, error) {
	if index, ok := b.sameAsOwn(id, hcl); ok {
		return registeredSame, index, nil
	}
	if r, index, ok := b.judgedByMirror(id); ok {
		return r, index, nil
	}
	current, _, err := b.client.Jobs().Info(id, b.query(ctx))
	if isNotFound(err) {
		return registeredNone, 0, nil
	}
	if err != nil {
		return registeredOther, 0, classify("read job "+id, err)
	}
	var index uint64
	if current.JobModifyIndex != nil {
		index = *current.JobModifyIndex
	}
	r, err := b.judgeRegistration(ctx, id, hcl, current)
	return r, index, err
}

// judgedByMirror judges job id from the mirror alone where a mirror that
// lags cannot mislead: no such job (the registration then requires that
// none exists, so one the mirror has not seen yet makes it fail, not be
// overwritten). It judges no job it holds: telling a job's source apart
// takes its submission, and a job it shows idle is purged next, which
// Nomad cannot make conditional on the job being still the one judged.
// Nor does it judge a job this backend registered since.
func (b *Backend) judgedByMirror(id string) (registration, uint64, bool) {
	if !b.mirror.lacksJob(id, time.Now()) {
		return 0, 0, false
	}
	if _, mine := b.registrations.Load(id); mine {
		return 0, 0, false
	}
	return registeredNone, 0, true
}

func (b *Backend) judgeRegistration(ctx context.Context, id, hcl string, current *api.Job) (registration, error) {
	service := current.Type != nil && *current.Type == api.JobTypeService
	stopped := current.Stop != nil && *current.Stop
	dead := current.Status != nil && *current.Status == jobStatusDead
	switch {
	case service && (stopped || dead):
		return registeredIdle, nil
	case stopped || current.Version == nil:
		return registeredOther, nil
	}
	sub, _, err := b.client.Jobs().Submission(id, int(*current.Version), b.query(ctx))
	if isNotFound(err) {
		return registeredOther, nil
	}
	if err != nil {
		return registeredOther, classify("read job submission "+id, err)
	}
	if sub == nil || sub.Source != hcl {
		return registeredOther, nil
	}
	return registeredSame, nil
}

// purgeIdle purges an idle service job once none of its allocations is
// live, so the registration that follows starts a new job, and reports
// whether it did. With a live allocation (a stopped task still being
// killed) the job is kept: the registration replaces that allocation as
// usual. The allocations are read from Nomad, not from the mirror, which
// may not show yet one placed since: a purge deletes them with the job.
func (b *Backend) purgeIdle(ctx context.Context, id string) (bool, error) {
	allocs, _, err := b.client.Jobs().Allocations(id, true, b.query(ctx))
	if err != nil && !isNotFound(err) {
		return false, classify("list allocations of "+id, err)
	}
	if len(liveAllocs(allocs)) > 0 {
		return false, nil
	}
	if err := b.deregister(ctx, id, true); err != nil {
		return false, err
	}
	for _, a := range allocs {
		b.allocs.forget(a.ID)
	}
	b.logger.Debug("purged idle job before registering it again", "job_id", id)
	return true, nil
}

// liveAllocs describes the allocations that may still run.
func liveAllocs(allocs []*api.AllocationListStub) []string {
	var live []string
	for _, a := range allocs {
		if !clientTerminal(a.ClientStatus) {
			live = append(live, fmt.Sprintf("allocation %s is %s", a.ID, a.ClientStatus))
		}
	}
	return live
}

// deregister stops job id, purging it when purge is set; a job that is
// already gone is done.
func (b *Backend) deregister(ctx context.Context, id string, purge bool) error {
	op := "stop job "
	if purge {
		op = "purge job "
	}
	if _, _, err := b.client.Jobs().Deregister(id, purge, b.write(ctx)); err != nil && !isNotFound(err) {
		return classify(op+id, err)
	}
	return nil
}

// StopJob stops a batch job without purging it; PurgeJob forgets it once
// its allocations are terminal. A job that finished is left alone: Nomad
// records a stop as a new registration, after which the finished
// allocation would count as an earlier attempt's and its result be lost.
func (b *Backend) StopJob(ctx context.Context, wsID string, kind controller.JobKind) error {
	if kind == controller.JobWorkspace {
		return fmt.Errorf("stop job of %s: %q is not a batch job kind", wsID, kind)
	}
	id := controller.JobName(wsID, kind)
	job, _, err := b.client.Jobs().Info(id, b.query(ctx))
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return classify("read job "+id, err)
	}
	if job.Status != nil && *job.Status == jobStatusDead {
		return nil
	}
	return b.deregister(ctx, id, false)
}

// PurgeJob forgets a job and its variables (S3 keys, upstream token, a
// prebuild's build environment). A workspace job is only purged once none
// of its allocations is live: a purged job would hide a running
// container.
func (b *Backend) PurgeJob(ctx context.Context, wsID string, kind controller.JobKind) error {
	id := controller.JobName(wsID, kind)
	allocs, _, err := b.client.Jobs().Allocations(id, true, b.query(ctx))
	if err != nil && !isNotFound(err) {
		return classify("list allocations of "+id, err)
	}
	if err := controller.RefusePurge(id, liveAllocs(allocs)...); err != nil {
		return err
	}
	if err := b.deregister(ctx, id, true); err != nil {
		return err
	}
	b.registrations.Delete(id)
	for _, a := range allocs {
		b.allocs.forget(a.ID)
	}
	paths := []string{variablePath(id)}
	switch kind {
	case controller.JobWorkspace:
		paths = append(paths, stopVariablePath(wsID))
	case controller.JobArchive:
		// A prebuild's tasks have one each.
		paths = append(paths, prebuildMoverVariable(id), prebuildBuildVariable(id))
	}
	for _, path := range paths {
		if err := b.deleteVariable(ctx, path); err != nil {
			return err
		}
	}
	return nil
}

// RenderWorkspace returns the HCL StartWorkspace would submit; home is the
// home directory the task sees (the host path for raw_exec).
func (b *Backend) RenderWorkspace(spec controller.WorkspaceSpec, home string) (string, error) {
	w := b.opts.Workspace
	v := b.commonValues(spec.WorkspaceID, jobID(spec.WorkspaceID), home)
	v.OwnerID = spec.OwnerID
	v.RunID = spec.RunID
	v.Image = or(spec.Image, w.Image)
	v.Entrypoint = w.Entrypoint
	if spec.Entrypoint != nil {
		v.Entrypoint = spec.Entrypoint
	}
	v.Command = or(spec.Command, w.Command)
	v.Args = w.Args
	if spec.Args != nil {
		v.Args = spec.Args
	}
	v.Port = containerPort(w)
	v.NetworkMode = w.NetworkMode
	v.UID, v.GID = w.UID, w.GID
	v.CPU, v.Memory, v.MemoryMax = or(spec.CPU, w.CPU), or(spec.Memory, w.Memory), spec.MemoryMax
	v.Env = jobspecs.SortedEnv(spec.Env)
	v.Service = serviceName(spec.WorkspaceID)
	v.Provider = b.opts.ServiceProvider
	v.CheckInterval = b.opts.CheckInterval.String()
	if w.UpstreamAuth {
		v.TokenVariablePath = variablePath(jobID(spec.WorkspaceID))
	}
	if spec.RunID != "" {
		// The archive is named after the run whose writes it holds
		// (stopArchiveVariable).
		v.StopArchiveURL = archive.URL(b.opts.S3.Bucket, archive.Key(spec.WorkspaceID, spec.RunID))
		v.ArchiveParent = spec.ParentArchive
		v.StopVariablePath = stopVariablePath(spec.WorkspaceID)
		b.moverValues(&v)
	}
	// After the mover values, which the stop-archive task uses.
	if b.runsAgent(spec) {
		v.AgentVariablePath = variablePath(jobID(spec.WorkspaceID))
		v.CodehubPath, v.ArtifactURL, v.ArtifactChecksum = b.opts.CodehubPath, b.opts.ArtifactURL, b.opts.ArtifactChecksum
		if b.opts.Driver == DriverDocker {
			v.ArtifactURL, v.ArtifactChecksum = b.opts.AgentArchiveURL, b.opts.AgentArchiveChecksum
		}
	}
	if spec.FirstStart() {
		v.FirstStartScript = firststart.Script
		v.FirstStartVariablePath = variablePath(jobID(spec.WorkspaceID))
		v.FirstStartInit = len(spec.Init) > 0
	}
	if len(spec.UserEnv) > 0 {
		v.UserEnvVariablePath = variablePath(jobID(spec.WorkspaceID))
	}
	return b.renderer.Render(jobspecs.KindWorkspace, v)
}

// or is value, or fallback when value is the zero value.
func or[T comparable](value, fallback T) T {
	var zero T
	if value == zero {
		return fallback
	}
	return value
}

// containerPort is the port a docker workspace's program listens on in its
// own network namespace. Under host networking it has none: docker ignores
// port mappings there, but Nomad would still set NOMAD_PORT_http to a
// mapping's target while the service and its check use the host port.
func containerPort(w WorkspaceOptions) int {
	if w.NetworkMode == "host" {
		return 0
	}
	return w.Port
}

// RenderBatch returns the HCL of an archive or restore job attempt.
func (b *Backend) RenderBatch(kind controller.JobKind, job controller.JobSpec, home string) (string, error) {
	id := controller.JobName(job.WorkspaceID, kind)
	v := b.commonValues(job.WorkspaceID, id, home)
	v.OpID = job.OpID
	v.ArchiveKey = job.ArchiveKey
	v.Attempt = job.Attempt
	v.ArchiveURL = archive.URL(b.opts.S3.Bucket, job.ArchiveKey)
	if kind == controller.JobArchive {
		v.ArchiveParent = job.Parent
		v.Backup = job.Backup
	}
	v.NetworkMode = b.opts.Workspace.NetworkMode
	v.UID, v.GID = b.opts.Workspace.UID, b.opts.Workspace.GID
	b.moverValues(&v)
	v.VariablePath = variablePath(id)
	if job.Build != nil {
		if kind != controller.JobArchive {
			return "", fmt.Errorf("%s job of %s: only an archive job builds", kind, job.WorkspaceID)
		}
		buildValues(&v, *job.Build, b.opts.Workspace)
		v.VariablePath = prebuildMoverVariable(id)
		v.FirstStartVariablePath = prebuildBuildVariable(id)
	}
	var k jobspecs.Kind
	switch kind {
	case controller.JobArchive:
		k = jobspecs.KindArchive
	case controller.JobRestore:
		k = jobspecs.KindRestore
	default:
		return "", fmt.Errorf("not a batch job kind: %q", kind)
	}
	return b.renderer.Render(k, v)
}

// buildValues sets what a prebuild's build task runs: the first start of
// the template's image, with its environment and, for init, its
// resources.
func buildValues(v *jobspecs.Values, spec controller.WorkspaceSpec, w WorkspaceOptions) {
	v.Prebuild = true
	v.FirstStartScript = firststart.Script
	v.FirstStartInit = len(spec.Init) > 0
	v.Image = or(spec.Image, w.Image)
	v.Env = jobspecs.SortedEnv(spec.Env)
	v.CPU, v.Memory, v.MemoryMax = or(spec.CPU, w.CPU), or(spec.Memory, w.Memory), spec.MemoryMax
}

// moverValues sets how a task runs the data mover (codehub job) and
// reaches S3.
func (b *Backend) moverValues(v *jobspecs.Values) {
	v.JobImage = b.opts.JobImage
	v.CodehubPath = b.opts.CodehubPath
	v.ArtifactURL = b.opts.ArtifactURL
	v.ArtifactChecksum = b.opts.ArtifactChecksum
	v.S3Endpoint = b.opts.S3.Endpoint
	v.S3Region = b.opts.S3.Region
	v.S3UseSSL = b.opts.S3.UseSSL
}

func (b *Backend) commonValues(wsID, id, home string) jobspecs.Values {
	return jobspecs.Values{
		JobID:       id,
		WorkspaceID: wsID,
		Namespace:   b.opts.Namespace,
		Region:      b.opts.Region,
		NodePool:    b.opts.NodePool,
		Datacenters: b.opts.Datacenters,
		Driver:      b.opts.Driver,
		VolumeName:  controller.VolumeName(wsID),
		HomeDir:     home,
	}
}
