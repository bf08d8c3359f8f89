package nomad

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/internal/httpresult"
)

func TestCall(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/v1/jobs", "GET /v1/jobs"},
		{"GET", "/v1/job/ws-0a1b2c3d", "GET /v1/job/:id"},
		{"DELETE", "/v1/job/ws-0a1b2c3d", "DELETE /v1/job/:id"},
		{"GET", "/v1/job/ws-0a1b2c3d/allocations", "GET /v1/job/:id/allocations"},
		{"GET", "/v1/job/ws-0a1b2c3d/evaluations", "GET /v1/job/:id/evaluations"},
		{"PUT", "/v1/jobs/parse", "PUT /v1/jobs/parse"},
		{"GET", "/v1/allocations", "GET /v1/allocations"},
		{"GET", "/v1/allocation/5d1c5e42-1b7b-4a4e-9c4e-1f0d9b8b7a11", "GET /v1/allocation/:id"},
		{"GET", "/v1/client/allocation/5d1c5e42-1b7b-4a4e-9c4e-1f0d9b8b7a11/checks", "GET /v1/client/allocation/:id/checks"},
		{"PUT", "/v1/client/allocation/5d1c5e42-1b7b-4a4e-9c4e-1f0d9b8b7a11/signal", "PUT /v1/client/allocation/:id/signal"},
		{"GET", "/v1/client/fs/logs/5d1c5e42-1b7b-4a4e-9c4e-1f0d9b8b7a11", "GET /v1/client/fs/logs/:id"},
		{"GET", "/v1/var/nomad/jobs/ws-0a1b2c3d/stop", "GET /v1/var/:id"},
		{"DELETE", "/v1/var/nomad/jobs/ws-0a1b2c3d", "DELETE /v1/var/:id"},
		{"GET", "/v1/vars", "GET /v1/vars"},
		{"GET", "/v1/volumes", "GET /v1/volumes"},
		{"PUT", "/v1/volume/host/create", "PUT /v1/volume/host/create"},
		{"GET", "/v1/volume/host/9f0c0e1a-2b3c-4d5e-8f90-a1b2c3d4e5f6", "GET /v1/volume/host/:id"},
		{"DELETE", "/v1/volume/host/9f0c0e1a-2b3c-4d5e-8f90-a1b2c3d4e5f6/delete", "DELETE /v1/volume/host/:id/delete"},
		{"GET", "/v1/service/ws-0a1b2c3d", "GET /v1/service/:id"},
		{"GET", "/v1/node/9f0c0e1a-2b3c-4d5e-8f90-a1b2c3d4e5f6", "GET /v1/node/:id"},
		{"GET", "/v1/nodes", "GET /v1/nodes"},
		{"GET", "/v1/event/stream", "GET /v1/event/stream"},
		{"GET", "/v1/acl/token/self", "GET /v1/acl/token/self"},
		{"GET", "/v1/acl/policy/Codehub-Workspaces-2026", "GET /v1/acl/policy/:id"},
		{"GET", "/healthz", "GET other"},
	} {
		if got := call(tc.method, tc.path); got != tc.want {
			t.Errorf("call(%s %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

// TestClientCountsRequests: a client made with request metrics counts
// each request by call and result.
func TestClientCountsRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/jobs":
			w.Write([]byte("[]"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	requests := NewRequests()
	client, err := NewClient(&config.NomadBackend{Address: srv.URL}, requests)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := client.Jobs().List(nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := client.Jobs().Info("ws-0a1b2c3d", nil); err == nil {
		t.Fatal("reading a missing job: no error")
	}
	if got := testutil.ToFloat64(requests.total.WithLabelValues("GET /v1/jobs", httpresult.OK)); got != 2 {
		t.Errorf("listings counted: %v, want 2", got)
	}
	if got := testutil.ToFloat64(requests.total.WithLabelValues("GET /v1/job/:id", httpresult.ClientError)); got != 1 {
		t.Errorf("missing job counted: %v, want 1", got)
	}
	if n := testutil.CollectAndCount(requests.seconds); n != 2 {
		t.Errorf("timed calls: %d, want 2", n)
	}
}
