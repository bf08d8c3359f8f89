package agent

import (
	"context"
	"errors"

	"golang.org/x/crypto/ssh"
)

// ErrNoAgent is a workspace that runs without an agent: started before its
// backend ran one, or a docker image whose entrypoint is not known.
var ErrNoAgent = errors.New("the workspace runs without the workspace agent")

// Resolver finds the address of a running workspace's agent, as
// controller.Upstreams finds its program's; it returns
// controller.ErrNoUpstream when the workspace does not run, ErrNoAgent
// when it runs without an agent.
type Resolver interface {
	ResolveAgent(ctx context.Context, wsID string) (string, error)
}

// Connector gives the server a client of the agent of a running workspace.
type Connector struct {
	resolver Resolver
	keys     *Keys
}

// NewConnector connects through the backend's resolver with the
// deployment's agent keys.
func NewConnector(r Resolver, keys *Keys) *Connector {
	return &Connector{resolver: r, keys: keys}
}

// Client is a client of the agent of run runID of workspace wsID.
func (c *Connector) Client(ctx context.Context, wsID, runID string) (*Client, error) {
	addr, err := c.resolver.ResolveAgent(ctx, wsID)
	if err != nil {
		return nil, err
	}
	return Dial(addr, c.keys.Token(wsID, runID)), nil
}

// HostPublicKey is the SSH host key the workspace's agent presents.
func (c *Connector) HostPublicKey(wsID string) ssh.PublicKey {
	return c.keys.HostPublicKey(wsID)
}
