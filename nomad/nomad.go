// Package nomad runs workspaces on a Nomad cluster: dynamic host volumes for
// homes, a service job per running workspace, batch jobs that archive and
// restore homes, and one bulk observation of all of them. It only touches
// objects that carry codehub's ownership mark and never purges a job whose
// allocations may still be running.
package nomad

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/jobspecs"
	"github.com/codehub-io/codehub/workspace"
)

// Meta keys codehub sets on every Nomad object it owns.
const (
	MetaWorkspaceID = "codehub.io/workspace-id"
	MetaManaged     = "codehub.io/managed"
	MetaOpID        = "codehub.io/op-id"
	MetaArchiveKey  = "codehub.io/archive-key"
	MetaAttempt     = "codehub.io/attempt"
	MetaRunID       = "codehub.io/run-id"
)

// Drivers codehub can render jobs for.
const (
	DriverDocker  = "docker"
	DriverExec    = "exec"
	DriverRawExec = "raw_exec"
)

// Service providers for the workspace service.
const (
	ProviderNomad  = "nomad"
	ProviderConsul = "consul"
)

// Options is everything the backend needs besides the API client. Secrets
// (the S3 keys, upstream tokens) are only ever written to a Nomad Variable.
type Options struct {
	Namespace    string
	Region       string
	NodePool     string
	Datacenters  []string
	Driver       string
	VolumePlugin string
	// ServiceProvider is "nomad" (native service discovery) or "consul".
	ServiceProvider string
	CheckInterval   time.Duration
	// CheckOnly leaves readiness to Nomad's check alone: no direct probe
	// of a starting workspace's program (probe.go).
	CheckOnly bool

	// How batch jobs get the codehub binary: JobImage for docker; for exec
	// and raw_exec an artifact (URL + "sha256:…" checksum) or CodehubPath,
	// a path on every node.
	JobImage         string
	CodehubPath      string
	ArtifactURL      string
	ArtifactChecksum string

	Workspace WorkspaceOptions
	// S3 is where archives live. The keys go into a Nomad Variable that
	// only the batch job reads.
	S3 config.S3
	// UpstreamToken returns the secret a workspace's program demands of
	// every request of one run when Workspace.UpstreamAuth is set; it goes
	// into a Nomad Variable only that workspace's job reads.
	UpstreamToken func(workspaceID, runID string) string
	// Agent, when set, runs the program of workspaces under `codehub
	// agent` on a second port, with the token and host key these keys
	// derive, written to the job's own variable; docker workspaces only
	// when their entrypoint is known (runsAgent).
	Agent *agent.Keys
	// AgentArchiveURL serves codehub in a tar archive (/dl/codehub.tar),
	// which docker workspaces fetch into their task directory for the
	// agent; AgentArchiveChecksum is its "sha256:…".
	AgentArchiveURL      string
	AgentArchiveChecksum string
}

// WorkspaceOptions describes the workspace program and its resources.
type WorkspaceOptions struct {
	// Image is the default image (docker), used when a workspace has none.
	Image string
	// Entrypoint replaces the image's ENTRYPOINT (docker); empty keeps it.
	Entrypoint []string
	// Command runs the program under exec and raw_exec. Args follow the
	// command, or the docker entrypoint; the port and home placeholders are
	// filled in at render time.
	Command string
	Args    []string
	// Port the program listens on inside its container under docker's
	// bridge networking. Host networking ignores it: the program listens on
	// the Nomad-assigned port given by the port placeholder.
	Port int
	// NetworkMode is the docker network mode of workspace and batch jobs
	// ("host" where the engine has no bridge); empty leaves docker's default.
	NetworkMode string
	// UpstreamAuth runs the program with its upstream token in
	// HASHED_PASSWORD (workspace.upstream_auth = "code-server").
	UpstreamAuth bool
	// HomeDir is the mount point of the home volume (docker, exec).
	HomeDir string
	UID     int
	GID     int
	CPU     int
	Memory  int
}

// withDefaults fills what is left empty with the configuration's defaults,
// the one place that knows them.
func (o Options) withDefaults() Options {
	def := config.Default()
	n := def.Backend.Nomad
	fill := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	fill(&o.Namespace, n.Namespace)
	fill(&o.NodePool, n.NodePool)
	fill(&o.Driver, n.Driver)
	fill(&o.VolumePlugin, n.VolumePlugin)
	fill(&o.ServiceProvider, ProviderNomad)
	fill(&o.Workspace.HomeDir, workspaceHome)
	if len(o.Datacenters) == 0 {
		o.Datacenters = n.Datacenters
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = n.CheckInterval
	}
	return o
}

// workspaceHome is where docker and exec tasks see the home volume.
const workspaceHome = "/home/coder"

// Names of a workspace's Nomad objects: its job and service, both
// controller.JobName's ws-{id}, and the variable only that job reads.
func jobID(wsID string) string         { return controller.JobName(wsID, controller.JobWorkspace) }
func serviceName(wsID string) string   { return jobID(wsID) }
func variablePath(jobID string) string { return "nomad/jobs/" + jobID }

// stopArchiveTask is the workspace job's poststop task that archives a home
// after a stop codehub did not ask for.
const stopArchiveTask = "stop-archive"

// buildTask is the task of a prebuild's archive job that builds the home
// (jobspecs' first_start_task) before the data mover archives it.
const buildTask = "build"

// stopVariablePath is the variable of a workspace's stop-archive task: the
// path only that task's workload identity may read (job, group, task).
func stopVariablePath(wsID string) string {
	return variablePath(jobID(wsID)) + "/workspace/" + stopArchiveTask
}

// classify turns an API error into a controller.Failure: transport errors
// and 5xx answers mean Nomad could not be reached or answer (retried);
// anything else is a backend error naming the status.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var f *controller.Failure
	if errors.As(err, &f) {
		return err
	}
	if code, ok := statusCode(err); ok {
		if code >= 500 || code == 429 {
			return &controller.Failure{Reason: workspace.ReasonUnreachable, Message: fmt.Sprintf("%s: nomad answered %d: %v", op, code, err)}
		}
		return &controller.Failure{Reason: workspace.ReasonBackendError, Message: fmt.Sprintf("%s: nomad answered %d: %v", op, code, err)}
	}
	return &controller.Failure{Reason: workspace.ReasonUnreachable, Message: fmt.Sprintf("%s: %v", op, err)}
}

// statusCode reports the HTTP status of an API error, if it is one. The api
// package returns UnexpectedResponseError by value.
func statusCode(err error) (int, bool) {
	var v api.UnexpectedResponseError
	if errors.As(err, &v) && v.HasStatusCode() {
		return v.StatusCode(), true
	}
	var p *api.UnexpectedResponseError
	if errors.As(err, &p) && p != nil && p.HasStatusCode() {
		return p.StatusCode(), true
	}
	return 0, false
}

func isNotFound(err error) bool {
	code, ok := statusCode(err)
	return ok && code == 404
}

// Backend implements controller.Backend and controller.Notifier on Nomad.
type Backend struct {
	logger   hclog.Logger
	client   *api.Client
	opts     Options
	renderer *jobspecs.Renderer

	// allocs caches details of client-terminal allocations, so a failed
	// job's events and log are read once, not on every observation.
	allocs *allocCache

	// mirror keeps the observed objects current from the event stream
	// while Watch runs (mirror.go).
	mirror *mirror
	// last is the previous observation from the mirror, unplaced the
	// jobs it saw waiting for a first allocation and since when; only
	// Observe, which the controller calls one at a time, uses them.
	last     *lastObservation
	unplaced map[string]*unplacedJob
	now      func() time.Time

	// answered and prober: direct probes of starting workspaces (probe.go);
	// prober is set while Watch runs.
	answered *answered
	prober   atomic.Pointer[prober]

	// reviver registers again home volumes Nomad keeps unavailable on a
	// ready node (revive.go); only Observe uses it.
	reviver *reviver

	// hostPaths caches each home volume's host path, by volume id;
	// registrations the jobs this backend registered (ownRegistration).
	hostPaths     sync.Map
	registrations sync.Map

	// placing serialises ProvisionVolume: each placement counts the homes
	// per node, which must include the one placed just before.
	placing sync.Mutex
}

var (
	_ controller.Backend  = (*Backend)(nil)
	_ controller.Notifier = (*Backend)(nil)
)

// New returns a backend using client for every call.
func New(logger hclog.Logger, client *api.Client, opts Options, renderer *jobspecs.Renderer) *Backend {
	return &Backend{
		logger:   logger,
		client:   client,
		opts:     opts.withDefaults(),
		renderer: renderer,
		allocs:   newAllocCache(),
		mirror:   newMirror(),
		now:      time.Now,
		answered: newAnswered(),
		reviver:  newReviver(),
	}
}

func (b *Backend) query(ctx context.Context) *api.QueryOptions {
	q := &api.QueryOptions{Namespace: b.opts.Namespace, Region: b.opts.Region}
	return q.WithContext(ctx)
}

func (b *Backend) write(ctx context.Context) *api.WriteOptions {
	w := &api.WriteOptions{Namespace: b.opts.Namespace, Region: b.opts.Region}
	return w.WithContext(ctx)
}
