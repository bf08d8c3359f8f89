package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// scaleProfileSeconds is how much of a phase an agent profile covers: the
// start of a wave, when every request is in flight.
const scaleProfileSeconds = 30

// profileAgent, when CODEHUB_SCALE_PROFILES names a directory, records a
// CPU profile of the Nomad agent at addr (a dev agent serves
// /debug/pprof) over the next scaleProfileSeconds into that directory as
// name.pprof, for `go tool pprof`. The returned func waits for the file;
// the phase calls it when it ends.
func profileAgent(tb testing.TB, addr, name string) func() {
	tb.Helper()
	dir := os.Getenv("CODEHUB_SCALE_PROFILES")
	if dir == "" {
		return func() {}
	}
	path := filepath.Join(dir, name+".pprof")
	errc := make(chan error, 1)
	go func() {
		errc <- fetchProfile(tb.Context(), fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", addr, scaleProfileSeconds), path)
	}()
	return func() {
		tb.Helper()
		if err := <-errc; err != nil {
			tb.Errorf("profile of the nomad agent, %s: %v", name, err)
			return
		}
		tb.Logf("profile of the nomad agent, %s: %s", name, path)
	}
}

func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
