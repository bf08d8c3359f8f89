package nomad

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

// Allocation client statuses that mean the task is gone for good.
func clientTerminal(status string) bool {
	switch status {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

// listing is the raw result of one observation's list calls plus the few
// targeted reads they made necessary.
type listing struct {
	jobs    []*api.JobListStub
	allocs  []*api.AllocationListStub
	volumes []*api.HostVolumeStub
	// nodes are every client node, by id: where each volume is and
	// whether that node can serve it.
	nodes    map[string]*api.NodeListStub
	services map[string]bool // nil: readiness not gated on registration
	// checks holds per-allocation check results of workspaces being started.
	checks map[string]api.AllocCheckStatuses
	// ownRegistration holds the starting allocations whose checks pass and
	// whose own registration the server has: any job may register a
	// service named ws-{id}, so only that one counts.
	ownRegistration map[string]bool
	// answered holds the starting allocations whose program answered a
	// direct probe.
	answered map[string]answer
	// outputs holds the end of the stderr of failed workspace allocations.
	outputs map[string]string
	// errorCodes holds CODEHUB_ERROR of failed batch allocations.
	errorCodes map[string]archive.Code
	// stops holds the result of the stop-archive task of workspace
	// allocations that something other than codehub stopped.
	stops map[string]archive.Outcome
	// placement describes why a job's allocation cannot be placed.
	placement map[string]string

	// installs is the mirror's installed listing the objects come from
	// (0: a listing no mirror holds); only, when set, the workspaces whose
	// objects they are, the rest unchanged since the last observation.
	installs uint64
	only     map[string]bool
}

// Observe starts from codehub's jobs, allocations, host volumes and (for
// native services) service names: listed once each, or, while Nomad's
// event stream keeps the mirror current, those of the workspaces that may
// have changed since the last observation. Beyond that it reads check
// results only for workspaces whose health is not known yet, task events
// only of allocations that are starting, stopping or failed and came
// without them, logs only of failed jobs and of stop archives (once per
// allocation), and summaries and evaluations only of jobs without an
// allocation.
func (b *Backend) Observe(ctx context.Context) (controller.Snapshot, error) {
	snap, err := b.observe(ctx)
	if err != nil {
		// Whatever changed since the last observation is observed again.
		b.last = nil
	}
	return snap, err
}

func (b *Backend) observe(ctx context.Context) (controller.Snapshot, error) {
	l, err := b.list(ctx)
	if err != nil {
		return controller.Snapshot{}, err
	}
	byID := managedJobs(l.jobs)
	current := currentAllocs(byID, l.allocs)
	// unsettled are the workspaces whose observation may change without
	// an event: allocations Nomad has not finished with, jobs without
	// one, and reads that failed.
	var mu sync.Mutex
	unsettled := make(map[string]bool)
	retry := func(jobID string) {
		wsID, _, _ := controller.ParseJobName(jobID)
		mu.Lock()
		defer mu.Unlock()
		unsettled[wsID] = true
	}
	for _, wsID := range b.reviveVolumes(ctx, l) {
		unsettled[wsID] = true
	}
	unfinished := func(allocs []*api.AllocationListStub) []*api.AllocationListStub {
		for _, a := range allocs {
			if !clientTerminal(a.ClientStatus) {
				retry(a.JobID)
			}
		}
		return allocs
	}

	// Nomad reports check results only for its own service provider; with
	// Consul, readiness waits for the deployment health Consul's checks set.
	// A direct probe may find the program answering before the check.
	if b.opts.ServiceProvider == ProviderNomad {
		starting := unfinished(allocsNeedingChecks(byID, current))
		keep := make(map[string]bool, len(starting))
		p := b.prober.Load()
		for _, a := range starting {
			keep[a.ID] = true
			if p != nil {
				p.offer(a.ID, nil)
			}
		}
		l.answered = b.answered.snapshot(keep)
		l.checks, l.ownRegistration = b.readChecks(ctx, starting, l.answered)
	}
	if err := b.readTaskStates(ctx, unfinished(allocsNeedingEvents(byID, current))); err != nil {
		return controller.Snapshot{}, err
	}

	// The reads below fill a map each, under one lock.
	l.errorCodes = make(map[string]archive.Code)
	l.outputs = make(map[string]string)
	forEach(failedBatchAllocs(byID, current), func(a *api.AllocationListStub) error {
		if buildFailed(a) {
			// A prebuild's build failed: the mover never ran, the
			// build's own output says why.
			out, err := b.failedOutput(ctx, a, buildTask)
			if err != nil {
				b.logger.Warn("read failed build output", "job_id", a.JobID, "alloc_id", a.ID, "error", err)
				retry(a.JobID)
			}
			mu.Lock()
			defer mu.Unlock()
			l.errorCodes[a.ID], l.outputs[a.ID] = archive.CodeBuildFailed, out
			return nil
		}
		code, err := b.errorCode(ctx, a)
		if err != nil {
			b.logger.Warn("read failed job output", "job_id", a.JobID, "alloc_id", a.ID, "error", err)
			retry(a.JobID)
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		l.errorCodes[a.ID] = code
		return nil
	})

	l.stops = make(map[string]archive.Outcome)
	var stopped []*api.AllocationListStub
	for _, a := range unfinished(stoppedWorkspaceAllocs(byID, current)) {
		if clientTerminal(a.ClientStatus) {
			stopped = append(stopped, a)
		}
	}
	forEach(stopped, func(a *api.AllocationListStub) error {
		out, err := b.stopOutcome(ctx, a)
		if err != nil {
			b.logger.Warn("read stop archive output", "job_id", a.JobID, "alloc_id", a.ID, "error", err)
			retry(a.JobID)
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		l.stops[a.ID] = out
		return nil
	})

	forEach(failedWorkspaceAllocs(byID, current), func(a *api.AllocationListStub) error {
		out, err := b.failedOutput(ctx, a, taskName(a))
		if err != nil {
			b.logger.Warn("read failed workspace output", "job_id", a.JobID, "alloc_id", a.ID, "error", err)
			retry(a.JobID)
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		l.outputs[a.ID] = out
		return nil
	})

	for _, id := range withoutAllocs(byID, current) {
		retry(id)
	}
	if err := b.readSummaries(ctx, byID, current); err != nil {
		return controller.Snapshot{}, err
	}
	l.placement = make(map[string]string)
	for _, j := range unplacedJobs(byID, current) {
		msg, err := b.placementFailure(ctx, j.ID)
		if err != nil {
			return controller.Snapshot{}, err
		}
		if msg != "" {
			l.placement[j.ID] = msg
		}
	}
	return b.remember(l, assemble(l), unsettled), nil
}

// allocReaders bounds the concurrent per-allocation reads of one
// observation: checks, task states and logs. Reads of checks and logs are
// forwarded to the allocation's client node. In a wave (hundreds of
// workspaces starting or stopping at once) read one after another they
// made a pass take many seconds.
const allocReaders = 8

// forEach runs read for each of items, allocReaders at a time, and
// returns the first error any returned once all are done.
func forEach[T any](items []T, read func(T) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	sem := make(chan struct{}, allocReaders)
	for _, item := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := read(item); err != nil {
				once.Do(func() { first = err })
			}
		})
	}
	wg.Wait()
	return first
}

// readChecks reads the check results of allocs, a few at a time, and for
// those whose checks all pass, or whose program answered a probe since
// which no check failed, whether the server holds the registration the allocation made
// itself. A client that cannot answer leaves its
// allocation not ready for this pass.
func (b *Backend) readChecks(ctx context.Context, allocs []*api.AllocationListStub, answered map[string]answer) (map[string]api.AllocCheckStatuses, map[string]bool) {
	out := make(map[string]api.AllocCheckStatuses, len(allocs))
	own := make(map[string]bool, len(allocs))
	var mu sync.Mutex
	forEach(allocs, func(a *api.AllocationListStub) error {
		checks, err := b.client.Allocations().Checks(a.ID, b.query(ctx))
		if err != nil {
			b.logger.Debug("read allocation checks", "alloc_id", a.ID, "error", err)
			return nil
		}
		ans, probed := answered[a.ID]
		registered := (allPassing(checks) || probed && !failedSince(checks, "", ans.at)) && b.registeredBy(ctx, a)
		mu.Lock()
		defer mu.Unlock()
		out[a.ID] = checks
		own[a.ID] = registered
		return nil
	})
	return out, own
}

// registeredBy reports whether the server holds a registration of the
// workspace's service made by allocation a of its own job.
func (b *Backend) registeredBy(ctx context.Context, a *api.AllocationListStub) bool {
	wsID, _, _ := controller.ParseJobName(a.JobID)
	if b.mirror.registeredBy(serviceName(wsID), a.ID, a.JobID, time.Now()) {
		return true
	}
	regs, _, err := b.client.Services().Get(serviceName(wsID), b.query(ctx))
	if err != nil {
		b.logger.Debug("read service registrations", "alloc_id", a.ID, "error", err)
		return false
	}
	for _, r := range regs {
		if r.AllocID == a.ID && r.JobID == a.JobID {
			return true
		}
	}
	return false
}

// list returns the objects an observation starts from: the mirror's
// while Nomad's event stream keeps it current, a full listing otherwise,
// which fills the mirror when a stream is connected. From the mirror,
// after an observation of the same installed listing, it holds only the
// workspaces that may have changed since (listing.only). Nodes, few and
// changing without events codehub follows, are listed every time.
func (b *Backend) list(ctx context.Context) (listing, error) {
	list, _, err := b.client.Nodes().List(b.query(ctx))
	if err != nil {
		return listing{}, classify("list nodes", err)
	}
	nodes := make(map[string]*api.NodeListStub, len(list))
	for _, n := range list {
		nodes[n.ID] = n
	}
	l, err := b.objects(ctx, nodes)
	if err != nil {
		return l, err
	}
	l.nodes = nodes
	if b.opts.ServiceProvider != ProviderNomad {
		l.services = nil
	}
	return l, nil
}

// objects returns codehub's jobs, allocations, volumes and service names.
func (b *Backend) objects(ctx context.Context, nodes map[string]*api.NodeListStub) (listing, error) {
	m := b.mirror
	m.mu.Lock()
	if m.fresh(time.Now()) {
		var (
			l     listing
			dirty []string
		)
		touched := m.takeTouched()
		if last := b.last; last != nil && last.installs == m.installs {
			maps.Copy(touched, last.unsettled)
			maps.Copy(touched, last.onChangedNodes(nodes))
			l, dirty = m.subView(touched)
		} else {
			l, dirty = m.view()
		}
		l.installs = m.installs
		seqs := make([]uint64, len(dirty))
		for i, name := range dirty {
			seqs[i] = m.serviceSeq(name)
		}
		m.mu.Unlock()
		b.settleServices(ctx, dirty, seqs, l.services)
		return l, nil
	}
	// Held while listing: events that arrive meanwhile wait, and are
	// applied after the listing is installed if they are newer.
	defer m.mu.Unlock()
	l, tables, err := b.listAll(ctx)
	if err != nil {
		return l, err
	}
	if m.stream != 0 {
		m.install(l, tables, l.services, time.Now())
		l.installs = m.installs
	}
	return l, nil
}

// lastObservation is what the previous observation from the mirror saw,
// for the next to observe only what may have changed since.
type lastObservation struct {
	// installs is the mirror's installed listing it was computed from.
	installs  uint64
	snap      map[string]controller.Observed
	nodes     map[string]*api.NodeListStub
	unsettled map[string]bool
}

// onChangedNodes returns the workspaces whose homes are on nodes that
// changed (status, eligibility, drain, name), appeared or went since.
func (o *lastObservation) onChangedNodes(nodes map[string]*api.NodeListStub) map[string]bool {
	changed := make(map[string]bool)
	for id, n := range nodes {
		if p := o.nodes[id]; p == nil || nodeChanged(p, n) {
			changed[id] = true
		}
	}
	for id := range o.nodes {
		if nodes[id] == nil {
			changed[id] = true
		}
	}
	out := make(map[string]bool)
	if len(changed) == 0 {
		return out
	}
	for wsID, obs := range o.snap {
		if obs.NodeID != "" && changed[obs.NodeID] {
			out[wsID] = true
		}
	}
	return out
}

// nodeChanged reports a change of what an observation reads of a node.
func nodeChanged(a, b *api.NodeListStub) bool {
	return a.Name != b.Name || a.Status != b.Status || a.Drain != b.Drain || a.SchedulingEligibility != b.SchedulingEligibility
}

// remember keeps snap, observed from l, for the next observation, and
// returns the snapshot of every workspace: snap itself, or the previous
// one with the workspaces l held replaced. unsettled are the workspaces
// whose observation may change without an event (being started or
// stopped, unplaced, or a read failed).
func (b *Backend) remember(l listing, snap controller.Snapshot, unsettled map[string]bool) controller.Snapshot {
	if l.installs == 0 {
		b.last = nil
		return snap
	}
	if l.only == nil {
		b.last = &lastObservation{installs: l.installs, snap: snap.Workspaces, nodes: l.nodes, unsettled: unsettled}
		return controller.Snapshot{Workspaces: maps.Clone(snap.Workspaces)}
	}
	last := b.last
	for id := range l.only {
		if o, ok := snap.Workspaces[id]; ok {
			last.snap[id] = o
		} else {
			delete(last.snap, id)
		}
	}
	last.nodes, last.unsettled = l.nodes, unsettled
	return controller.Snapshot{Workspaces: maps.Clone(last.snap)}
}

// settleServices reads the registrations of service names a
// deregistration left unsure of, and drops those that have none left.
func (b *Backend) settleServices(ctx context.Context, names []string, seqs []uint64, services map[string]bool) {
	for i, name := range names {
		regs, _, err := b.client.Services().Get(name, b.query(ctx))
		if err != nil && !isNotFound(err) {
			b.logger.Debug("read service registrations", "service", name, "error", err)
			continue
		}
		ids := make([]string, 0, len(regs))
		for _, r := range regs {
			ids = append(ids, r.ID)
		}
		b.mirror.settle(name, seqs[i], ids)
		if len(ids) == 0 {
			delete(services, name)
		}
	}
}

// listAll lists codehub's jobs, allocations, host volumes and (with
// Nomad's service discovery) service names, with the index of each
// answer.
func (b *Backend) listAll(ctx context.Context) (listing, tableIndexes, error) {
	var (
		l      listing
		tables tableIndexes
	)
	q := b.query(ctx)
	q.Prefix = controller.NamePrefix
	jobs, meta, err := b.client.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, q)
	if err != nil {
		return l, tables, classify("list jobs", err)
	}
	l.jobs, tables.jobs = jobs, meta.LastIndex

	q = b.query(ctx)
	q.Filter = `JobID matches "^` + controller.NamePrefix + `"`
	// Task states (events) are most of a listing's bytes and matter only
	// for the few allocations that are starting or failed: those are read
	// one by one (readTaskStates).
	q.Params = map[string]string{"task_states": "false"}
	allocs, meta, err := b.client.Allocations().List(q)
	if err != nil {
		return l, tables, classify("list allocations", err)
	}
	l.allocs, tables.allocs = allocs, meta.LastIndex

	q = b.query(ctx)
	q.Prefix = controller.NamePrefix
	vols, meta, err := b.client.HostVolumes().List(nil, q)
	if err != nil {
		return l, tables, classify("list host volumes", err)
	}
	l.volumes, tables.volumes = vols, meta.LastIndex

	if b.opts.ServiceProvider != ProviderNomad {
		return l, tables, nil
	}
	services, meta, err := b.client.Services().List(b.query(ctx))
	if err != nil {
		return l, tables, classify("list services", err)
	}
	l.services, tables.services = make(map[string]bool), meta.LastIndex
	for _, ns := range services {
		for _, s := range ns.Services {
			if strings.HasPrefix(s.ServiceName, controller.NamePrefix) {
				l.services[s.ServiceName] = true
			}
		}
	}
	return l, tables, nil
}

// managedJobs keeps the jobs that carry codehub's mark and a codehub name.
func managedJobs(jobs []*api.JobListStub) map[string]*api.JobListStub {
	out := make(map[string]*api.JobListStub, len(jobs))
	for _, j := range jobs {
		if j.Meta[MetaManaged] != "true" {
			continue
		}
		if _, _, ok := controller.ParseJobName(j.ID); !ok {
			continue
		}
		out[j.ID] = j
	}
	return out
}

// currentAllocs returns, per job id, the allocations of the job's latest
// registration, newest first. Older allocations only matter for liveness,
// which looks at all of them.
func currentAllocs(jobs map[string]*api.JobListStub, allocs []*api.AllocationListStub) map[string][]*api.AllocationListStub {
	out := make(map[string][]*api.AllocationListStub)
	stopped := make(map[string]*api.AllocationListStub)
	for _, a := range allocs {
		j, ok := jobs[a.JobID]
		switch {
		case !ok:
		case isCurrent(j, a):
			out[a.JobID] = append(out[a.JobID], a)
		case lastOfStopped(j, a, stopped[a.JobID]):
			stopped[a.JobID] = a
		}
	}
	for id, a := range stopped {
		if len(out[id]) == 0 {
			out[id] = []*api.AllocationListStub{a}
		}
	}
	for _, list := range out {
		sort.Slice(list, func(i, k int) bool { return list[i].CreateIndex > list[k].CreateIndex })
	}
	return out
}

// lastOfStopped reports whether a is the newest allocation so far (than
// newest) of a workspace job codehub stopped. Stopping the job makes its
// allocations older than the job's registration, but the newest one is the
// run that stopped, whose stop-archive task saves the home.
func lastOfStopped(j *api.JobListStub, a, newest *api.AllocationListStub) bool {
	if _, kind, _ := controller.ParseJobName(j.ID); kind != controller.JobWorkspace || !j.Stop {
		return false
	}
	return newest == nil || a.CreateIndex > newest.CreateIndex
}

// isCurrent reports whether a belongs to j's latest registration. An
// allocation created after it does. A workspace allocation Nomad updated in
// place keeps its older create index, so one that is still meant to run and
// not terminal counts too; its old failures do not.
func isCurrent(j *api.JobListStub, a *api.AllocationListStub) bool {
	if a.CreateIndex >= j.JobModifyIndex {
		return true
	}
	_, kind, _ := controller.ParseJobName(j.ID)
	return kind == controller.JobWorkspace && a.DesiredStatus == api.AllocDesiredStatusRun && !clientTerminal(a.ClientStatus)
}

// allocsNeedingChecks are the running workspace allocations whose
// deployment health is not set yet: workspaces being started.
func allocsNeedingChecks(jobs map[string]*api.JobListStub, current map[string][]*api.AllocationListStub) []*api.AllocationListStub {
	var out []*api.AllocationListStub
	for id, list := range current {
		if _, kind, _ := controller.ParseJobName(id); kind != controller.JobWorkspace || jobs[id].Stop {
			continue
		}
		for _, a := range list {
			if a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun &&
				(a.DeploymentStatus == nil || a.DeploymentStatus.Healthy == nil) {
				out = append(out, a)
			}
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out
}

// allocsNeedingEvents are the allocations whose task events explain their
// state: workspace allocations still pending (an image pull may be failing)
// or failed, the newest one of a workspace job once it is stopped (its
// stop-archive task), and the failed allocation of a batch job (exit code,
// message).
func allocsNeedingEvents(jobs map[string]*api.JobListStub, current map[string][]*api.AllocationListStub) []*api.AllocationListStub {
	var out []*api.AllocationListStub
	for id, list := range current {
		if len(list) == 0 {
			continue
		}
		_, kind, _ := controller.ParseJobName(id)
		if kind != controller.JobWorkspace {
			// A pending one may be between two tries (a backup), which
			// only its task states tell.
			if batchEnded(list[0]) || list[0].ClientStatus == api.AllocClientStatusPending {
				out = append(out, list[0])
			}
			continue
		}
		if jobs[id].Stop {
			if allocStopped(list[0]) {
				out = append(out, list[0])
			}
			continue
		}
		for i, a := range list {
			if a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusFailed ||
				i == 0 && allocStopped(a) {
				out = append(out, a)
			}
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out
}

// batchEnded reports a batch allocation whose task events tell how its run
// ended: one that failed or was lost, and one Nomad stopped, which it
// reports as complete even when the task had not finished.
func batchEnded(a *api.AllocationListStub) bool {
	switch a.ClientStatus {
	case api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	case api.AllocClientStatusComplete:
		return a.DesiredStatus != api.AllocDesiredStatusRun
	}
	return false
}

// readTaskStates fills in the task states of allocs that came without
// them (a listing's), from the cache for client-terminal allocations
// already read.
func (b *Backend) readTaskStates(ctx context.Context, allocs []*api.AllocationListStub) error {
	return forEach(allocs, func(a *api.AllocationListStub) error {
		if a.TaskStates != nil {
			return nil // an event's, as fresh as the rest of the stub
		}
		if states, ok := b.allocs.states.get(a.ID); ok {
			a.TaskStates = states
			return nil
		}
		info, _, err := b.client.Allocations().Info(a.ID, b.query(ctx))
		if isNotFound(err) {
			return nil // garbage-collected since the listing
		}
		if err != nil {
			return classify("read allocation "+a.ID, err)
		}
		a.TaskStates = info.TaskStates
		if clientTerminal(info.ClientStatus) {
			b.allocs.states.put(a.ID, info.TaskStates)
		}
		return nil
	})
}

// failedBatchAllocs are the newest allocations of batch jobs that failed.
func failedBatchAllocs(jobs map[string]*api.JobListStub, current map[string][]*api.AllocationListStub) []*api.AllocationListStub {
	var out []*api.AllocationListStub
	for id, list := range current {
		if _, kind, _ := controller.ParseJobName(id); kind == controller.JobWorkspace || len(list) == 0 {
			continue
		}
		if list[0].ClientStatus == api.AllocClientStatusFailed {
			out = append(out, list[0])
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out
}

// allocStopped reports a workspace allocation Nomad was told to stop: its
// job was stopped (by codehub), or a node drain or an operator stopped it
// while its job still wants to run.
func allocStopped(a *api.AllocationListStub) bool {
	return a.DesiredStatus != api.AllocDesiredStatusRun
}

// stoppedWorkspaceAllocs are the newest allocations of workspace jobs once
// they are stopped: their stop-archive task saves the home.
func stoppedWorkspaceAllocs(jobs map[string]*api.JobListStub, current map[string][]*api.AllocationListStub) []*api.AllocationListStub {
	var out []*api.AllocationListStub
	for id, list := range current {
		if _, kind, _ := controller.ParseJobName(id); kind != controller.JobWorkspace || len(list) == 0 {
			continue
		}
		if allocStopped(list[0]) {
			out = append(out, list[0])
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out
}

// failedWorkspaceAllocs are the current allocations of workspace jobs that
// failed: what they printed explains the failure.
func failedWorkspaceAllocs(jobs map[string]*api.JobListStub, current map[string][]*api.AllocationListStub) []*api.AllocationListStub {
	var out []*api.AllocationListStub
	for id, list := range current {
		if _, kind, _ := controller.ParseJobName(id); kind != controller.JobWorkspace || jobs[id].Stop || len(list) == 0 {
			continue
		}
		if list[0].ClientStatus == api.AllocClientStatusFailed {
			out = append(out, list[0])
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out
}

// placementGrace is how long a job may wait for its first allocation
// before an observation from the mirror reads its summary: a job just
// registered is placed within that in all but a wave, and a wave of
// registrations would otherwise cost a read per job and pass.
const placementGrace = 3 * time.Second

// readSummaries fills in the summary of the jobs that want to run, have
// had no current allocation for placementGrace and came without one (an
// event's stub): whether Nomad queued allocations it could not place. It
// reads at most allocReaders of them, those whose last read is oldest
// first, so a wave of registrations Nomad is slow to place costs a few
// reads a pass; the others keep the summary read last.
func (b *Backend) readSummaries(ctx context.Context, jobs map[string]*api.JobListStub, current map[string][]*api.AllocationListStub) error {
	now := b.now()
	waiting := make(map[string]*unplacedJob)
	var due []string
	for _, id := range withoutAllocs(jobs, current) {
		if jobs[id].JobSummary != nil {
			continue
		}
		// A registration waits from when it was first seen without one.
		key := id + "@" + strconv.FormatUint(jobs[id].JobModifyIndex, 10)
		u := b.unplaced[key]
		if u == nil {
			u = &unplacedJob{read: now}
		}
		waiting[key] = u
		if u.summary != nil {
			c := *jobs[id]
			c.JobSummary = u.summary
			jobs[id] = &c
		}
		if now.Sub(u.read) >= placementGrace {
			due = append(due, key)
		}
	}
	b.unplaced = waiting
	slices.SortFunc(due, func(a, c string) int { return cmp.Or(waiting[a].read.Compare(waiting[c].read), strings.Compare(a, c)) })
	due = due[:min(len(due), allocReaders)]
	var mu sync.Mutex
	return forEach(due, func(key string) error {
		id, _, _ := strings.Cut(key, "@")
		sum, _, err := b.client.Jobs().Summary(id, b.query(ctx))
		switch {
		case isNotFound(err):
			return nil // purged since
		case err != nil:
			return classify("read summary of "+id, err)
		}
		mu.Lock()
		defer mu.Unlock()
		waiting[key].read, waiting[key].summary = now, sum
		c := *jobs[id]
		c.JobSummary = sum
		jobs[id] = &c
		return nil
	})
}

// unplacedJob is a registration seen waiting for its first allocation:
// since when, or when its summary was last read, and that summary.
type unplacedJob struct {
	read    time.Time
	summary *api.JobSummary
}

// withoutAllocs are the jobs that want to run and have no current
// allocation: just registered, or Nomad cannot place them.
func withoutAllocs(jobs map[string]*api.JobListStub, current map[string][]*api.AllocationListStub) []string {
	var out []string
	for id, j := range jobs {
		if !j.Stop && len(current[id]) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// unplacedJobs are running jobs with queued (unplaced) allocations and no
// current allocation: Nomad could not find a node for them.
func unplacedJobs(jobs map[string]*api.JobListStub, current map[string][]*api.AllocationListStub) []*api.JobListStub {
	var out []*api.JobListStub
	for _, id := range withoutAllocs(jobs, current) {
		j := jobs[id]
		if j.JobSummary == nil {
			continue
		}
		for _, tg := range j.JobSummary.Summary {
			if tg.Queued > 0 {
				out = append(out, j)
				break
			}
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out
}

// placementFailure reads the job's newest evaluation that failed to place
// an allocation and names what filtered or exhausted the nodes.
func (b *Backend) placementFailure(ctx context.Context, id string) (string, error) {
	evals, _, err := b.client.Jobs().Evaluations(id, b.query(ctx))
	if isNotFound(err) {
		return "", nil // purged since the listing
	}
	if err != nil {
		return "", classify("list evaluations of "+id, err)
	}
	var newest *api.Evaluation
	for _, e := range evals {
		if len(e.FailedTGAllocs) > 0 && (newest == nil || e.CreateIndex > newest.CreateIndex) {
			newest = e
		}
	}
	if newest == nil {
		return "", nil
	}
	return describePlacement(newest.FailedTGAllocs), nil
}

// describePlacement names the constraints and exhausted resources of a
// failed placement, most decisive first.
func describePlacement(failed map[string]*api.AllocationMetric) string {
	groups := make([]string, 0, len(failed))
	for g := range failed {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	var parts []string
	for _, g := range groups {
		m := failed[g]
		var reasons []string
		for _, c := range sortedKeys(m.ConstraintFiltered) {
			reasons = append(reasons, fmt.Sprintf("constraint %q filtered %d node(s)", c, m.ConstraintFiltered[c]))
		}
		for _, c := range sortedKeys(m.ClassFiltered) {
			reasons = append(reasons, fmt.Sprintf("class %q filtered %d node(s)", c, m.ClassFiltered[c]))
		}
		for _, d := range sortedKeys(m.DimensionExhausted) {
			reasons = append(reasons, fmt.Sprintf("%s exhausted on %d node(s)", d, m.DimensionExhausted[d]))
		}
		if len(reasons) == 0 {
			reasons = append(reasons, fmt.Sprintf("%d of %d node(s) in pool %q evaluated, none fits", m.NodesEvaluated, m.NodesInPool, m.NodePool))
		}
		parts = append(parts, fmt.Sprintf("group %q: %s", g, strings.Join(reasons, "; ")))
	}
	return "no node can run it: " + strings.Join(parts, "; ")
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var _ controller.SubmissionReporter = (*Backend)(nil)

// ReportsSubmissions: every observation names when a workspace job's
// current registration was submitted, and for which run (its meta).
func (b *Backend) ReportsSubmissions() bool { return true }

// assemble turns one listing into the snapshot. It does no I/O.
func assemble(l listing) controller.Snapshot {
	snap := controller.Snapshot{Workspaces: make(map[string]controller.Observed)}
	get := func(wsID string) controller.Observed { return snap.Workspaces[wsID] }

	for _, v := range newestVolumes(l.volumes) {
		wsID, ok := controller.ParseVolumeName(v.Name)
		if !ok {
			continue
		}
		o := get(wsID)
		o.VolumeExists = true
		o.VolumeID = v.ID
		o.NodeID = v.NodeID
		o.Node, o.NodeAway = nodeOf(l.nodes, v.NodeID)
		if n, ok := l.nodes[v.NodeID]; ok {
			o.NodeDraining = n.Drain || n.SchedulingEligibility != api.NodeSchedulingEligible
		}
		// Nomad keeps calling the volumes of a node that is down ready.
		o.VolumeReady = v.State == api.HostVolumeStateReady &&
			o.NodeAway != workspace.ReasonNodeDown && o.NodeAway != workspace.ReasonNodeGone
		snap.Workspaces[wsID] = o
	}

	// Liveness looks at every allocation named like a workspace job, even
	// of a job that is gone: a purged job must not hide a running task.
	for _, a := range l.allocs {
		wsID, kind, ok := controller.ParseJobName(a.JobID)
		if !ok || kind != controller.JobWorkspace || clientTerminal(a.ClientStatus) {
			continue
		}
		o := get(wsID)
		o.ContainerLive = true
		snap.Workspaces[wsID] = o
	}

	jobs := managedJobs(l.jobs)
	current := currentAllocs(jobs, l.allocs)
	for id, j := range jobs {
		wsID, kind, _ := controller.ParseJobName(id)
		o := get(wsID)
		switch kind {
		case controller.JobWorkspace:
			if !j.Stop {
				o.UpstreamReady = upstreamReady(current[id], readiness{
					checks: l.checks, own: l.ownRegistration, answered: l.answered, run: j.Meta[MetaRunID],
				}, l.services == nil || l.services[serviceName(wsID)])
				o.Failure = workspaceFailure(current[id], l.placement[id], l.outputs)
				o.RunStarted = slices.ContainsFunc(current[id], func(a *api.AllocationListStub) bool {
					return a.ClientStatus != api.AllocClientStatusPending
				})
				o.Preparing, o.RunningSince = runProgress(current[id])
				if j.SubmitTime > 0 {
					o.Submitted, o.SubmittedRun = time.Unix(0, j.SubmitTime).UTC(), j.Meta[MetaRunID]
				}
			}
			o.StopArchive = stopArchive(wsID, j, current[id], l.stops)
		case controller.JobArchive:
			o.Archive = jobResult(j, current[id], l.errorCodes, l.outputs, l.placement[id])
		case controller.JobRestore:
			o.Restore = jobResult(j, current[id], l.errorCodes, l.outputs, l.placement[id])
		}
		snap.Workspaces[wsID] = o
	}
	return snap
}

// runProgress reports whether a node is still preparing an allocation of
// allocs (pending, meant to run), and since when the program of a running
// one whose health is unknown runs: its modify time, as nothing but its
// health changes a running allocation until it stops. One whose health
// is known does not count: Nomad setting it unhealthy must not restart a
// start's deadline.
func runProgress(allocs []*api.AllocationListStub) (preparing bool, runningSince time.Time) {
	for _, a := range allocs {
		if a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		switch a.ClientStatus {
		case api.AllocClientStatusPending:
			preparing = true
		case api.AllocClientStatusRunning:
			if a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil {
				continue
			}
			if t := time.Unix(0, a.ModifyTime).UTC(); a.ModifyTime > 0 && t.After(runningSince) {
				runningSince = t
			}
		}
	}
	return preparing, runningSince
}

// stopArchive reports the stop-archive task of the newest allocation of a
// workspace job once that allocation is stopped (by codehub, a drain or an
// operator): running while the allocation is, then its result. A task
// that archived nothing (not asked, never started) reports nothing.
func stopArchive(wsID string, j *api.JobListStub, allocs []*api.AllocationListStub, outcomes map[string]archive.Outcome) *controller.JobResult {
	if len(allocs) == 0 || !allocStopped(allocs[0]) || allocs[0].TaskStates[stopArchiveTask] == nil {
		return nil
	}
	a := allocs[0]
	run := j.Meta[MetaRunID]
	res := &controller.JobResult{OpID: run, ArchiveKey: archive.Key(wsID, run), Status: controller.JobRunning}
	if !clientTerminal(a.ClientStatus) {
		return res
	}
	out, ok := outcomes[a.ID]
	if _, key, err := archive.ParseURL(out.URL); ok && err == nil {
		// The archive the task made: the job's run names the newest
		// registration, which may never have had an allocation.
		res.ArchiveKey, res.OpID = key, archive.OpID(key)
	}
	switch {
	case !ok, out.Result == archive.ResultSkipped, out.Result == "" && a.TaskStates[stopArchiveTask].StartedAt.IsZero():
		return nil
	case out.Result == archive.ResultOK:
		res.Status = controller.JobSucceeded
	default:
		res.Status, res.ErrorCode = controller.JobFailed, out.Code
		res.Message = "the archive made as the program was stopped on its node failed"
	}
	return res
}

// readiness is what an observation knows of starting allocations.
type readiness struct {
	checks map[string]api.AllocCheckStatuses
	// own: the server holds the registration the allocation made itself.
	own map[string]bool
	// answered: the allocation's program answered a direct probe.
	answered map[string]answer
	// run is the run the job's registration names now.
	run string
}

// upstreamReady: a running allocation whose deployment health is known good,
// or, while that is unknown, whose own registration the server holds and
// whose checks all pass, or whose program, of the job's current run,
// answered a direct probe that no failed check followed: a check that
// fails after the answer wins, Nomad's check is the authority on failure.
// registered gates all
// on a registration of the service's name existing at all: that is no
// trust decision (the resolvers accept only the allocation's own), it
// keeps RUNNING from showing before the catalog can route to it.
func upstreamReady(allocs []*api.AllocationListStub, r readiness, registered bool) bool {
	if !registered {
		return false
	}
	for _, a := range allocs {
		if a.ClientStatus != api.AllocClientStatusRunning || a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		if a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil {
			if *a.DeploymentStatus.Healthy {
				return true
			}
			continue
		}
		if !r.own[a.ID] {
			continue
		}
		ans, probed := r.answered[a.ID]
		if allPassing(r.checks[a.ID]) ||
			probed && r.run != "" && ans.run == r.run && !failedSince(r.checks[a.ID], "", ans.at) {
			return true
		}
	}
	return false
}

func allPassing(checks api.AllocCheckStatuses) bool {
	if len(checks) == 0 {
		return false
	}
	for _, c := range checks {
		if c.Status != "success" {
			return false
		}
	}
	return true
}

// workspaceFailure classifies why the current registration of a workspace
// job cannot run. An image pull failure is known from the task event before
// the allocation turns failed.
func workspaceFailure(allocs []*api.AllocationListStub, placement string, outputs map[string]string) *controller.Failure {
	for _, a := range allocs {
		for _, ts := range a.TaskStates {
			if ev := pullFailure(ts); ev != nil {
				return &controller.Failure{Reason: workspace.ReasonImagePullFailed, Message: ev.DriverError, Terminal: true}
			}
		}
	}
	if len(allocs) > 0 && allocs[0].ClientStatus == api.AllocClientStatusFailed {
		return &controller.Failure{Reason: workspace.ReasonStartFailed, Message: controller.WithOutput(failureMessage(allocs[0]), outputs[allocs[0].ID])}
	}
	if len(allocs) == 0 && placement != "" {
		return &controller.Failure{Reason: workspace.ReasonUnschedulable, Message: placement}
	}
	return nil
}

func pullFailure(ts *api.TaskState) *api.TaskEvent {
	if ts == nil {
		return nil
	}
	for _, ev := range ts.Events {
		if ev.Type == api.TaskDriverFailure && strings.HasPrefix(ev.DriverError, "Failed to pull") {
			return ev
		}
	}
	return nil
}

// failureMessage says why an allocation failed: the last driver error or
// exit of a task, which Nomad may follow with events of its own ("Unhealthy
// because of failed task") that explain less; failing those, the last event
// that says anything.
func failureMessage(a *api.AllocationListStub) string {
	for _, name := range sortedTaskNames(a.TaskStates) {
		events := a.TaskStates[name].Events
		for i := len(events) - 1; i >= 0; i-- {
			switch ev := events[i]; {
			case ev.DriverError != "":
				return fmt.Sprintf("task %s: %s", name, ev.DriverError)
			case ev.Type == api.TaskTerminated:
				return fmt.Sprintf("task %s exited with code %d", name, ev.ExitCode)
			}
		}
	}
	for _, name := range sortedTaskNames(a.TaskStates) {
		events := a.TaskStates[name].Events
		for i := len(events) - 1; i >= 0; i-- {
			if ev := events[i]; ev.DisplayMessage != "" && ev.Type != api.TaskNotRestarting {
				return fmt.Sprintf("task %s: %s", name, ev.DisplayMessage)
			}
		}
	}
	if a.ClientDescription != "" {
		return a.ClientDescription
	}
	return "allocation " + a.ID + " failed"
}

func sortedTaskNames(states map[string]*api.TaskState) []string {
	names := make([]string, 0, len(states))
	for n := range states {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// jobResult reports the current attempt of a batch job.
func jobResult(j *api.JobListStub, allocs []*api.AllocationListStub, codes map[string]archive.Code, outputs map[string]string, placement string) *controller.JobResult {
	attempt, _ := strconv.Atoi(j.Meta[MetaAttempt])
	spec := controller.JobSpec{OpID: j.Meta[MetaOpID], ArchiveKey: j.Meta[MetaArchiveKey], Attempt: attempt}
	run := batchRun(j, allocs, codes, placement)
	if len(allocs) > 0 && run.State != controller.RunLive {
		run.Output = outputs[allocs[0].ID]
	}
	return run.Result(spec)
}

// buildFailed reports a prebuild's archive allocation whose build task
// failed.
func buildFailed(a *api.AllocationListStub) bool {
	ts := a.TaskStates[buildTask]
	return ts != nil && ts.Failed
}

// batchRun is what the newest allocation of a batch job says of its run.
// Nomad reports an allocation it stopped as complete, whatever its task
// did: only one whose task exited before any kill ran to its end.
func batchRun(j *api.JobListStub, allocs []*api.AllocationListStub, codes map[string]archive.Code, placement string) controller.JobRun {
	if len(allocs) == 0 {
		// Nomad records a stop as a new registration: the allocations
		// of the attempt it stopped count as older.
		if j.Stop {
			return controller.JobRun{State: controller.RunEnded, Message: "job stopped before it finished"}
		}
		return controller.JobRun{State: controller.RunPending, Message: placement}
	}
	a := allocs[0]
	switch a.ClientStatus {
	case api.AllocClientStatusRunning:
		return controller.JobRun{State: controller.RunLive}
	case api.AllocClientStatusPending:
		if started(a) {
			// Between two tries of a task that retries (a backup):
			// Nomad reports it pending, but it holds its node.
			return controller.JobRun{State: controller.RunLive}
		}
	case api.AllocClientStatusComplete:
		if a.DesiredStatus == api.AllocDesiredStatusRun {
			return controller.JobRun{State: controller.RunExited}
		}
		if code, ok := exitBeforeKill(a); ok {
			return controller.JobRun{State: controller.RunExited, ExitCode: code}
		}
		return controller.JobRun{State: controller.RunEnded, Message: "job stopped before it finished"}
	case api.AllocClientStatusFailed, api.AllocClientStatusLost:
		run := controller.JobRun{State: controller.RunEnded, Code: codes[a.ID], Message: failureMessage(a)}
		if code, ok := exitBeforeKill(a); ok {
			run.State, run.ExitCode = controller.RunExited, code
		}
		return run
	}
	return controller.JobRun{State: controller.RunPending}
}

// started reports an allocation one of whose tasks ran already.
func started(a *api.AllocationListStub) bool {
	for _, ts := range a.TaskStates {
		if ts != nil && (!ts.StartedAt.IsZero() || ts.Restarts > 0) {
			return true
		}
	}
	return false
}

// exitBeforeKill returns the exit code of the last task that terminated by
// itself, before Nomad began to kill it; ok is false when none did or the
// task states are unknown.
func exitBeforeKill(a *api.AllocationListStub) (code int, ok bool) {
	var at int64
	for _, ts := range a.TaskStates {
		if ts == nil {
			continue
		}
		for _, ev := range ts.Events {
			if ev.Type == api.TaskKilling {
				break
			}
			if ev.Type == api.TaskTerminated && ev.Time >= at {
				code, at, ok = ev.ExitCode, ev.Time, true
			}
		}
	}
	return code, ok
}

// nodeOf names the node with id and says why it cannot serve its volumes:
// down or disconnected, gone from the cluster, or taking no new
// allocations (drained, ineligible). A node that is gone is named by its
// id.
func nodeOf(nodes map[string]*api.NodeListStub, id string) (name, away string) {
	if id == "" {
		return "", ""
	}
	n, ok := nodes[id]
	switch {
	case !ok:
		return id, workspace.ReasonNodeGone
	case n.Status != api.NodeStatusReady:
		return n.Name, workspace.ReasonNodeDown
	case n.Drain || n.SchedulingEligibility != api.NodeSchedulingEligible:
		return n.Name, workspace.ReasonNodeIneligible
	}
	return n.Name, ""
}

// newestVolumes keeps, of volumes sharing a name, the one created last.
// Nomad allows one volume of a name per node: an older one is a ghost, a
// volume Nomad had forgotten (deleted by force while its node was away)
// that its node registered again on its return. It is never the home;
// the admin node listing shows it.
func newestVolumes(vols []*api.HostVolumeStub) []*api.HostVolumeStub {
	newest := make(map[string]*api.HostVolumeStub, len(vols))
	var order []string
	for _, v := range vols {
		cur, seen := newest[v.Name]
		if !seen {
			order = append(order, v.Name)
		}
		if !seen || v.CreateIndex > cur.CreateIndex {
			newest[v.Name] = v
		}
	}
	out := make([]*api.HostVolumeStub, 0, len(order))
	for _, name := range order {
		out = append(out, newest[name])
	}
	return out
}
