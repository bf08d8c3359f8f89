package nomad

import (
	"errors"
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
	r := NewConsulResolver(hclog.NewNullLogger(), client, ConsulResolverOptions{Datacenter: "dc1"})
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
	r := NewConsulResolver(hclog.NewNullLogger(), c, ConsulResolverOptions{})
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

func TestServiceResolver(t *testing.T) {
	f := newFakeNomad(t)
	name := "ws-" + testWS
	f.json("GET /v1/service/"+name, []*api.ServiceRegistration{
		{ID: "s1", ServiceName: name, AllocID: "a-old", Address: "127.0.0.1", Port: 20001},
		{ID: "s2", ServiceName: name, AllocID: "a-new", Address: "127.0.0.1", Port: 20002},
	})
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

	f2 := newFakeNomad(t)
	f2.json("GET /v1/service/"+name, []*api.ServiceRegistration{{ID: "s1", AllocID: "a1", Address: "127.0.0.1", Port: 1}})
	f2.json("GET /v1/client/allocation/a1/checks", api.AllocCheckStatuses{"c": {Service: name, Status: "pending"}})
	r2 := NewServiceResolver(hclog.NewNullLogger(), f2.client(), ResolverOptions{})
	if _, err := r2.Resolve(t.Context(), testWS); !errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("err = %v, want ErrNoUpstream while checks are pending", err)
	}
}
