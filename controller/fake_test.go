package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// fakeBackend models volumes, workspace containers and archive/restore
// jobs of one node in memory. Things take time: each Observe moves every
// pending thing one stage on (a volume is created, a container comes up
// then passes its check, a job runs then finishes), so completion is only
// ever seen on a later pass. Failures and hooks are injectable.
type fakeBackend struct {
	mu sync.Mutex
	// observed, when set, runs as Observe returns: what happens between a
	// pass's observation and its actions.
	observed func()
	// beforeRestore runs before a restore job overwrites a volume.
	beforeRestore func(wsID string)
	// volumesMade numbers the volumes, which get ids as Nomad's do.
	volumesMade int
	volumes     map[string]*fakeVolume
	conts       map[string]*fakeContainer
	archives    map[string]*fakeJob
	restores    map[string]*fakeJob
	store       *fakeArchives

	// calls counts every call by method name.
	calls map[string]int
	// fail makes the next call of a method return the error.
	fail map[string]error
	// jobFail makes the next finishing job of a kind fail with the code.
	jobFail map[JobKind]string
	// hold keeps jobs running (a slow archive) while set.
	hold bool
	// beforeDeleteVolume runs before a volume is really deleted.
	beforeDeleteVolume func(wsID string)
	// afterActuator runs after each actuator call with its effect applied.
	afterActuator func(method string)
	// crashBefore runs before an actuator's effect; true drops the call
	// as if the process died just before it.
	crashBefore func() bool
	// deletedWithData records volumes deleted while holding data.
	deletedWithData []string
}

type fakeVolume struct {
	id    string
	ready bool
	// unavailable: the volume's node is down (Nomad reports the volume
	// as existing but not ready until the node is back).
	unavailable bool
	data        string
}

type fakeContainer struct {
	stage    int // 0 pending, 1 running, 2 passing checks
	stopping bool
	runID    string
	// spec is what the container was started with.
	spec WorkspaceSpec
}

type fakeJob struct {
	spec   JobSpec
	stage  int // 0 pending, 1 running, 2 finished
	failed string
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{
		volumes:  map[string]*fakeVolume{},
		conts:    map[string]*fakeContainer{},
		archives: map[string]*fakeJob{},
		restores: map[string]*fakeJob{},
		store:    newFakeArchives(),
		calls:    map[string]int{},
		fail:     map[string]error{},
		jobFail:  map[JobKind]string{},
	}
}

var _ Backend = (*fakeBackend)(nil)

// call counts a call and returns an injected failure, if any. A call
// under a cancelled context has no effect: the caller is gone.
func (b *fakeBackend) call(ctx context.Context, method string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if method != "Observe" && b.crashBefore != nil && b.crashBefore() {
		return context.Canceled
	}
	b.calls[method]++
	if err, ok := b.fail[method]; ok {
		delete(b.fail, method)
		return err
	}
	return nil
}

func (b *fakeBackend) acted(method string) {
	if b.afterActuator != nil {
		b.afterActuator(method)
	}
}

func (b *fakeBackend) Observe(ctx context.Context) (Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, "Observe"); err != nil {
		return Snapshot{}, err
	}
	b.advance()
	if b.observed != nil {
		defer b.observed()
	}
	snap := Snapshot{Workspaces: map[string]Observed{}}
	get := func(id string) Observed { return snap.Workspaces[id] }
	for id, v := range b.volumes {
		o := get(id)
		o.VolumeExists, o.VolumeReady, o.VolumeID = true, v.ready && !v.unavailable, v.id
		snap.Workspaces[id] = o
	}
	for id, c := range b.conts {
		o := get(id)
		o.ContainerLive = true
		o.UpstreamReady = c.stage >= 2 && !c.stopping
		snap.Workspaces[id] = o
	}
	for id, j := range b.archives {
		o := get(id)
		o.Archive = j.result()
		snap.Workspaces[id] = o
	}
	for id, j := range b.restores {
		o := get(id)
		o.Restore = j.result()
		snap.Workspaces[id] = o
	}
	return snap, nil
}

func (j *fakeJob) result() *JobResult {
	r := &JobResult{OpID: j.spec.OpID, ArchiveKey: j.spec.ArchiveKey, Attempt: j.spec.Attempt, Status: JobPending}
	switch {
	case j.stage == 1:
		r.Status = JobRunning
	case j.stage >= 2 && j.failed != "":
		r.Status, r.ExitCode, r.ErrorCode = JobFailed, 1, archive.Code(j.failed)
	case j.stage >= 2:
		r.Status = JobSucceeded
	}
	return r
}

// advance moves everything one stage on.
func (b *fakeBackend) advance() {
	for _, v := range b.volumes {
		v.ready = true
	}
	for id, c := range b.conts {
		if c.stopping {
			delete(b.conts, id)
			continue
		}
		c.stage++
	}
	if b.hold {
		return
	}
	for id, j := range b.archives {
		b.step(id, j, JobArchive)
	}
	for id, j := range b.restores {
		b.step(id, j, JobRestore)
	}
}

func (b *fakeBackend) step(wsID string, j *fakeJob, kind JobKind) {
	if j.stage >= 2 {
		return
	}
	j.stage++
	if j.stage < 2 {
		return
	}
	if code, ok := b.jobFail[kind]; ok {
		delete(b.jobFail, kind)
		j.failed = code
		return
	}
	v := b.volumes[wsID]
	if v == nil {
		j.failed = "UNKNOWN"
		return
	}
	switch kind {
	case JobArchive:
		if _, err := b.store.Stat(context.Background(), j.spec.ArchiveKey); err == nil {
			return // idempotent: a complete archive is left alone
		}
		b.store.put(j.spec.ArchiveKey, v.data)
	case JobRestore:
		data, ok := b.store.data(j.spec.ArchiveKey)
		if !ok {
			j.failed = string(archive.CodeArchiveNotFound)
			return
		}
		if b.beforeRestore != nil {
			b.beforeRestore(wsID)
		}
		v.data = data
	}
}

func (b *fakeBackend) ProvisionVolume(ctx context.Context, spec VolumeSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, "ProvisionVolume"); err != nil {
		return err
	}
	if b.volumes[spec.WorkspaceID] == nil {
		b.volumesMade++
		b.volumes[spec.WorkspaceID] = &fakeVolume{id: fmt.Sprintf("vol-%d", b.volumesMade)}
	}
	b.acted("ProvisionVolume")
	return nil
}

func (b *fakeBackend) DeleteVolume(ctx context.Context, wsID, volumeID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, "DeleteVolume"); err != nil {
		return err
	}
	if b.conts[wsID] != nil || running(b.archives[wsID]) || running(b.restores[wsID]) {
		return ErrVolumeInUse
	}
	if v := b.volumes[wsID]; v != nil && v.id == volumeID {
		if b.beforeDeleteVolume != nil {
			b.beforeDeleteVolume(wsID)
		}
		if v.data != "" {
			b.deletedWithData = append(b.deletedWithData, wsID)
		}
		delete(b.volumes, wsID)
	}
	b.acted("DeleteVolume")
	return nil
}

func running(j *fakeJob) bool { return j != nil && j.stage < 2 }

func (b *fakeBackend) StartWorkspace(ctx context.Context, spec WorkspaceSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, "StartWorkspace"); err != nil {
		return err
	}
	if v := b.volumes[spec.WorkspaceID]; v == nil || !v.ready {
		return &Failure{Reason: "Unschedulable", Message: "volume not ready"}
	}
	if b.conts[spec.WorkspaceID] == nil {
		b.conts[spec.WorkspaceID] = &fakeContainer{runID: spec.RunID, spec: spec}
	}
	b.acted("StartWorkspace")
	return nil
}

func (b *fakeBackend) GiveUpStopArchive(ctx context.Context, _ string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, "GiveUpStopArchive"); err != nil {
		return err
	}
	b.acted("GiveUpStopArchive")
	return nil
}

func (b *fakeBackend) StopWorkspace(ctx context.Context, wsID string, _ StopMode) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, "StopWorkspace"); err != nil {
		return err
	}
	if c := b.conts[wsID]; c != nil {
		c.stopping = true
	}
	b.acted("StopWorkspace")
	return nil
}

func (b *fakeBackend) submit(ctx context.Context, method string, jobs map[string]*fakeJob, spec JobSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, method); err != nil {
		return err
	}
	if b.volumes[spec.WorkspaceID] == nil {
		return errors.New("volume not found")
	}
	// Registering the same attempt again changes nothing, like Nomad.
	if j := jobs[spec.WorkspaceID]; j == nil || j.spec != spec {
		jobs[spec.WorkspaceID] = &fakeJob{spec: spec}
	}
	b.acted(method)
	return nil
}

func (b *fakeBackend) SubmitArchive(ctx context.Context, job JobSpec) error {
	return b.submit(ctx, "SubmitArchive", b.archives, job)
}

func (b *fakeBackend) SubmitRestore(ctx context.Context, job JobSpec) error {
	return b.submit(ctx, "SubmitRestore", b.restores, job)
}

func (b *fakeBackend) jobs(kind JobKind) map[string]*fakeJob {
	if kind == JobRestore {
		return b.restores
	}
	return b.archives
}

func (b *fakeBackend) StopJob(ctx context.Context, wsID string, kind JobKind) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, "StopJob"); err != nil {
		return err
	}
	if j := b.jobs(kind)[wsID]; j != nil && j.stage < 2 {
		// Killed: it ends without its result line.
		j.stage, j.failed = 2, "UNKNOWN"
	}
	b.acted("StopJob")
	return nil
}

func (b *fakeBackend) PurgeJob(ctx context.Context, wsID string, kind JobKind) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(ctx, "PurgeJob"); err != nil {
		return err
	}
	if kind != JobWorkspace {
		// As every backend: a job that still runs is not purged.
		if j := b.jobs(kind)[wsID]; running(j) {
			return fmt.Errorf("refusing to purge the %s job of %s: it is running", kind, wsID)
		}
		delete(b.jobs(kind), wsID)
	}
	b.acted("PurgeJob")
	return nil
}

// actuatorCalls counts every call except Observe.
func (b *fakeBackend) actuatorCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for m, c := range b.calls {
		if m != "Observe" {
			n += c
		}
	}
	return n
}

func (b *fakeBackend) count(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[method]
}

// nodeDown takes the node of a workspace's volume away (down: its
// container is lost, its volume unavailable) or brings it back.
func (b *fakeBackend) nodeDown(wsID string, down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.volumes[wsID].unavailable = down
	if down {
		delete(b.conts, wsID)
	}
}

// volumeState is the state of a workspace's volume as an observation
// would report it now. The caller holds b.mu.
func (b *fakeBackend) volumeState(wsID string) workspace.VolumeState {
	switch v := b.volumes[wsID]; {
	case v == nil:
		return workspace.VolumeAbsent
	case v.ready && !v.unavailable:
		return workspace.VolumeReady
	}
	return workspace.VolumeUnready
}

// loseNode removes a workspace's volume and container for good: the node
// they were on is gone.
func (b *fakeBackend) loseNode(wsID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.volumes, wsID)
	delete(b.conts, wsID)
}

// writeHome puts data on a workspace's volume (the user's files).
func (b *fakeBackend) writeHome(wsID, data string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.volumes[wsID].data = data
}

func (b *fakeBackend) home(wsID string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.volumes[wsID]
	if v == nil {
		return "", false
	}
	return v.data, true
}

// specOf is what the workspace's container was started with.
func (b *fakeBackend) specOf(wsID string) WorkspaceSpec {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.conts[wsID]; c != nil {
		return c.spec
	}
	return WorkspaceSpec{}
}

// runOf is the run the workspace's container was started for.
func (b *fakeBackend) runOf(wsID string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.conts[wsID]; c != nil {
		return c.runID
	}
	return ""
}

// resources lists what exists for a workspace, for orphan checks.
func (b *fakeBackend) resources(wsID string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	if b.volumes[wsID] != nil {
		out = append(out, "volume")
	}
	if b.conts[wsID] != nil {
		out = append(out, "container")
	}
	if b.archives[wsID] != nil {
		out = append(out, "archive-job")
	}
	if b.restores[wsID] != nil {
		out = append(out, "restore-job")
	}
	return out
}

// fakeArchives is the archive bucket: objects with meta.
type fakeArchives struct {
	mu      sync.Mutex
	objects map[string]string
	// incomplete are archives missing their meta or their object, by key,
	// with the time their remaining half was written.
	incomplete map[string]time.Time
	// listed, when set, runs after List answers (outside the lock): what
	// happens once a reader has seen the bucket.
	listed func()
	// puts counts writes per key: more than one is a duplicate upload.
	puts map[string]int
	// chains are the chains (archive.Meta.Chain) of incremental archives.
	chains map[string][]string
	// uploads are unfinished multipart uploads by id.
	uploads map[string]archive.Upload
	fail    map[string]error
	calls   map[string]int
	// crashBefore and afterWrite are the crash hooks of the backend,
	// applied to CreateEmpty, the controller's own archive write.
	crashBefore func() bool
	afterWrite  func(method string)
}

func newFakeArchives() *fakeArchives {
	return &fakeArchives{objects: map[string]string{}, incomplete: map[string]time.Time{}, puts: map[string]int{}, chains: map[string][]string{},
		uploads: map[string]archive.Upload{}, fail: map[string]error{}, calls: map[string]int{}}
}

var _ ArchiveStore = (*fakeArchives)(nil)

func (s *fakeArchives) call(method string) error {
	s.calls[method]++
	if err, ok := s.fail[method]; ok {
		delete(s.fail, method)
		return err
	}
	return nil
}

func (s *fakeArchives) put(key, data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[key] = data
	s.puts[key]++
}

func (s *fakeArchives) data(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.objects[key]
	return d, ok
}

func (s *fakeArchives) CreateEmpty(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.crashBefore != nil && s.crashBefore() {
		return context.Canceled
	}
	s.mu.Lock()
	if err := s.call("CreateEmpty"); err != nil {
		s.mu.Unlock()
		return err
	}
	_, exists := s.objects[key]
	s.mu.Unlock()
	if !exists {
		s.put(key, "")
	}
	if s.afterWrite != nil {
		s.afterWrite("CreateEmpty")
	}
	return nil
}

func (s *fakeArchives) Stat(ctx context.Context, key string) (archive.Meta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("Stat"); err != nil {
		return archive.Meta{}, err
	}
	d, ok := s.objects[key]
	if !ok {
		return archive.Meta{}, fmt.Errorf("stat %s: %w", key, archive.ErrArchiveNotFound)
	}
	meta := archive.Meta{Size: int64(len(d)), Format: archive.Format, CreatedAt: time.Unix(0, 0)}
	if chain := s.chains[key]; len(chain) > 0 {
		meta.Parent, meta.Chain = chain[0], chain
	}
	return meta, nil
}

func (s *fakeArchives) List(ctx context.Context, workspaceID string) (archive.Listing, error) {
	l, err := s.list(workspaceID)
	if err == nil && s.listed != nil {
		s.listed()
	}
	return l, err
}

func (s *fakeArchives) list(workspaceID string) (archive.Listing, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("List"); err != nil {
		return archive.Listing{}, err
	}
	var l archive.Listing
	prefix := "archives/" + workspaceID + "/"
	for k := range s.objects {
		if strings.HasPrefix(k, prefix) {
			l.Complete = append(l.Complete, k)
		}
	}
	for k, at := range s.incomplete {
		if strings.HasPrefix(k, prefix) {
			l.Incomplete = append(l.Incomplete, archive.Object{Key: k, Modified: at})
		}
	}
	slices.Sort(l.Complete)
	slices.Reverse(l.Complete)
	slices.SortFunc(l.Incomplete, func(a, b archive.Object) int { return strings.Compare(a.Key, b.Key) })
	return l, nil
}

func (s *fakeArchives) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("Delete"); err != nil {
		return err
	}
	delete(s.objects, key)
	delete(s.incomplete, key)
	return nil
}

func (s *fakeArchives) Unfinished(ctx context.Context, workspaceID string) ([]archive.Upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("Unfinished"); err != nil {
		return nil, err
	}
	var out []archive.Upload
	for _, u := range s.uploads {
		if strings.HasPrefix(u.Key, "archives/"+workspaceID+"/") {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b archive.Upload) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (s *fakeArchives) AbortUpload(ctx context.Context, u archive.Upload) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.call("AbortUpload"); err != nil {
		return err
	}
	delete(s.uploads, u.ID)
	return nil
}

// keys are the complete archives of a workspace, oldest first.
func (s *fakeArchives) keys(workspaceID string) []string {
	l, _ := s.list(workspaceID)
	slices.Reverse(l.Complete)
	return l.Complete
}
