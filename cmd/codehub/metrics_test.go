package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/internal/testenv"
)

// TestServerServesEngineMetrics: the controller's metrics are registered
// with the registry served, next to the API's own, on the metrics listener
// and never on the main one.
func TestServerServesEngineMetrics(t *testing.T) {
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg := testConfig(t, testenv.RedisURL(t), fmt.Sprintf("metrics {\n  listen = %q\n}\n", metricsAddr))
	startServer(t, cfg)
	code, body := scrape(t, "http://"+metricsAddr+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, series := range []string{
		`codehub_ttl_expiries_total{kind="standby"}`,
		`codehub_ttl_expiries_total{kind="archive"}`,
		`codehub_controller_pass_duration_seconds_count`,
		`codehub_gc_archives_deleted_total`,
		`codehub_login_failures_total`,
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	if code, _ := scrape(t, "http://"+cfg.Listen+"/metrics", ""); code != http.StatusNotFound {
		t.Errorf("main listener /metrics = %d, want 404 with a metrics listener", code)
	}
}

// /metrics was public on the main listener (and each scrape queries the
// database). With metrics.token it is served there only to that bearer
// token; with nothing set, not at all.
func TestServerMetricsNeedTheToken(t *testing.T) {
	cfg := testConfig(t, testenv.RedisURL(t), "metrics {\n  token = \"scrape-secret\"\n}\n")
	startServer(t, cfg)
	url := "http://" + cfg.Listen + "/metrics"
	for _, tc := range []struct {
		token string
		want  int
	}{
		{"", http.StatusUnauthorized},
		{"guess", http.StatusUnauthorized},
		{"scrape-secret", http.StatusOK},
	} {
		if code, _ := scrape(t, url, tc.token); code != tc.want {
			t.Errorf("/metrics with token %q = %d, want %d", tc.token, code, tc.want)
		}
	}

	plain := testConfig(t, testenv.RedisURL(t))
	startServer(t, plain)
	if code, _ := scrape(t, "http://"+plain.Listen+"/metrics", ""); code != http.StatusNotFound {
		t.Errorf("/metrics without metrics settings = %d, want 404", code)
	}
}

func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
