package e2e

import (
	"os"
	"testing"
)

// TestMain removes the codehub binary the run's tests shared.
func TestMain(m *testing.M) {
	code := m.Run()
	if codehubBuild.dir != "" {
		_ = os.RemoveAll(codehubBuild.dir)
	}
	os.Exit(code)
}
