package local

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/internal/backendtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// TestConformance holds the single-machine backend, built from a
// configuration file as `codehub server` builds it, to the Backend contract.
func TestConformance(t *testing.T) {
	codeServer := os.Getenv(envCodeServer)
	if codeServer == "" {
		msg := fmt.Sprintf("real code-server not available: set %s (scripts/install-code-server.sh installs it)", envCodeServer)
		if os.Getenv(testenv.EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	codehub := buildCodehub(t)
	backendtest.Run(t, func(t *testing.T, s3 testenv.S3) backendtest.Subject {
		cfg := backendtest.LoadConfig(t, s3, fmt.Sprintf(`backend "local" {
  data_dir    = %q
  code_server = %q
}
`, t.TempDir(), codeServer))
		opts, err := OptionsFromConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		opts.CodehubBinary = codehub
		b, err := New(hclog.NewNullLogger(), opts)
		if err != nil {
			t.Fatal(err)
		}
		// Workspaces and jobs outlive the backend by design.
		t.Cleanup(func() {
			if err := b.StopAll(context.Background()); err != nil {
				t.Errorf("stop what the test left running: %v", err)
			}
		})
		home := func(_ context.Context, wsID string) (string, error) { return b.HomeDir(wsID), nil }
		return backendtest.Subject{Backend: b, Upstreams: b, Home: home}
	})
}
