package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/internal/testenv"
)

// TestServerServesEngineMetrics: the controller's metrics are registered
// with the registry the API serves, next to the API's own.
func TestServerServesEngineMetrics(t *testing.T) {
	cfg := testConfig(t, testenv.RedisURL(t))
	startServer(t, cfg)
	resp, err := http.Get("http://" + cfg.Listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d", resp.StatusCode)
	}
	for _, series := range []string{
		`codehub_ttl_expiries_total{kind="standby"}`,
		`codehub_ttl_expiries_total{kind="archive"}`,
		`codehub_controller_pass_duration_seconds_count`,
		`codehub_gc_archives_deleted_total`,
		`codehub_login_failures_total`,
	} {
		if !strings.Contains(string(body), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}
