package nomad

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/config"
)

// InsecureSetting is the configuration attribute that lets codehub run on
// a cluster that does not enforce ACLs.
const InsecureSetting = `backend "nomad" { insecure_allow_no_acls = true }`

// ErrACLsNotEnforced reports a cluster that lets a request without a token
// read a workspace's Nomad Variable. Every workspace program can reach its
// node's Nomad API (host networking, exec, raw_exec), so on such a cluster
// any user reads every workspace's upstream token and the stop-archive S3
// keys, and registers jobs of their own.
var ErrACLsNotEnforced = errors.New("the Nomad cluster does not enforce ACLs: any workspace could read every Nomad Variable and register jobs through its node's agent")

// errACLsUnknown reports an answer that says nothing about ACLs.
var errACLsUnknown = errors.New("cannot tell whether the Nomad cluster enforces ACLs")

// aclProbePath is a workspace variable path no workspace has: reading it
// needs the same right as reading a real one.
const aclProbePath = "nomad/jobs/ws-codehub-acl-probe"

// aclsEnforced judges Nomad's answer to a tokenless read of a workspace
// variable: refused (401, 403) means ACLs guard it; an answer (found, or
// not found: Peek's nil error) means anyone may read the variables of
// workspace jobs. Any other answer (a transport error, 5xx) decides
// nothing.
func aclsEnforced(err error) (bool, error) {
	if err == nil {
		return false, nil
	}
	code, ok := statusCode(err)
	switch {
	case !ok:
		return false, fmt.Errorf("%w: %w", errACLsUnknown, err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return true, nil
	}
	return false, fmt.Errorf("%w: nomad answered %d: %w", errACLsUnknown, code, err)
}

// RequireACLs asks the cluster, without a token, for a workspace's
// variable, and refuses (ErrACLsNotEnforced) when it answers: codehub must
// not run workspaces on a cluster that does not enforce ACLs unless the
// operator set insecure_allow_no_acls, which is then logged at WARN on
// every start. An answer that decides nothing is asked again until
// patience runs out; then it fails, since nothing proves the cluster safe.
func RequireACLs(ctx context.Context, logger hclog.Logger, n *config.NomadBackend, patience time.Duration) error {
	c := clientConfig(n)
	// Anonymous: DefaultConfig takes NOMAD_TOKEN from the environment.
	c.SecretID = ""
	anonymous, err := api.NewClient(c)
	if err != nil {
		return fmt.Errorf("nomad client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	for {
		q := &api.QueryOptions{Namespace: c.Namespace, Region: c.Region}
		_, _, readErr := anonymous.Variables().Peek(aclProbePath, q.WithContext(ctx))
		enforced, err := aclsEnforced(readErr)
		switch {
		case err == nil && enforced:
			return nil
		case err == nil && n.InsecureAllowNoACLs:
			logger.Warn("the Nomad cluster does not enforce ACLs: every workspace can read all Nomad Variables (upstream tokens, S3 keys) and register jobs through its node's agent; running anyway because insecure_allow_no_acls is set",
				"address", c.Address)
			return nil
		case err == nil:
			return fmt.Errorf("%w (a request without a token read %s at %s). Enable ACLs on the cluster and give codehub a token with the policy in docs/nomad.md, or, for a cluster no workspace user may abuse, set %s", ErrACLsNotEnforced, aclProbePath, c.Address, InsecureSetting)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w at %s: %w", errACLsUnknown, c.Address, err)
		case <-time.After(time.Second):
		}
	}
}
