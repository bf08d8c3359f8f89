package api_test

import (
	"os"
	"testing"

	"github.com/codehub-io/codehub/internal/oidctest"
)

// TestMain removes the test provider the run's single sign-on tests
// shared.
func TestMain(m *testing.M) {
	code := m.Run()
	oidctest.RemoveBuild()
	os.Exit(code)
}
