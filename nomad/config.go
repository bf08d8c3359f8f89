package nomad

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
)

// errNotNomad is returned when the configuration selects another backend.
var errNotNomad = errors.New(`configuration has no backend "nomad" block`)

// OptionsFromConfig maps codehub's configuration onto backend options.
// Without codehub_path, exec and raw_exec batch jobs fetch the binary from
// the control plane's /dl/codehub; artifactChecksum ("sha256:<hex>") is the
// checksum of the binary served there.
func OptionsFromConfig(cfg *config.Config, artifactChecksum string) (Options, error) {
	if cfg.Backend == nil || cfg.Backend.Nomad == nil {
		return Options{}, errNotNomad
	}
	n := cfg.Backend.Nomad
	w := cfg.Workspace
	opts := Options{
		Namespace:       n.Namespace,
		Region:          n.Region,
		NodePool:        n.NodePool,
		Datacenters:     n.Datacenters,
		Driver:          n.Driver,
		VolumePlugin:    n.VolumePlugin,
		ServiceProvider: ProviderNomad,
		CheckInterval:   n.CheckInterval,
		JobImage:        n.JobImage,
		CodehubPath:     n.CodehubPath,
		Workspace: WorkspaceOptions{
			Image:      w.Image,
			Entrypoint: w.Entrypoint,
			Command:    w.Command,
			Args:       w.ProgramArgs(),
			Port:       w.Port,
			UID:        w.UID,
			GID:        w.GID,
			CPU:        w.CPU,
			Memory:     w.Memory,

			UpstreamAuth: w.UpstreamAuth == config.UpstreamAuthCodeServer,

			NetworkMode: n.NetworkMode,
		},
		S3: *cfg.S3,
	}
	if cfg.Consul != nil {
		opts.ServiceProvider = ProviderConsul
	}
	if n.Driver != config.DriverDocker && n.CodehubPath == "" {
		opts.ArtifactURL = strings.TrimSuffix(cfg.PublicURL, "/") + "/dl/codehub"
		opts.ArtifactChecksum = artifactChecksum
	}
	return opts, nil
}

// NewClient returns a Nomad API client: the standard NOMAD_* environment
// first, then what the configuration sets. With requests (may be nil) it
// counts and times every request the client makes.
func NewClient(n *config.NomadBackend, requests *Requests) (*api.Client, error) {
	c := clientConfig(n)
	if requests != nil && !strings.HasPrefix(c.Address, "unix:") {
		hc, err := httpClient(c.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("nomad client: %w", err)
		}
		hc.Transport = requests.Wrap(hc.Transport)
		c.HttpClient = hc
	}
	client, err := api.NewClient(c)
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	return client, nil
}

// idleConnsPerNomad is how many idle connections to Nomad the client
// keeps. The controller reads allocations and acts on workspaces several
// at a time; with the api package's default (the number of CPUs + 1)
// every connection beyond those was closed after its request and the
// next one dialled again.
const idleConnsPerNomad = 32

// httpClient is the client the api package would make (HTTP/1.1, TLS 1.2
// at least, the NOMAD_* TLS settings), keeping more idle connections.
func httpClient(tlsConfig *api.TLSConfig) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = false
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	tr.MaxIdleConnsPerHost = idleConnsPerNomad
	hc := &http.Client{Transport: tr}
	if err := api.ConfigureTLS(hc, tlsConfig); err != nil {
		return nil, err
	}
	return hc, nil
}

// clientConfig is NewClient's configuration.
func clientConfig(n *config.NomadBackend) *api.Config {
	c := api.DefaultConfig()
	if n.Address != "" {
		c.Address = n.Address
	}
	if n.Token.IsSet() {
		c.SecretID = n.Token.Reveal()
	}
	if n.Region != "" {
		c.Region = n.Region
	}
	if n.Namespace != "" {
		c.Namespace = n.Namespace
	}
	return c
}

// NewUpstreams returns the resolver for the configured service provider:
// Consul health when a consul block exists, Nomad native services
// otherwise. The returned func stops its background watches.
func NewUpstreams(logger hclog.Logger, cfg *config.Config, client *api.Client) (controller.Upstreams, func(), error) {
	if cfg.Backend == nil || cfg.Backend.Nomad == nil {
		return nil, nil, errNotNomad
	}
	n := cfg.Backend.Nomad
	if cfg.Consul == nil {
		r := NewServiceResolver(logger.Named("upstreams"), client, ResolverOptions{Namespace: n.Namespace, Region: n.Region})
		return r, func() {}, nil
	}
	cc := consulapi.DefaultConfig()
	if cfg.Consul.Address != "" {
		cc.Address = cfg.Consul.Address
	}
	if cfg.Consul.Token.IsSet() {
		cc.Token = cfg.Consul.Token.Reveal()
	}
	consul, err := consulapi.NewClient(cc)
	if err != nil {
		return nil, nil, fmt.Errorf("consul client: %w", err)
	}
	r := NewConsulResolver(logger.Named("upstreams"), consul, client, n.Namespace, n.Region, ConsulResolverOptions{
		Datacenter: cfg.Consul.Datacenter,
		WaitTime:   5 * time.Minute,
	})
	return r, r.Close, nil
}
