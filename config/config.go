// Package config owns codehub's configuration: the HCL file's schema, the
// defaults for every optional field, the environment overrides and the
// validation that reports every problem at once. It never opens connections
// or touches the systems it describes; it only says what they are.
package config

import (
	"net/netip"
	"time"
)

// Backend kinds, the label of the `backend "…" {}` block.
const (
	BackendNomad = "nomad"
	BackendLocal = "local"
)

// Nomad task drivers a workspace can run under.
const (
	DriverDocker  = "docker"
	DriverExec    = "exec"
	DriverRawExec = "raw_exec"
)

// Placeholders in workspace args, filled in when a workspace starts. They are
// written with percent signs because HCL interpolates `${…}` (and `%{…}`)
// itself, which would consume a dollar-style placeholder at decode time.
const (
	PlaceholderPort = "%PORT%"
	PlaceholderHome = "%HOME%"
)

// Ways a workspace program authenticates the proxy (workspace.upstream_auth).
const (
	// UpstreamAuthCodeServer runs code-server with password auth and its
	// hashed password set to the workspace's upstream token, which the proxy
	// sends as code-server's session cookie: the workspace port answers
	// nobody else.
	UpstreamAuthCodeServer = "code-server"
	// UpstreamAuthNone trusts whoever reaches the port.
	UpstreamAuthNone = "none"
)

// Config is the whole configuration of a codehub process. Every block is
// non-nil after Default or Load, except Consul, which is nil when Consul is
// not used.
//
// Durations come in pairs: a string field tagged for HCL (suffix HCL) holding
// what was written, and a time.Duration field that Load fills once from it.
// Code reads the time.Duration field.
type Config struct {
	// Listen is the host:port the HTTP server binds.
	Listen string `hcl:"listen,optional"`
	// PublicURL is the URL users reach codehub at (links, cookies, Origin checks).
	PublicURL string `hcl:"public_url,optional"`
	// LogLevel is trace, debug, info, warn, error or off.
	LogLevel string `hcl:"log_level,optional"`
	// LogJSON switches the log output to one JSON object per line.
	LogJSON bool `hcl:"log_json,optional"`

	Database    *Database    `hcl:"database,block"`
	Redis       *Redis       `hcl:"redis,block"`
	S3          *S3          `hcl:"s3,block"`
	Consul      *Consul      `hcl:"consul,block"`
	Workspace   *Workspace   `hcl:"workspace,block"`
	Limits      *Limits      `hcl:"limits,block"`
	Coordinator *Coordinator `hcl:"coordinator,block"`
	GC          *GC          `hcl:"gc,block"`
	Auth        *Auth        `hcl:"auth,block"`
	Jobspecs    *Jobspecs    `hcl:"jobspecs,block"`
	Proxy       *Proxy       `hcl:"proxy,block"`
	Metrics     *Metrics     `hcl:"metrics,block"`
	Audit       *Audit       `hcl:"audit,block"`
	// Templates are the kinds of workspace users choose from, beside the
	// default one the workspace block makes (see Config.Template).
	Templates []*Template `hcl:"template,block"`

	// Backend comes from the labelled `backend "nomad"` or `backend "local"`
	// block; it is decoded by hand because its body depends on the label.
	Backend *Backend
}

// Database is the PostgreSQL connection.
type Database struct {
	URL SecretURL `hcl:"url,optional"`
}

// Redis is the Redis connection.
type Redis struct {
	URL SecretURL `hcl:"url,optional"`
}

// S3 is the object store holding workspace archives.
type S3 struct {
	// Endpoint is host:port without a scheme; UseSSL selects https.
	Endpoint  string `hcl:"endpoint,optional"`
	Bucket    string `hcl:"bucket,optional"`
	AccessKey Secret `hcl:"access_key,optional"`
	SecretKey Secret `hcl:"secret_key,optional"`
	UseSSL    bool   `hcl:"use_ssl,optional"`
	Region    string `hcl:"region,optional"`
}

// Backend is the infrastructure that runs workspaces. Exactly one of Nomad
// and Local is non-nil, the one Kind names.
type Backend struct {
	Kind  string
	Nomad *NomadBackend
	Local *LocalBackend
}

// NomadBackend runs workspaces as Nomad jobs on a Nomad fleet.
type NomadBackend struct {
	Address   string `hcl:"address,optional"`
	Namespace string `hcl:"namespace,optional"`
	// Region is empty for the region of the agent at Address.
	Region      string   `hcl:"region,optional"`
	Token       Secret   `hcl:"token,optional"`
	NodePool    string   `hcl:"node_pool,optional"`
	Datacenters []string `hcl:"datacenters,optional"`
	// Driver is DriverDocker, DriverExec or DriverRawExec.
	Driver string `hcl:"driver,optional"`
	// VolumePlugin is the dynamic host volume plugin creating `ws-{id}-home`.
	VolumePlugin string `hcl:"volume_plugin,optional"`
	// JobImage is the image holding the codehub binary for archive and
	// restore jobs under the docker driver.
	JobImage string `hcl:"job_image,optional"`
	// CodehubPath is where the codehub binary lives on nodes for the exec
	// and raw_exec drivers; empty means jobs fetch it from the control
	// plane's /dl/codehub.
	CodehubPath string `hcl:"codehub_path,optional"`
	// NetworkMode is the docker network mode of workspace and batch jobs
	// ("host" for engines without a bridge); empty keeps Docker's default.
	NetworkMode string `hcl:"network_mode,optional"`

	// CheckInterval is how often Nomad checks a workspace's health.
	CheckIntervalHCL string `hcl:"check_interval,optional"`
	CheckInterval    time.Duration

	// InsecureAllowNoACLs lets the server run on a cluster that does not
	// enforce ACLs, where every workspace can read all Nomad Variables
	// and register jobs through its node's agent. Off by default: the
	// server then refuses to start on such a cluster.
	InsecureAllowNoACLs bool `hcl:"insecure_allow_no_acls,optional"`
}

// LocalBackend runs workspaces as local processes on one machine.
type LocalBackend struct {
	// DataDir holds the workspace home directories.
	DataDir string `hcl:"data_dir,optional"`
	// CodeServer is the code-server binary, a path or a name found on PATH.
	CodeServer string `hcl:"code_server,optional"`
	// User is the unprivileged user (a name or a numeric uid) workspace
	// programs run as, and that owns their homes; empty runs them as
	// codehub's own user.
	User string `hcl:"user,optional"`
}

// Consul resolves workspace upstreams from Consul health checks. Without it,
// Nomad's native service discovery is used.
type Consul struct {
	Address string `hcl:"address,optional"`
	Token   Secret `hcl:"token,optional"`
	// Datacenter is empty for the datacenter of the agent at Address.
	Datacenter string `hcl:"datacenter,optional"`
}

// Workspace describes what a workspace runs and when it sleeps.
type Workspace struct {
	// Image is the default image under the docker driver.
	Image string `hcl:"image,optional"`
	// AllowedImages lists the images a user may pick; empty allows Image only.
	AllowedImages []string `hcl:"allowed_images,optional"`
	// Entrypoint replaces the image's ENTRYPOINT under the docker driver;
	// empty keeps the image's own. Args follow it.
	Entrypoint []string `hcl:"entrypoint,optional"`
	// Command is the program exec and raw_exec run.
	Command string `hcl:"command,optional"`
	// Args are the program's arguments, with PlaceholderPort and
	// PlaceholderHome filled in by ExpandArgs.
	Args []string `hcl:"args,optional"`
	// UpstreamAuth is how the workspace program tells the proxy from anyone
	// else reaching its port: UpstreamAuthCodeServer or UpstreamAuthNone.
	UpstreamAuth string `hcl:"upstream_auth,optional"`
	Port         int    `hcl:"port,optional"`
	UID          int    `hcl:"uid,optional"`
	GID          int    `hcl:"gid,optional"`
	CPU          int    `hcl:"cpu,optional"`    // MHz
	Memory       int    `hcl:"memory,optional"` // MiB

	// StandbyTTL is how long a running workspace may go without access
	// before it is stopped.
	StandbyTTLHCL string `hcl:"standby_ttl,optional"`
	StandbyTTL    time.Duration
	// ArchiveTTL is how long a workspace may stay in standby before it is
	// archived.
	ArchiveTTLHCL string `hcl:"archive_ttl,optional"`
	ArchiveTTL    time.Duration
	// MaxStandbyTTL and MaxArchiveTTL bound the timers an owner may set for
	// their own workspace.
	MaxStandbyTTLHCL string `hcl:"max_standby_ttl,optional"`
	MaxStandbyTTL    time.Duration
	MaxArchiveTTLHCL string `hcl:"max_archive_ttl,optional"`
	MaxArchiveTTL    time.Duration
	// MaxExtend is how far ahead an owner may keep a workspace running
	// past its idle stop; "0s" turns that off.
	MaxExtendHCL string `hcl:"max_extend,optional"`
	MaxExtend    time.Duration
	// AutostartLead is how long before an owner's scheduled start an
	// archived workspace is restored.
	AutostartLeadHCL string `hcl:"autostart_lead,optional"`
	AutostartLead    time.Duration
	// BackupInterval bounds how long a changed home in standby goes
	// without an archive of its own: it is archived again, volume kept,
	// once its last archive is this old. "0s" turns backups off.
	BackupIntervalHCL string `hcl:"backup_interval,optional"`
	BackupInterval    time.Duration
	// SnapshotInterval bounds the recovery point of a running home: once
	// what S3 holds of it is this old, its agent reads it and what changed
	// is written to S3 as an incremental archive. "0s" turns snapshots off.
	SnapshotIntervalHCL string `hcl:"snapshot_interval,optional"`
	SnapshotInterval    time.Duration
}

// Limits caps how many workspaces may run.
type Limits struct {
	MaxRunningPerUser int `hcl:"max_running_per_user,optional"`
	MaxRunningGlobal  int `hcl:"max_running_global,optional"`
}

// Coordinator paces the controller and bounds each operation.
type Coordinator struct {
	IdleIntervalHCL   string `hcl:"idle_interval,optional"`
	IdleInterval      time.Duration
	ActiveIntervalHCL string `hcl:"active_interval,optional"`
	ActiveInterval    time.Duration
	// TTLInterval is how often idle workspaces are looked for.
	TTLIntervalHCL string `hcl:"ttl_interval,optional"`
	TTLInterval    time.Duration

	ProvisionTimeoutHCL string `hcl:"provision_timeout,optional"`
	ProvisionTimeout    time.Duration
	StartTimeoutHCL     string `hcl:"start_timeout,optional"`
	StartTimeout        time.Duration
	StopTimeoutHCL      string `hcl:"stop_timeout,optional"`
	StopTimeout         time.Duration
	ArchiveTimeoutHCL   string `hcl:"archive_timeout,optional"`
	ArchiveTimeout      time.Duration
	RestoreTimeoutHCL   string `hcl:"restore_timeout,optional"`
	RestoreTimeout      time.Duration
	DeleteTimeoutHCL    string `hcl:"delete_timeout,optional"`
	DeleteTimeout       time.Duration

	BackoffBaseHCL string `hcl:"backoff_base,optional"`
	BackoffBase    time.Duration
	BackoffMaxHCL  string `hcl:"backoff_max,optional"`
	BackoffMax     time.Duration

	// EvacuationParallel is how many homes move off evacuated or drained
	// nodes at once (each an archive and a restore through S3).
	EvacuationParallel int `hcl:"evacuation_parallel,optional"`

	// Parallel is how many workspaces a controller pass acts on at once,
	// each by itself (one operation at a time per workspace).
	Parallel int `hcl:"parallel,optional"`
}

// GC removes archives nobody can reach any more.
type GC struct {
	IntervalHCL string `hcl:"interval,optional"`
	Interval    time.Duration
	// KeepArchives is how many archives of a live workspace are kept.
	KeepArchives int `hcl:"keep_archives,optional"`
	// DeletedGrace is how long a deleted workspace's archives survive it.
	DeletedGraceHCL string `hcl:"deleted_grace,optional"`
	DeletedGrace    time.Duration
	// DryRun logs what would be removed and removes nothing.
	DryRun bool `hcl:"dry_run,optional"`
}

// Auth configures sessions, how users log in, and the first administrator.
type Auth struct {
	SessionTTLHCL string `hcl:"session_ttl,optional"`
	SessionTTL    time.Duration
	// PasswordLogin offers the login with a local username and password;
	// turned off, users log in only through OIDC.
	PasswordLogin  bool            `hcl:"password_login,optional"`
	BootstrapAdmin *BootstrapAdmin `hcl:"bootstrap_admin,block"`
	OIDC           *OIDC           `hcl:"oidc,block"`
}

// OIDC is single sign-on through an OpenID Provider; it is on when Issuer
// is set.
type OIDC struct {
	// Issuer is the provider's issuer URL, where discovery starts.
	Issuer       string   `hcl:"issuer,optional"`
	ClientID     string   `hcl:"client_id,optional"`
	ClientSecret Secret   `hcl:"client_secret,optional"`
	Scopes       []string `hcl:"scopes,optional"`
	// UsernameClaim names the claim (of the ID token, or else of UserInfo)
	// that becomes the username at first login.
	UsernameClaim string `hcl:"username_claim,optional"`
	// GroupsClaim names the claim (of the ID token, or else of UserInfo)
	// listing the user's groups.
	GroupsClaim string `hcl:"groups_claim,optional"`
	// AllowedGroups, when not empty, admits only members of one of them.
	AllowedGroups []string `hcl:"allowed_groups,optional"`
	// AdminGroups makes their members administrators, at every login.
	AdminGroups []string `hcl:"admin_groups,optional"`
	// Label names the provider on the login page: "Sign in with <label>".
	Label string `hcl:"label,optional"`
}

// Enabled reports whether single sign-on is configured.
func (o *OIDC) Enabled() bool { return o != nil && o.Issuer != "" }

// Audit configures the audit log.
type Audit struct {
	// Retention is how long events are kept: a duration, or whole days
	// written like "90d".
	RetentionHCL string `hcl:"retention,optional"`
	Retention    time.Duration
}

// BootstrapAdmin is created at start when no user exists and Password is set.
type BootstrapAdmin struct {
	Username string `hcl:"username,optional"`
	Password Secret `hcl:"password,optional"`
}

// Jobspecs points at operator-supplied jobspec templates.
type Jobspecs struct {
	// Dir holds template overrides; empty uses the embedded templates.
	Dir string `hcl:"dir,optional"`
}

// Proxy configures how workspaces are served.
// Metrics says where Prometheus metrics are served. They are never public:
// on a listener of their own, or on the main one to a bearer token.
type Metrics struct {
	// Listen is host:port of a listener serving only /metrics; empty
	// serves none.
	Listen string `hcl:"listen,optional"`
	// Token, when set, lets the main listener serve /metrics to requests
	// carrying "Authorization: Bearer <token>".
	Token Secret `hcl:"token,optional"`
}

type Proxy struct {
	// SubdomainBase is the host under which each workspace gets its own
	// subdomain ({id}.{base}); empty serves workspaces under /w/{id}/.
	SubdomainBase string `hcl:"subdomain_base,optional"`
	// CookieDomain is the Domain of the session cookie. Subdomain mode
	// needs one covering the dashboard host and every workspace host;
	// empty keeps the cookie on the dashboard's host only.
	CookieDomain string `hcl:"cookie_domain,optional"`
	// TrustedProxies lists the addresses or CIDR ranges whose forwarding
	// headers are believed; TrustedProxyPrefixes is the parsed form.
	TrustedProxies       []string `hcl:"trusted_proxies,optional"`
	TrustedProxyPrefixes []netip.Prefix
	// MaxPortShare is the widest share level an owner may give a port of
	// their workspace: "owner", "authenticated" or "public". Path mode
	// allows "owner" only, whatever this says.
	MaxPortShare string `hcl:"max_port_share,optional"`
}
