package e2e

import (
	"os"
	"testing"

	"github.com/codehub-io/codehub/internal/oidctest"
)

// TestMain removes the codehub binary and the test provider the run's
// tests shared.
func TestMain(m *testing.M) {
	code := m.Run()
	if codehubBuild.dir != "" {
		_ = os.RemoveAll(codehubBuild.dir)
	}
	if fakeServerBuild.dir != "" {
		_ = os.RemoveAll(fakeServerBuild.dir)
	}
	if devServerBuild.dir != "" {
		_ = os.RemoveAll(devServerBuild.dir)
	}
	oidctest.RemoveBuild()
	os.Exit(code)
}
