package nomad

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/internal/backendtest"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// TestE2EConformance holds the Nomad backend, built from a configuration
// file as `codehub server` builds it, to the Backend contract on a real
// agent.
func TestE2EConformance(t *testing.T) {
	nomadtest.Binary(t)
	bins := t.TempDir()
	nomadtest.BuildProgram(t, bins, "./testdata/wsserver", "wsserver")
	nomadtest.BuildProgram(t, bins, "../cmd/codehub", "codehub")
	a := nomadtest.Start(t, "")
	backendtest.Run(t, func(t *testing.T, s3 testenv.S3) backendtest.Subject {
		b := e2eBackend(t, a, bins, e2eConfig{s3: s3})
		resolver := NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{Namespace: "default"})
		return backendtest.Subject{Backend: b, Upstreams: resolver, Home: b.HomeDir}
	})
}
