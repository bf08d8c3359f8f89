package nomad

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

// resyncEvery bounds how long observations trust the mirror between full
// listings: Nomad sends no event when it garbage-collects an allocation,
// and a listing repairs whatever else an event could not say.
const resyncEvery = 5 * time.Minute

// Event types the mirror tells apart; the api package has no constants
// for them.
const (
	eventJobBatchDeregistered = "JobBatchDeregistered"
	eventHostVolumeDeleted    = "HostVolumeDeleted"
	eventServiceDeregistered  = "ServiceDeregistration"
)

// mirror holds codehub's jobs, their allocations, its host volumes and
// the names of its native services as Nomad's event stream reports them,
// so that an observation costs what changed instead of listing every
// object each pass. It counts only while the stream that feeds it is
// connected and a full listing was installed under that connection; a
// stream that ends may have missed events, so the next observation lists
// everything again.
//
// Stored objects are never modified: an event replaces them.
type mirror struct {
	mu sync.Mutex
	// stream is the connection feeding the mirror, 0 while none is;
	// streams counts connections so far.
	stream, streams uint64
	// synced is the connection the installed listing was taken under;
	// installs counts listings installed.
	synced   uint64
	syncedAt time.Time
	installs uint64
	// tables are the listing's per-table indexes: an event at or below
	// its table's is already in the listing.
	tables   tableIndexes
	jobs     map[string]*api.JobListStub
	allocs   map[string]*api.AllocationListStub
	volumes  map[string]*api.HostVolumeStub // by id
	services map[string]*serviceEntry       // by service name
	// allocsByJob and volumesByName index allocations and volumes by
	// whom they belong to.
	allocsByJob   map[string]map[string]bool
	volumesByName map[string]map[string]bool
	// touched are the workspaces events changed since an observation
	// last took them.
	touched map[string]bool
}

// tableIndexes are the indexes a full listing's answers carried.
type tableIndexes struct {
	jobs, allocs, volumes, services uint64
}

// serviceEntry is what the mirror knows of a service name's
// registrations. A listing names services without their registrations'
// ids (listed); events add and remove ids. A removal from a listed name
// leaves it unknown whether registrations remain until a read of the
// name says (dirty).
type serviceEntry struct {
	ids map[string]bool
	// owners are the allocations events showed registering the name, by
	// registration id.
	owners map[string]serviceOwner
	listed bool
	dirty  bool
	// seq moves with every event about the name, so a read taken while
	// an event came does not overwrite it.
	seq uint64
}

// serviceOwner is the allocation, and its job, that made a registration.
type serviceOwner struct {
	allocID, jobID string
}

func newMirror() *mirror { return &mirror{} }

// connected records a new stream connection and returns its number. The
// mirror counts again once a listing is installed under it.
func (m *mirror) connected() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.streams++
	m.stream = m.streams
	return m.stream
}

// disconnected records the end of stream connection conn.
func (m *mirror) disconnected(conn uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stream == conn {
		m.stream = 0
	}
}

// fresh reports whether the mirror counts at now; m.mu is held.
func (m *mirror) fresh(now time.Time) bool {
	return m.stream != 0 && m.synced == m.stream && now.Sub(m.syncedAt) < resyncEvery
}

// install replaces the mirror's contents with a full listing taken while
// m.mu was held under the current stream, so no event of that stream was
// applied in between; m.mu is held.
func (m *mirror) install(l listing, tables tableIndexes, names map[string]bool, now time.Time) {
	m.jobs = make(map[string]*api.JobListStub, len(l.jobs))
	for _, j := range l.jobs {
		m.jobs[j.ID] = j
	}
	m.allocs = make(map[string]*api.AllocationListStub, len(l.allocs))
	m.allocsByJob = make(map[string]map[string]bool, len(l.jobs))
	for _, a := range l.allocs {
		// A copy: the observation fills in the listed one's task states.
		c := *a
		m.putAlloc(&c)
	}
	m.volumes = make(map[string]*api.HostVolumeStub, len(l.volumes))
	m.volumesByName = make(map[string]map[string]bool, len(l.volumes))
	for _, v := range l.volumes {
		m.putVolume(v)
	}
	m.services = make(map[string]*serviceEntry, len(names))
	for name := range names {
		m.services[name] = &serviceEntry{ids: map[string]bool{}, listed: true}
	}
	m.tables = tables
	m.synced, m.syncedAt = m.stream, now
	m.installs++
	m.touched = make(map[string]bool)
}

func (m *mirror) putAlloc(a *api.AllocationListStub) {
	m.allocs[a.ID] = a
	set(m.allocsByJob, a.JobID, a.ID)
}

// deleteAllocsOf removes the allocations of job id created before index.
// Nomad deletes a job's allocations with the job, in the same
// transaction, and sends no event for them: kept, one that was not
// terminal yet would stay live here until the next listing.
func (m *mirror) deleteAllocsOf(id string, index uint64) {
	for allocID := range m.allocsByJob[id] {
		if m.allocs[allocID].CreateIndex < index {
			delete(m.allocs, allocID)
			unset(m.allocsByJob, id, allocID)
		}
	}
}

func (m *mirror) putVolume(v *api.HostVolumeStub) {
	m.volumes[v.ID] = v
	set(m.volumesByName, v.Name, v.ID)
}

func (m *mirror) deleteVolume(id string) {
	if v := m.volumes[id]; v != nil {
		delete(m.volumes, id)
		unset(m.volumesByName, v.Name, id)
	}
}

// set adds member to index[key].
func set(index map[string]map[string]bool, key, member string) {
	if index[key] == nil {
		index[key] = make(map[string]bool)
	}
	index[key][member] = true
}

// unset removes member from index[key].
func unset(index map[string]map[string]bool, key, member string) {
	delete(index[key], member)
	if len(index[key]) == 0 {
		delete(index, key)
	}
}

// touch records that an event changed an object of workspace wsID.
func (m *mirror) touch(wsID string, ok bool) {
	if ok {
		m.touched[wsID] = true
	}
}

// takeTouched returns the workspaces events changed since it was last
// called, with those whose service registrations a read must settle;
// m.mu is held.
func (m *mirror) takeTouched() map[string]bool {
	out := m.touched
	m.touched = make(map[string]bool)
	for name, s := range m.services {
		if s.dirty {
			m.touchService(out, name)
		}
	}
	return out
}

// touchService adds the workspace whose service is name to ids.
func (m *mirror) touchService(ids map[string]bool, name string) {
	if id, ok := strings.CutPrefix(name, controller.NamePrefix); ok && serviceName(id) == name {
		ids[id] = true
	}
}

// subView is view for the objects of workspaces ids only; m.mu is held.
func (m *mirror) subView(ids map[string]bool) (listing, []string) {
	l := listing{services: make(map[string]bool), only: ids}
	var dirty []string
	for id := range ids {
		for _, kind := range []controller.JobKind{controller.JobWorkspace, controller.JobArchive, controller.JobRestore} {
			name := controller.JobName(id, kind)
			if j := m.jobs[name]; j != nil {
				l.jobs = append(l.jobs, j)
			}
			for allocID := range m.allocsByJob[name] {
				c := *m.allocs[allocID]
				l.allocs = append(l.allocs, &c)
			}
		}
		for volID := range m.volumesByName[controller.VolumeName(id)] {
			l.volumes = append(l.volumes, m.volumes[volID])
		}
		if s := m.services[serviceName(id)]; s != nil {
			l.services[serviceName(id)] = true
			if s.dirty {
				dirty = append(dirty, serviceName(id))
			}
		}
	}
	return l, dirty
}

// view returns the mirror's contents as a listing (its allocations
// copied: an observation fills in their task states) and the service
// names a read must settle; m.mu is held.
func (m *mirror) view() (listing, []string) {
	l := listing{
		jobs:    make([]*api.JobListStub, 0, len(m.jobs)),
		allocs:  make([]*api.AllocationListStub, 0, len(m.allocs)),
		volumes: make([]*api.HostVolumeStub, 0, len(m.volumes)),
	}
	for _, j := range m.jobs {
		l.jobs = append(l.jobs, j)
	}
	for _, a := range m.allocs {
		c := *a
		l.allocs = append(l.allocs, &c)
	}
	for _, v := range m.volumes {
		l.volumes = append(l.volumes, v)
	}
	l.services = make(map[string]bool, len(m.services))
	var dirty []string
	for name, s := range m.services {
		l.services[name] = true
		if s.dirty {
			dirty = append(dirty, name)
		}
	}
	return l, dirty
}

// settle records what a read of service name, begun when the name's
// sequence was seq, found: its registrations' ids.
func (m *mirror) settle(name string, seq uint64, ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.services[name]
	if s == nil || s.seq != seq || !s.dirty {
		return
	}
	if len(ids) == 0 {
		delete(m.services, name)
		return
	}
	s.ids, s.listed, s.dirty = map[string]bool{}, false, false
	for _, id := range ids {
		s.ids[id] = true
	}
	for id := range s.owners {
		if !s.ids[id] {
			delete(s.owners, id)
		}
	}
}

// serviceSeq is the sequence of service name's entry; m.mu is held.
func (m *mirror) serviceSeq(name string) uint64 {
	if s := m.services[name]; s != nil {
		return s.seq
	}
	return 0
}

// apply brings the mirror up to date with events of stream connection
// conn. Events of another connection, or before a listing was installed
// under this one, are dropped: the next full listing holds them.
func (m *mirror) apply(conn uint64, events []api.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if conn != m.stream || m.synced != conn {
		return
	}
	for i := range events {
		ev := &events[i]
		switch ev.Topic {
		case api.TopicJob:
			m.applyJob(ev)
		case api.TopicAllocation:
			m.applyAlloc(ev)
		case topicHostVolume:
			m.applyVolume(ev)
		case api.TopicService:
			m.applyService(ev)
		}
	}
}

// broken marks the mirror as needing a full listing: an event it could
// not read may have said anything. m.mu is held.
func (m *mirror) broken() { m.synced = 0 }

func (m *mirror) applyJob(ev *api.Event) {
	if ev.Index <= m.tables.jobs || !strings.HasPrefix(ev.Key, controller.NamePrefix) {
		return
	}
	job, deleted, err := ev.DeregisteredJob()
	if err != nil || job == nil || job.ID == nil {
		m.broken()
		return
	}
	// A stop stores the job anew at the event's index; a purge (and
	// Nomad's garbage collection) sends the job as it was before. Nomad
	// 2.0 says so itself (deleted).
	wsID, _, ok := controller.ParseJobName(*job.ID)
	if deleted || ev.Type == eventJobBatchDeregistered || job.ModifyIndex != nil && *job.ModifyIndex < ev.Index {
		delete(m.jobs, *job.ID)
		m.deleteAllocsOf(*job.ID, ev.Index)
		m.touch(wsID, ok)
		return
	}
	stub := jobStub(job)
	if old := m.jobs[stub.ID]; old != nil && old.ModifyIndex > stub.ModifyIndex {
		return
	}
	m.jobs[stub.ID] = stub
	m.touch(wsID, ok)
}

func (m *mirror) applyAlloc(ev *api.Event) {
	if ev.Index <= m.tables.allocs {
		return
	}
	a, err := ev.Allocation()
	if err != nil || a == nil {
		m.broken()
		return
	}
	if !strings.HasPrefix(a.JobID, controller.NamePrefix) {
		return
	}
	wsID, _, ok := controller.ParseJobName(a.JobID)
	stub := a.Stub()
	if old := m.allocs[stub.ID]; old != nil && old.ModifyIndex > stub.ModifyIndex {
		return
	}
	switch {
	case stub.ClientStatus == api.AllocClientStatusRunning && stub.DesiredStatus == api.AllocDesiredStatusRun:
		// Only allocations starting, stopping or ended are asked for
		// their task states; a running one's would be most of the
		// mirror's memory.
		stub.TaskStates = nil
	case stub.TaskStates == nil:
		// The event is Nomad's whole allocation: it has no task state
		// yet, which is known, not to be read.
		stub.TaskStates = map[string]*api.TaskState{}
	}
	m.putAlloc(stub)
	m.touch(wsID, ok)
}

func (m *mirror) applyVolume(ev *api.Event) {
	if ev.Index <= m.tables.volumes {
		return
	}
	var payload struct{ Volume *api.HostVolume }
	raw, err := json.Marshal(ev.Payload)
	if err == nil {
		err = json.Unmarshal(raw, &payload)
	}
	if err != nil || payload.Volume == nil || payload.Volume.ID == "" {
		m.broken()
		return
	}
	v := payload.Volume
	if !strings.HasPrefix(v.Name, controller.NamePrefix) {
		return
	}
	wsID, ok := controller.ParseVolumeName(v.Name)
	if ev.Type == eventHostVolumeDeleted {
		m.deleteVolume(v.ID)
		m.touch(wsID, ok)
		return
	}
	if old := m.volumes[v.ID]; old != nil && old.ModifyIndex > v.ModifyIndex {
		return
	}
	m.putVolume(volumeStub(v))
	m.touch(wsID, ok)
}

func (m *mirror) applyService(ev *api.Event) {
	if ev.Index <= m.tables.services {
		return
	}
	s, err := ev.Service()
	if err != nil || s == nil || s.ID == "" {
		m.broken()
		return
	}
	if !strings.HasPrefix(s.ServiceName, controller.NamePrefix) {
		return
	}
	e := m.services[s.ServiceName]
	if e == nil {
		e = &serviceEntry{ids: map[string]bool{}}
		m.services[s.ServiceName] = e
	}
	e.seq++
	m.touchService(m.touched, s.ServiceName)
	if ev.Type != eventServiceDeregistered {
		e.ids[s.ID] = true
		if e.owners == nil {
			e.owners = make(map[string]serviceOwner)
		}
		e.owners[s.ID] = serviceOwner{allocID: s.AllocID, jobID: s.JobID}
		return
	}
	delete(e.ids, s.ID)
	delete(e.owners, s.ID)
	switch {
	case len(e.ids) > 0:
	case e.listed:
		// Registrations the listing named may remain.
		e.dirty = true
	default:
		delete(m.services, s.ServiceName)
	}
}

// registeredBy reports whether, as the mirror counts, an event showed
// allocation allocID of job jobID registering service name. False says
// nothing: the registration may predate the listing.
func (m *mirror) registeredBy(name, allocID, jobID string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.services[name]
	if !m.fresh(now) || e == nil {
		return false
	}
	for _, owner := range e.owners {
		if owner == (serviceOwner{allocID: allocID, jobID: jobID}) {
			return true
		}
	}
	return false
}

// homeVolumes returns the mirror's host volumes while it counts.
func (m *mirror) homeVolumes(now time.Time) ([]*api.HostVolumeStub, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.fresh(now) {
		return nil, false
	}
	return slices.Collect(maps.Values(m.volumes)), true
}

// job returns job id as the mirror holds it while it counts, else nil.
func (m *mirror) job(id string, now time.Time) *api.JobListStub {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.fresh(now) {
		return nil
	}
	return m.jobs[id]
}

// lacksJob reports whether the mirror counts and holds no job id.
func (m *mirror) lacksJob(id string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fresh(now) && m.jobs[id] == nil
}

// volumeNamed returns the newest volume named name while the mirror
// counts, nil when it holds none or does not count.
func (m *mirror) volumeNamed(name string, now time.Time) *api.HostVolumeStub {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.fresh(now) {
		return nil
	}
	var newest *api.HostVolumeStub
	for id := range m.volumesByName[name] {
		if v := m.volumes[id]; newest == nil || v.CreateIndex > newest.CreateIndex {
			newest = v
		}
	}
	return newest
}

// created records a volume codehub just created, ahead of its event.
func (m *mirror) created(v *api.HostVolume) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v == nil || v.ID == "" || m.synced == 0 || m.synced != m.stream {
		return
	}
	if old := m.volumes[v.ID]; old == nil || old.ModifyIndex <= v.ModifyIndex {
		m.putVolume(volumeStub(v))
		wsID, ok := controller.ParseVolumeName(v.Name)
		m.touch(wsID, ok)
	}
}

// jobStub is the list stub of a job an event carried; the job's summary
// is not among an event's payload (see unplacedJobs).
func jobStub(j *api.Job) *api.JobListStub {
	s := &api.JobListStub{
		ID:             deref(j.ID),
		Name:           deref(j.Name),
		Namespace:      deref(j.Namespace),
		Type:           deref(j.Type),
		Stop:           deref(j.Stop),
		Status:         deref(j.Status),
		CreateIndex:    deref(j.CreateIndex),
		ModifyIndex:    deref(j.ModifyIndex),
		JobModifyIndex: deref(j.JobModifyIndex),
		SubmitTime:     deref(j.SubmitTime),
		Meta:           maps.Clone(j.Meta),
		Datacenters:    j.Datacenters,
	}
	return s
}

// volumeStub is the list stub of a host volume an event carried.
func volumeStub(v *api.HostVolume) *api.HostVolumeStub {
	return &api.HostVolumeStub{
		Namespace:     v.Namespace,
		ID:            v.ID,
		Name:          v.Name,
		PluginID:      v.PluginID,
		NodePool:      v.NodePool,
		NodeID:        v.NodeID,
		CapacityBytes: v.CapacityBytes,
		State:         v.State,
		CreateIndex:   v.CreateIndex,
		CreateTime:    v.CreateTime,
		ModifyIndex:   v.ModifyIndex,
		ModifyTime:    v.ModifyTime,
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
