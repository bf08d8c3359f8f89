package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/internal/testenv"
)

// testConfig writes a server config for the test services and loads it.
func testConfig(t *testing.T, redisURL string, extra ...string) *config.Config {
	t.Helper()
	cfg, err := config.Load(testConfigFile(t, redisURL, extra...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// testConfigFile writes a server config for the test services, with extra
// lines, and returns its path.
func testConfigFile(t *testing.T, redisURL string, extra ...string) string {
	t.Helper()
	s3 := testenv.NewS3(t)
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "codehub.hcl")
	body := fmt.Sprintf(`
listen     = %q
public_url = "http://%s"
database { url = %q }
redis    { url = %q }
s3 {
  endpoint   = %q
  bucket     = %q
  access_key = %q
  secret_key = %q
  region     = %q
}
backend "local" {
  data_dir    = %q
  code_server = "/bin/true"
}
`, listen, listen, testenv.PostgresURL(t), redisURL, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey, s3.Region, t.TempDir()) +
		strings.Join(extra, "\n")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type healthBody struct {
	Status string                  `json:"status"`
	Checks map[string]healthResult `json:"checks"`
}

func getHealth(t *testing.T, addr string) (int, healthBody, error) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/v1/health")
	if err != nil {
		return 0, healthBody{}, err
	}
	defer resp.Body.Close()
	var b healthBody
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		return resp.StatusCode, b, err
	}
	return resp.StatusCode, b, nil
}

// startServer runs serve until the test ends and waits for it to listen.
func startServer(t *testing.T, cfg *config.Config) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, hclog.NewNullLogger(), cfg) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, err := getHealth(t, cfg.Listen); err == nil {
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("server exited before listening: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("server did not start listening")
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			var dump strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
			return fmt.Errorf("server did not stop within 30s of its context ending; goroutines:\n%s", dump.String())
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestServerHealthAndCleanShutdown(t *testing.T) {
	cfg := testConfig(t, testenv.RedisURL(t))
	stop := startServer(t, cfg)

	code, body, err := getHealth(t, cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || body.Status != "ok" {
		t.Fatalf("health = %d %+v, want 200 ok", code, body)
	}
	for _, name := range []string{"database", "redis", "s3"} {
		if !body.Checks[name].OK {
			t.Errorf("check %s = %+v, want ok", name, body.Checks[name])
		}
	}
	// Nomad's artifact stanza fetches the binary from the same listener.
	resp, err := http.Head("http://" + cfg.Listen + "/dl/codehub")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("X-Checksum"), "sha256:") {
		t.Errorf("HEAD /dl/codehub = %d, checksum %q; want 200 with a sha256 checksum", resp.StatusCode, resp.Header.Get("X-Checksum"))
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", cfg.Listen, time.Second); err == nil {
		t.Fatal("listener still accepts connections after shutdown")
	}
}

func TestServerHealthReportsUnreachableRedis(t *testing.T) {
	// Nothing listens on a just-released port.
	cfg := testConfig(t, "redis://"+fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))+"/0")
	startServer(t, cfg)
	code, body, err := getHealth(t, cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable || body.Status != "unavailable" {
		t.Fatalf("health = %d %q, want 503 unavailable", code, body.Status)
	}
	if body.Checks["redis"].OK || body.Checks["redis"].Error == "" {
		t.Errorf("redis check = %+v, want a failure with its error", body.Checks["redis"])
	}
	if !body.Checks["database"].OK || !body.Checks["s3"].OK {
		t.Errorf("database/s3 = %+v/%+v, want ok", body.Checks["database"], body.Checks["s3"])
	}
}

// A client that sends its request headers a byte at a time (or stops half
// way) is cut off once the header timeout passes, as is one that keeps an
// idle connection open: neither holds a connection for long.
func TestServerCutsOffSlowHeadersAndIdleConnections(t *testing.T) {
	cfg := testConfig(t, testenv.RedisURL(t))
	startServer(t, cfg)
	for _, tc := range []struct{ name, send string }{
		{"headers never finished", "GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: "},
		{"idle after a request", "GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", cfg.Listen)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tc.send); err != nil {
				t.Fatal(err)
			}
			// The bound only catches a server that never closes.
			if err := conn.SetReadDeadline(time.Now().Add(2 * time.Minute)); err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, conn); err != nil {
				t.Fatalf("the server kept the connection open: %v", err)
			}
		})
	}
}
