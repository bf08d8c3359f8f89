package nomad

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/doctor"
)

func TestSupportedVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"1.10.0": true, "1.10.1+ent": true, "2.0.6-dev": true, "1.11.0-beta.1": true, "10.0.0": true,
		"1.9.7": false, "1.9.99": false, "0.12.0": false, "": false, "1.10": false, "v1.10.0": false, "1.x.0": false,
	} {
		if got := supportedVersion(v); got != want {
			t.Errorf("supportedVersion(%q) = %v", v, got)
		}
	}
	status, detail, fix, _ := judgeVersions(map[string][]string{"2.0.6": {"server s1"}, "1.9.2": {"client c1", "client c2"}})
	if status != doctor.Fail || !strings.Contains(detail, "1.9.2 (client c1, client c2)") || strings.Contains(detail, "2.0.6") || !strings.Contains(fix, "1.10.0") {
		t.Errorf("an old client: %s %q %q", status, detail, fix)
	}
	if status, detail, _, _ := judgeVersions(map[string][]string{"2.0.6": {"server s1", "client c1"}}); status != doctor.OK || detail != "Nomad 2.0.6" {
		t.Errorf("all new: %s %q", status, detail)
	}
}

// nomadError is the error nomad/api returns for an answer with status
// code and body.
func nomadError(t *testing.T, code int, body string) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Jobs().Info("x", nil)
	return err
}

func TestProbeJudges(t *testing.T) {
	transport := fmt.Errorf("dial: %w", errors.New("connection refused"))
	for _, c := range []struct {
		name             string
		err              error
		judge            func(error) (bool, bool)
		allowed, decided bool
	}{
		{"accepted", nil, allowedBy, true, true},
		{"not found after the check", nomadError(t, 404, "job not found"), allowedBy, true, true},
		{"invalid after the check", nomadError(t, 400, "missing name"), allowedBy, true, true},
		{"server error after the check", nomadError(t, 500, "Task not found"), allowedBy, true, true},
		{"cas conflict", api.ErrCASConflict{CheckIndex: 1}, allowedBy, true, true},
		{"forbidden", nomadError(t, 403, "Permission denied"), allowedBy, false, true},
		{"unauthorized", nomadError(t, 401, ""), allowedBy, false, true},
		{"transport", transport, allowedBy, false, false},
		{"logs: no such task", nomadError(t, 400, `unknown task name "x"`), answeredBadRequest, true, true},
		{"logs: refused by the server", nomadError(t, 500, "Permission denied"), answeredBadRequest, false, true},
		{"logs: refused by the client", nomadError(t, 403, "Permission denied"), answeredBadRequest, false, true},
		{"logs: transport", transport, answeredBadRequest, false, false},
	} {
		allowed, decided := c.judge(c.err)
		if allowed != c.allowed || decided != c.decided {
			t.Errorf("%s: allowed %v decided %v", c.name, allowed, decided)
		}
	}
}

func TestJudgeDriver(t *testing.T) {
	node := func(name string, d *api.DriverInfo) *api.NodeListStub {
		n := &api.NodeListStub{Name: name, Drivers: map[string]*api.DriverInfo{}}
		if d != nil {
			n.Drivers["docker"] = d
		}
		return n
	}
	healthy := &api.DriverInfo{Detected: true, Healthy: true}
	sick := &api.DriverInfo{Detected: true, Healthy: false, HealthDescription: "Failed to connect to docker daemon"}
	for _, c := range []struct {
		name   string
		nodes  []*api.NodeListStub
		status doctor.Status
		says   string
	}{
		{"no nodes", nil, doctor.Fail, `no ready, eligible node in node pool "default"`},
		{"all healthy", []*api.NodeListStub{node("a", healthy), node("b", healthy)}, doctor.OK, "docker healthy on all 2"},
		{"one missing", []*api.NodeListStub{node("a", healthy), node("b", nil)}, doctor.Warn, "b (not detected)"},
		{"none usable", []*api.NodeListStub{node("a", sick), node("b", nil)}, doctor.Fail, "a (unhealthy: Failed to connect to docker daemon), b (not detected)"},
	} {
		f := judgeDriver(c.nodes, "docker", "default", []string{"*"})
		if f.Status != c.status || !strings.Contains(f.Detail, c.says) || (f.Status != doctor.OK) != (f.Fix != "") {
			t.Errorf("%s: %+v", c.name, f)
		}
	}
}

// The cluster's clock is read from the Date header of the leader query,
// and an answer that is not Nomad's, or a cluster without a leader, fails.
func TestPreflightReach(t *testing.T) {
	for _, c := range []struct {
		name         string
		status       int
		body         string
		date         time.Duration
		reach, clock doctor.Status
		says         string
	}{
		{"leader, clock right", 200, `"127.0.0.1:4647"`, 0, doctor.OK, doctor.OK, "leader 127.0.0.1:4647"},
		{"clock ahead", 200, `"127.0.0.1:4647"`, 10 * time.Minute, doctor.OK, doctor.Fail, "leader"},
		{"clock behind", 200, `"127.0.0.1:4647"`, -30 * time.Second, doctor.OK, doctor.Fail, "leader"},
		{"no leader", 200, `""`, 0, doctor.Fail, doctor.OK, "no leader"},
		{"not nomad", 404, `<html>not here</html>`, 0, doctor.Fail, doctor.OK, "not a Nomad HTTP API"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/status/leader" {
					t.Errorf("asked %s", r.URL.Path)
				}
				w.Header().Set("Date", time.Now().Add(c.date).UTC().Format(http.TimeFormat))
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			cfg := config.Default()
			cfg.Backend.Nomad.Address = srv.URL
			client, err := NewClient(cfg.Backend.Nomad, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := &preflight{client: client, addr: srv.URL, n: cfg.Backend.Nomad}
			reach, clock := p.reach(t.Context(), 2*time.Second)
			if reach.Status != c.reach || !strings.Contains(reach.Detail, c.says) || clock.Status != c.clock || clock.Check != "clock.nomad" {
				t.Errorf("reach %+v, clock %+v", reach, clock)
			}
		})
	}
}
