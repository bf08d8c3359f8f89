package config

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxParallel bounds coordinator.parallel: each worker may hold a database
// connection and a Nomad request.
const maxParallel = 64

// Default durations; the HCL string fields are derived from them so the two
// never disagree.
const (
	defaultCheckInterval    = time.Second
	defaultStandbyTTL       = 10 * time.Minute
	defaultArchiveTTL       = 30 * time.Minute
	defaultMaxStandbyTTL    = 8 * time.Hour
	defaultMaxArchiveTTL    = 7 * 24 * time.Hour
	defaultMaxExtend        = 8 * time.Hour
	defaultAutostartLead    = 15 * time.Minute
	defaultIdleInterval     = 15 * time.Second
	defaultActiveInterval   = 1 * time.Second
	defaultTTLInterval      = time.Minute
	defaultProvisionTimeout = 5 * time.Minute
	defaultStartTimeout     = 10 * time.Minute
	defaultStopTimeout      = 2 * time.Minute
	defaultArchiveTimeout   = 1 * time.Hour
	defaultSnapshotInterval = 10 * time.Minute
	defaultRestoreTimeout   = 1 * time.Hour
	// Two homes move at a time: each move is one archive and one restore.
	defaultEvacuationParallel = 2
	defaultParallel           = 8
	defaultDeleteTimeout      = 5 * time.Minute
	defaultBackoffBase        = 5 * time.Second
	defaultBackoffMax         = 5 * time.Minute
	defaultGCInterval         = 4 * time.Hour
	defaultDeletedGrace       = 2 * time.Hour
	defaultSessionTTL         = 24 * time.Hour
	defaultAuditRetention     = 90 * 24 * time.Hour
)

const defaultWorkspaceImage = "codercom/code-server:4.100.3"

// Default returns a configuration with every field set to its default. The
// backend is Nomad; Consul is not used.
func Default() *Config {
	return &Config{
		Listen:    "127.0.0.1:8080",
		PublicURL: "http://127.0.0.1:8080",
		LogLevel:  "info",
		LogJSON:   false,
		Database:  &Database{URL: "postgres://codehub@127.0.0.1:5432/codehub"},
		Redis:     &Redis{URL: "redis://127.0.0.1:6379/0"},
		S3: &S3{
			Endpoint: "127.0.0.1:9000",
			Bucket:   "codehub",
			UseSSL:   false,
			Region:   "us-east-1",
		},
		Backend:     &Backend{Kind: BackendNomad, Nomad: defaultNomadBackend()},
		Workspace:   defaultWorkspace(),
		Limits:      &Limits{MaxRunningPerUser: 2, MaxRunningGlobal: 100},
		Coordinator: defaultCoordinator(),
		GC: &GC{
			IntervalHCL:     durationText(defaultGCInterval),
			Interval:        defaultGCInterval,
			KeepArchives:    3,
			DeletedGraceHCL: durationText(defaultDeletedGrace),
			DeletedGrace:    defaultDeletedGrace,
		},
		Auth: &Auth{
			SessionTTLHCL:  durationText(defaultSessionTTL),
			SessionTTL:     defaultSessionTTL,
			PasswordLogin:  true,
			BootstrapAdmin: &BootstrapAdmin{Username: "admin"},
			OIDC: &OIDC{
				Scopes:        []string{"openid", "profile", "email"},
				UsernameClaim: "preferred_username",
				GroupsClaim:   "groups",
				Label:         "single sign-on",
			},
		},
		Audit:    &Audit{RetentionHCL: "90d", Retention: defaultAuditRetention},
		Jobspecs: &Jobspecs{},
		Proxy:    &Proxy{MaxPortShare: "owner"},
		Metrics:  &Metrics{},
	}
}

func defaultNomadBackend() *NomadBackend {
	return &NomadBackend{
		Address:          "http://127.0.0.1:4646",
		Namespace:        "default",
		NodePool:         "default",
		Datacenters:      []string{"*"},
		Driver:           DriverDocker,
		VolumePlugin:     "mkdir",
		CheckIntervalHCL: durationText(defaultCheckInterval),
		CheckInterval:    defaultCheckInterval,
	}
}

func defaultLocalBackend() *LocalBackend {
	return &LocalBackend{
		DataDir:    "/var/lib/codehub/workspaces",
		CodeServer: "code-server",
	}
}

func defaultConsul() *Consul {
	return &Consul{Address: "127.0.0.1:8500"}
}

func defaultWorkspace() *Workspace {
	return &Workspace{
		Image: defaultWorkspaceImage,
		// The default image's ENTRYPOINT carries arguments of its own
		// ("--bind-addr 0.0.0.0:8080 ."); its script alone takes ours.
		Entrypoint: []string{"/usr/bin/entrypoint.sh"},
		Command:    "/usr/bin/code-server",
		Args: []string{
			"--bind-addr", "0.0.0.0:" + PlaceholderPort,
			"--auth", "password",
			"--disable-telemetry",
			"--disable-update-check",
			PlaceholderHome,
		},
		UpstreamAuth:     UpstreamAuthCodeServer,
		Port:             8080,
		UID:              1000,
		GID:              1000,
		CPU:              500,
		Memory:           2048,
		StandbyTTLHCL:    durationText(defaultStandbyTTL),
		StandbyTTL:       defaultStandbyTTL,
		ArchiveTTLHCL:    durationText(defaultArchiveTTL),
		ArchiveTTL:       defaultArchiveTTL,
		MaxStandbyTTLHCL: durationText(defaultMaxStandbyTTL),
		MaxStandbyTTL:    defaultMaxStandbyTTL,
		MaxArchiveTTLHCL: durationText(defaultMaxArchiveTTL),
		MaxArchiveTTL:    defaultMaxArchiveTTL,
		MaxExtendHCL:     durationText(defaultMaxExtend),
		MaxExtend:        defaultMaxExtend,
		AutostartLeadHCL: durationText(defaultAutostartLead),
		AutostartLead:    defaultAutostartLead,
		// Off: an operator opts into the storage backups cost.
		BackupIntervalHCL: "0s",
		// On: a snapshot stores only what changed, and a lost node then
		// costs a running home at most this much work.
		SnapshotIntervalHCL: durationText(defaultSnapshotInterval),
		SnapshotInterval:    defaultSnapshotInterval,
	}
}

func defaultCoordinator() *Coordinator {
	return &Coordinator{
		IdleIntervalHCL:     durationText(defaultIdleInterval),
		IdleInterval:        defaultIdleInterval,
		ActiveIntervalHCL:   durationText(defaultActiveInterval),
		ActiveInterval:      defaultActiveInterval,
		TTLIntervalHCL:      durationText(defaultTTLInterval),
		TTLInterval:         defaultTTLInterval,
		ProvisionTimeoutHCL: durationText(defaultProvisionTimeout),
		ProvisionTimeout:    defaultProvisionTimeout,
		StartTimeoutHCL:     durationText(defaultStartTimeout),
		StartTimeout:        defaultStartTimeout,
		StopTimeoutHCL:      durationText(defaultStopTimeout),
		StopTimeout:         defaultStopTimeout,
		ArchiveTimeoutHCL:   durationText(defaultArchiveTimeout),
		ArchiveTimeout:      defaultArchiveTimeout,
		RestoreTimeoutHCL:   durationText(defaultRestoreTimeout),
		RestoreTimeout:      defaultRestoreTimeout,
		DeleteTimeoutHCL:    durationText(defaultDeleteTimeout),
		DeleteTimeout:       defaultDeleteTimeout,
		BackoffBaseHCL:      durationText(defaultBackoffBase),
		BackoffBase:         defaultBackoffBase,
		BackoffMaxHCL:       durationText(defaultBackoffMax),
		BackoffMax:          defaultBackoffMax,
		EvacuationParallel:  defaultEvacuationParallel,
		Parallel:            defaultParallel,
	}
}

// durationText writes a duration the way an operator would ("10m", not
// "10m0s"), so defaults read naturally wherever the string form shows.
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ExpandArgs returns the workspace args with the placeholders replaced by
// the port the program must listen on and its home directory.
func (w *Workspace) ExpandArgs(port int, home string) []string {
	r := strings.NewReplacer(PlaceholderPort, strconv.Itoa(port), PlaceholderHome, home)
	out := make([]string, len(w.Args))
	for i, a := range w.Args {
		out[i] = r.Replace(a)
	}
	return out
}

// ProgramArgs are the arguments the workspace program runs with: Args, and
// for code-server (upstream_auth "code-server") --ignore-last-opened unless
// Args have it. code-server otherwise reopens the folder it last showed,
// which a restore may have moved: raw_exec homes are the volume's host path,
// and a restore makes a new volume.
func (w *Workspace) ProgramArgs() []string { return ProgramArgs(w.UpstreamAuth, w.Args) }

// ProgramArgs is Workspace.ProgramArgs for any args, a template's too.
func ProgramArgs(upstreamAuth string, args []string) []string {
	const ignoreLastOpened = "--ignore-last-opened"
	if upstreamAuth != UpstreamAuthCodeServer || slices.Contains(args, ignoreLastOpened) {
		return args
	}
	return append(slices.Clip(args), ignoreLastOpened)
}

// ImageAllowed reports whether a user may run image: the default image
// always, others only when listed in AllowedImages.
func (w *Workspace) ImageAllowed(image string) bool {
	return image == w.Image || slices.Contains(w.AllowedImages, image)
}
