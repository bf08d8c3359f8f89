package nomad

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

// fakeConsul serves /v1/health/service/<name> from a recorded response
// shaped like Consul's documented answer, honouring blocking queries: a
// request with index=N waits until the state index passes N.
type fakeConsul struct {
	mu       sync.Mutex
	changed  chan struct{}
	index    uint64
	body     []byte
	requests []*http.Request
}

func newFakeConsul(t *testing.T, body []byte) (*fakeConsul, *consulapi.Client) {
	t.Helper()
	f := &fakeConsul{changed: make(chan struct{}), index: 100, body: body}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	t.Cleanup(f.release)
	c, err := consulapi.NewClient(&consulapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

func (f *fakeConsul) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r)
	wait, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	changed := f.changed
	current := f.index
	f.mu.Unlock()
	if wait >= current {
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
	f.mu.Lock()
	w.Header().Set("X-Consul-Index", strconv.FormatUint(f.index, 10))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(f.body)
	f.mu.Unlock()
}

// set replaces the answer and wakes blocked queries.
func (f *fakeConsul) set(body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.body = body
	f.index++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeConsul) release() { f.set(f.body) }

func (f *fakeConsul) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func TestConsulResolver(t *testing.T) {
	recorded, err := os.ReadFile("testdata/consul_health_service.json")
	if err != nil {
		t.Fatal(err)
	}
	fake, client := newFakeConsul(t, recorded)
	f := newFakeNomad(t)
	workspaceAllocFixture(f, recordedAlloc, "ws-"+testWS, testWS)
	r := NewConsulResolver(hclog.NewNullLogger(), client, f.client(), "default", "", ConsulResolverOptions{Datacenter: "dc1"})
	t.Cleanup(r.Close)

	addr, err := r.Resolve(t.Context(), testWS)
	if err != nil {
		t.Fatal(err)
	}
	if addr != "10.1.10.12:27381" {
		t.Fatalf("addr = %q", addr)
	}
	fake.mu.Lock()
	first := fake.requests[0]
	fake.mu.Unlock()
	if first.URL.Path != "/v1/health/service/ws-"+testWS || first.URL.Query().Get("passing") != "1" || first.URL.Query().Get("dc") != "dc1" {
		t.Fatalf("request = %s", first.URL)
	}

	// Cached: a second resolve asks Consul nothing new (the watch is parked
	// in one blocking query).
	if _, err := r.Resolve(t.Context(), testWS); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return fake.count() == 2 })
	fake.mu.Lock()
	blocking := fake.requests[1].URL.Query().Get("index")
	fake.mu.Unlock()
	if blocking != "100" {
		t.Fatalf("second query index = %q, want a blocking query on 100", blocking)
	}

	// The instance stops passing: the blocking query returns and the next
	// resolve sees no upstream.
	fake.set([]byte("[]"))
	waitFor(t, func() bool {
		_, err := r.Resolve(t.Context(), testWS)
		return errors.Is(err, controller.ErrNoUpstream)
	})
}

func TestConsulResolverError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "ACL not found", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	c, err := consulapi.NewClient(&consulapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := NewConsulResolver(hclog.NewNullLogger(), c, newFakeNomad(t).client(), "default", "", ConsulResolverOptions{})
	t.Cleanup(r.Close)
	_, err = r.Resolve(t.Context(), testWS)
	if err == nil || errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("err = %v, want the Consul error", err)
	}
}

// waitFor polls cond; the test's own deadline bounds it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-t.Context().Done():
			t.Fatal("condition never held")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// recordedAlloc is the allocation named by the service id in
// testdata/consul_health_service.json.
const recordedAlloc = "5b8e1a1a-3f0c-4b7e-9d1e-2a6c8f0b1d23"

// workspaceAllocFixture makes the fake answer for a running allocation of
// job, marked as codehub's workspace wsID.
func workspaceAllocFixture(f *fakeNomad, allocID, job, wsID string) {
	f.json("GET /v1/allocation/"+allocID, &api.Allocation{
		ID: allocID, Namespace: "default", JobID: job,
		DesiredStatus: api.AllocDesiredStatusRun, ClientStatus: api.AllocClientStatusRunning,
		Job: &api.Job{ID: &job, Meta: map[string]string{MetaManaged: "true", MetaWorkspaceID: wsID}},
	})
}

// Anyone who may register services can register one named ws-{id} with a
// passing check; the proxy would send it the workspace's traffic and its
// upstream token. Only the service Nomad registered for the running
// allocation of job ws-{id} counts.
func TestConsulResolverRefusesForgedRegistrations(t *testing.T) {
	name := "ws-" + testWS
	other := "7c1d2e3f-0000-4000-8000-000000000001"
	entry := func(id, addr string) *consulapi.ServiceEntry {
		return &consulapi.ServiceEntry{Service: &consulapi.AgentService{ID: id, Service: name, Address: addr, Port: 9000}}
	}
	entries := []*consulapi.ServiceEntry{
		// Registered straight into Consul under the workspace's name.
		entry(name, "10.0.0.1"),
		// Nomad's form, naming an allocation of another job.
		entry("_nomad-task-"+other+"-group-workspace-"+name+"-http", "10.0.0.2"),
		// Nomad's form for another group or port of the real allocation.
		entry("_nomad-task-"+recordedAlloc+"-group-evil-"+name+"-http", "10.0.0.3"),
	}
	forged, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	fake, client := newFakeConsul(t, forged)
	f := newFakeNomad(t)
	workspaceAllocFixture(f, other, "evil", testWS)
	workspaceAllocFixture(f, recordedAlloc, "ws-"+testWS, testWS)
	r := NewConsulResolver(hclog.NewNullLogger(), client, f.client(), "default", "", ConsulResolverOptions{})
	t.Cleanup(r.Close)
	if addr, err := r.Resolve(t.Context(), testWS); !errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("resolved %q, %v: want no upstream among forged registrations", addr, err)
	}

	// The real one beside them wins, although the forged addresses sort first.
	fake.set(mustJSON(t, append(entries, entry("_nomad-task-"+recordedAlloc+"-group-workspace-"+name+"-http", "10.0.0.9"))))
	waitFor(t, func() bool {
		addr, err := r.Resolve(t.Context(), testWS)
		return err == nil && addr == "10.0.0.9:9000"
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The same for Nomad's own service discovery: a registration of another
// job (or of an allocation that is not the workspace job's running one) is
// never resolved, even with passing checks.
func TestServiceResolverRefusesForgedRegistrations(t *testing.T) {
	f := newFakeNomad(t)
	name := "ws-" + testWS
	f.json("GET /v1/service/"+name, []*api.ServiceRegistration{
		{ID: "s1", ServiceName: name, JobID: "evil", AllocID: "a-evil", Address: "127.0.0.1", Port: 20001},
		{ID: "s2", ServiceName: name, JobID: "ws-" + testWS, AllocID: "a-stale", Address: "127.0.0.1", Port: 20002},
		{ID: "s3", ServiceName: name, JobID: "ws-" + testWS, AllocID: "a-real", Address: "127.0.0.1", Port: 20003},
	})
	workspaceAllocFixture(f, "a-evil", "evil", testWS)
	f.json("GET /v1/allocation/a-stale", &api.Allocation{ID: "a-stale", Namespace: "default", JobID: "ws-" + testWS,
		DesiredStatus: api.AllocDesiredStatusStop, ClientStatus: api.AllocClientStatusRunning})
	workspaceAllocFixture(f, "a-real", "ws-"+testWS, testWS)
	for _, a := range []string{"a-evil", "a-stale", "a-real"} {
		f.json("GET /v1/client/allocation/"+a+"/checks", api.AllocCheckStatuses{"c": {Service: name, Status: "success"}})
	}
	r := NewServiceResolver(hclog.NewNullLogger(), f.client(), ResolverOptions{Namespace: "default"})
	addr, err := r.Resolve(t.Context(), testWS)
	if err != nil || addr != "127.0.0.1:20003" {
		t.Fatalf("resolved %q, %v: want the running allocation's registration", addr, err)
	}
	if n := len(f.calls("GET /v1/client/allocation/a-evil/checks")); n != 0 {
		t.Errorf("read the checks of another job's allocation %d times", n)
	}
}

func TestServiceResolver(t *testing.T) {
	f := newFakeNomad(t)
	name := "ws-" + testWS
	f.json("GET /v1/service/"+name, []*api.ServiceRegistration{
		{ID: "s1", ServiceName: name, JobID: name, AllocID: "a-old", Address: "127.0.0.1", Port: 20001},
		{ID: "s2", ServiceName: name, JobID: name, AllocID: "a-new", Address: "127.0.0.1", Port: 20002},
	})
	workspaceAllocFixture(f, "a-old", name, testWS)
	workspaceAllocFixture(f, "a-new", name, testWS)
	f.json("GET /v1/client/allocation/a-old/checks", api.AllocCheckStatuses{"c": {Service: name, Status: "failure"}})
	f.json("GET /v1/client/allocation/a-new/checks", api.AllocCheckStatuses{"c": {Service: name, Status: "success"}})
	r := NewServiceResolver(hclog.NewNullLogger(), f.client(), ResolverOptions{Namespace: "default", CacheTTL: time.Hour})

	addr, err := r.Resolve(t.Context(), testWS)
	if err != nil {
		t.Fatal(err)
	}
	if addr != "127.0.0.1:20002" {
		t.Fatalf("addr = %q, want the instance whose checks pass", addr)
	}
	if _, err := r.Resolve(t.Context(), testWS); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("GET /v1/service/" + name)); n != 1 {
		t.Fatalf("%d service reads, want 1 (cached)", n)
	}
	// The workspace started again at another address within the cache's
	// life: once the proxy forgets the dead one, Nomad is asked again.
	f.json("GET /v1/service/"+name, []*api.ServiceRegistration{
		{ID: "s3", ServiceName: name, JobID: name, AllocID: "a-new", Address: "127.0.0.1", Port: 20003},
	})
	if addr, _ := r.Resolve(t.Context(), testWS); addr != "127.0.0.1:20002" {
		t.Fatalf("addr before Forget = %q, want the cached one", addr)
	}
	r.Forget(testWS)
	if addr, err := r.Resolve(t.Context(), testWS); err != nil || addr != "127.0.0.1:20003" {
		t.Fatalf("addr after Forget = %q, %v, want the new registration", addr, err)
	}

	f2 := newFakeNomad(t)
	f2.json("GET /v1/service/"+name, []*api.ServiceRegistration{{ID: "s1", JobID: name, AllocID: "a1", Address: "127.0.0.1", Port: 1}})
	workspaceAllocFixture(f2, "a1", name, testWS)
	f2.json("GET /v1/client/allocation/a1/checks", api.AllocCheckStatuses{"c": {Service: name, Status: "pending"}})
	r2 := NewServiceResolver(hclog.NewNullLogger(), f2.client(), ResolverOptions{})
	if _, err := r2.Resolve(t.Context(), testWS); !errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("err = %v, want ErrNoUpstream while checks are pending", err)
	}
}

// Before Nomad's check passes, an instance whose program answers /healthz
// directly counts, though the check that ran as its task started failed;
// a check that fails after that answer refuses it again.
func TestServiceResolverEarlyAnswer(t *testing.T) {
	prog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer prog.Close()
	host, port, err := net.SplitHostPort(prog.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	portNum, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeNomad(t)
	name := "ws-" + testWS
	f.json("GET /v1/service/"+name, []*api.ServiceRegistration{{ID: "s1", ServiceName: name, JobID: name, AllocID: "a1", Address: host, Port: portNum}})
	workspaceAllocFixture(f, "a1", name, testWS)
	checks := "GET /v1/client/allocation/a1/checks"
	f.json(checks, api.AllocCheckStatuses{"c": {Service: name, Status: "failure", Timestamp: time.Now().Unix() - 1}})
	r := NewServiceResolver(hclog.NewNullLogger(), f.client(), ResolverOptions{Namespace: "default", CacheTTL: time.Nanosecond})

	addr, err := r.Resolve(t.Context(), testWS)
	if err != nil {
		t.Fatal(err)
	}
	if addr != prog.Listener.Addr().String() {
		t.Fatalf("addr = %q, want the program that answered, %s", addr, prog.Listener.Addr())
	}

	f.json(checks, api.AllocCheckStatuses{"c": {Service: name, Status: "failure", Timestamp: time.Now().Unix() + 1}})
	if _, err := r.Resolve(t.Context(), testWS); !errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("err = %v, want ErrNoUpstream once a check failed after the answer", err)
	}
}
