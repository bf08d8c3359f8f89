package nomad

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/internal/nomadtest"
)

// RequireACLs against real agents: refused without ACLs unless the
// operator opts out (and then a WARN on every start), accepted with ACLs
// and codehub holding only the documented policy. The probe never sends a
// token, not even the NOMAD_TOKEN of the environment.
func TestE2ERequireACLs(t *testing.T) {
	nomadtest.Binary(t)
	ctx := t.Context()

	t.Run("a cluster without ACLs is refused", func(t *testing.T) {
		a := nomadtest.Start(t, "")
		logged := &nomadtest.LockedBuffer{}
		logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: logged})
		err := RequireACLs(ctx, logger, &config.NomadBackend{Address: a.Addr}, 30*time.Second)
		if !errors.Is(err, ErrACLsNotEnforced) || !strings.Contains(err.Error(), "insecure_allow_no_acls") {
			t.Fatalf("RequireACLs = %v; want ErrACLsNotEnforced naming insecure_allow_no_acls", err)
		}

		for start := range 2 {
			logged := &nomadtest.LockedBuffer{}
			logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: logged})
			n := &config.NomadBackend{Address: a.Addr, InsecureAllowNoACLs: true}
			if err := RequireACLs(ctx, logger, n, 30*time.Second); err != nil {
				t.Fatalf("start %d with the opt-out: %v", start, err)
			}
			if s := logged.String(); !strings.Contains(s, "[WARN]") || !strings.Contains(s, "does not enforce ACLs") {
				t.Errorf("start %d with the opt-out logged no warning:\n%s", start, s)
			}
		}
	})

	t.Run("a cluster with ACLs and the documented policy is accepted", func(t *testing.T) {
		a := nomadtest.Start(t, "acl {\n  enabled = true\n}\n")
		if a.ManagementToken == "" {
			t.Fatal("the agent started without enforcing ACLs")
		}
		if _, err := a.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "codehub", Rules: documentedPolicy(t)}, nil); err != nil {
			t.Fatal(err)
		}
		token, _, err := a.Client.ACLTokens().Create(&api.ACLToken{Name: "codehub", Type: "client", Policies: []string{"codehub"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A management token in the environment must not make the probe
		// look refused or allowed: it goes without any token.
		t.Setenv("NOMAD_TOKEN", a.ManagementToken)
		logged := &nomadtest.LockedBuffer{}
		logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: logged})
		n := &config.NomadBackend{Address: a.Addr, Token: config.Secret(token.SecretID)}
		if err := RequireACLs(ctx, logger, n, 30*time.Second); err != nil {
			t.Fatalf("RequireACLs on a cluster enforcing ACLs: %v", err)
		}
		if s := logged.String(); strings.Contains(s, "[WARN]") {
			t.Errorf("a cluster enforcing ACLs was warned about:\n%s", s)
		}
	})

	t.Run("no answer decides nothing", func(t *testing.T) {
		n := &config.NomadBackend{Address: "http://127.0.0.1:9", InsecureAllowNoACLs: true}
		err := RequireACLs(ctx, hclog.NewNullLogger(), n, 2*time.Second)
		if !errors.Is(err, errACLsUnknown) {
			t.Fatalf("RequireACLs of an unreachable cluster = %v, want errACLsUnknown", err)
		}
	})
}
