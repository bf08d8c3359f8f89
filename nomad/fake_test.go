package nomad

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/jobspecs"
)

// fakeNomad is an httptest Nomad HTTP API: routes answer canned JSON and
// every request is recorded for request-shape assertions.
type fakeNomad struct {
	t   testing.TB
	srv *httptest.Server

	mu       sync.Mutex
	routes   map[string]http.HandlerFunc // "METHOD /path"
	requests []recorded
}

type recorded struct {
	Method string
	Path   string
	Query  url.Values
	Body   string
}

func newFakeNomad(t testing.TB) *fakeNomad {
	t.Helper()
	f := &fakeNomad{t: t, routes: make(map[string]http.HandlerFunc)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNomad) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Body: string(body)})
	h, ok := f.routes[r.Method+" "+r.URL.Path]
	f.mu.Unlock()
	w.Header().Set("X-Nomad-Index", "42")
	w.Header().Set("X-Nomad-LastContact", "0")
	w.Header().Set("X-Nomad-KnownLeader", "true")
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	h(w, r)
}

// json answers a route with v encoded as JSON (encoded once, so benchmarks
// measure the client, not the fake).
func (f *fakeNomad) json(route string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		f.t.Fatalf("encode %s: %v", route, err)
	}
	f.handle(route, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
}

func (f *fakeNomad) status(route string, code int, msg string) {
	f.handle(route, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, msg, code) })
}

func (f *fakeNomad) handle(route string, h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[route] = h
}

// calls returns the recorded requests matching "METHOD /path".
func (f *fakeNomad) calls(route string) []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []recorded
	for _, r := range f.requests {
		if r.Method+" "+r.Path == route {
			out = append(out, r)
		}
	}
	return out
}

// routesCalled lists every distinct "METHOD /path" requested, sorted.
func (f *fakeNomad) routesCalled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range f.requests {
		seen[r.Method+" "+r.Path] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (f *fakeNomad) client() *api.Client {
	f.t.Helper()
	c, err := api.NewClient(&api.Config{Address: f.srv.URL})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func testOptions() Options {
	return Options{
		Namespace:   "default",
		NodePool:    "default",
		Datacenters: []string{"dc1"},
		Driver:      DriverRawExec,
		CodehubPath: "/usr/local/bin/codehub",
		Workspace: WorkspaceOptions{
			Command: "/usr/local/bin/workspace-server",
			Args:    []string{"-listen", "127.0.0.1:%PORT%", "-home", "%HOME%"},
			UID:     1000, GID: 1000, CPU: 100, Memory: 128,
		},
		S3: config.S3{
			Endpoint: "127.0.0.1:9000", Bucket: "codehub", Region: "us-east-1",
			AccessKey: "AKIA-TEST-ACCESS-KEY", SecretKey: "s3cr3t-value-never-in-hcl",
		},
	}
}

func newTestBackend(t testing.TB, f *fakeNomad, opts Options) *Backend {
	t.Helper()
	r, err := jobspecs.NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	return New(hclog.NewNullLogger(), f.client(), opts, r)
}
