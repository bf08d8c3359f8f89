package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"sort"
	"testing"
	"time"
)

// apiClient talks to the server's REST API with a session cookie.
type apiClient struct {
	tb   testing.TB
	base string
	http *http.Client
}

type apiWorkspace struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Image     string `json:"image"`
	Phase     string `json:"phase"`
	Operation string `json:"operation"`
	Backup    bool   `json:"backup"`
	Desired   string `json:"desired_state"`
	Reason    string `json:"error_reason"`
	ErrorStep string `json:"error_step"`
	// StopsAt is when the idle stop comes if nobody works in it.
	StopsAt *time.Time `json:"stops_at"`
}

func (c *apiClient) do(method, path string, body any, out any) int {
	c.tb.Helper()
	code, err := c.try(method, path, body, out)
	if err != nil {
		c.tb.Fatalf("%s %s: %v", method, path, err)
	}
	return code
}

// try is do for goroutines other than the test's: it returns what went
// wrong instead of failing the test.
func (c *apiClient) try(method, path string, body, out any) (int, error) {
	var r io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

// settle polls the workspace until it shows phase with no operation and
// returns how long that took.
func (c *apiClient) settle(id, phase string, start time.Time) time.Duration {
	c.tb.Helper()
	return c.settleWithin(id, phase, start, 5*time.Minute)
}

// BenchmarkWakeToReady measures, through the REST API of a real server with
// the single-machine backend and real code-server: create until RUNNING
// (once), then per iteration PATCH desired RUNNING on a STANDBY workspace
// until the API shows RUNNING with no operation (code-server answers its
// health check). Reports p50 and p90 of the wakes.
func BenchmarkWakeToReady(b *testing.B) {
	srv := startServer(b, localConfig(b))
	jar, err := cookiejar.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	c := &apiClient{tb: b, base: srv.url, http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	if code := c.do("POST", "/api/v1/login", map[string]string{"username": "admin", "password": adminPassword}, nil); code != http.StatusOK {
		b.Fatalf("login: %d", code)
	}
	var ws apiWorkspace
	start := time.Now()
	if code := c.do("POST", "/api/v1/workspaces", map[string]string{"name": "bench"}, &ws); code != http.StatusCreated {
		b.Fatalf("create: %d", code)
	}
	created := c.settle(ws.ID, "RUNNING", start)
	b.Cleanup(func() { c.do("DELETE", "/api/v1/workspaces/"+ws.ID, nil, nil) })

	var samples []time.Duration
	for b.Loop() {
		b.StopTimer()
		if code := c.do("PATCH", "/api/v1/workspaces/"+ws.ID, map[string]string{"desired_state": "STANDBY"}, nil); code != http.StatusOK {
			b.Fatalf("stop: %d", code)
		}
		c.settle(ws.ID, "STANDBY", time.Now())
		b.StartTimer()
		start := time.Now()
		if code := c.do("PATCH", "/api/v1/workspaces/"+ws.ID, map[string]string{"desired_state": "RUNNING"}, nil); code != http.StatusOK {
			b.Fatalf("wake: %d", code)
		}
		samples = append(samples, c.settle(ws.ID, "RUNNING", start))
	}
	sort.Slice(samples, func(i, k int) bool { return samples[i] < samples[k] })
	// Metrics reported inside the loop's setup would be reset by b.Loop.
	b.ReportMetric(created.Seconds(), "create-s")
	b.ReportMetric(samples[len(samples)/2].Seconds(), "p50-s")
	b.ReportMetric(samples[len(samples)*9/10].Seconds(), "p90-s")
	b.Logf("wake samples: %v", samples)
}
