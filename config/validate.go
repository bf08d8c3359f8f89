package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/ports"
)

// Validate reports every problem with c's values at once, as an *Error whose
// diagnostics name each field path. Load runs it (adding file positions);
// call it directly after building or changing a Config in code.
func (c *Config) Validate() error {
	diags := newOrigins().diagnostics(c.problems())
	if len(diags) == 0 {
		return nil
	}
	return &Error{Diagnostics: diags}
}

type durationField struct {
	path string
	text string
	dst  *time.Duration
}

// inDays are the durations that also take whole days ("90d"): retentions
// that run into months.
var inDays = map[string]bool{"audit.retention": true}

func (c *Config) durationFields() []durationField {
	w, co, gc := c.Workspace, c.Coordinator, c.GC
	fields := []durationField{
		{"workspace.standby_ttl", w.StandbyTTLHCL, &w.StandbyTTL},
		{"workspace.archive_ttl", w.ArchiveTTLHCL, &w.ArchiveTTL},
		{"workspace.max_standby_ttl", w.MaxStandbyTTLHCL, &w.MaxStandbyTTL},
		{"workspace.max_archive_ttl", w.MaxArchiveTTLHCL, &w.MaxArchiveTTL},
		{"workspace.max_extend", w.MaxExtendHCL, &w.MaxExtend},
		{"workspace.autostart_lead", w.AutostartLeadHCL, &w.AutostartLead},
		{"workspace.backup_interval", w.BackupIntervalHCL, &w.BackupInterval},
		{"workspace.snapshot_interval", w.SnapshotIntervalHCL, &w.SnapshotInterval},
		{"coordinator.idle_interval", co.IdleIntervalHCL, &co.IdleInterval},
		{"coordinator.ttl_interval", co.TTLIntervalHCL, &co.TTLInterval},
		{"coordinator.active_interval", co.ActiveIntervalHCL, &co.ActiveInterval},
		{"coordinator.provision_timeout", co.ProvisionTimeoutHCL, &co.ProvisionTimeout},
		{"coordinator.start_timeout", co.StartTimeoutHCL, &co.StartTimeout},
		{"coordinator.stop_timeout", co.StopTimeoutHCL, &co.StopTimeout},
		{"coordinator.archive_timeout", co.ArchiveTimeoutHCL, &co.ArchiveTimeout},
		{"coordinator.restore_timeout", co.RestoreTimeoutHCL, &co.RestoreTimeout},
		{"coordinator.delete_timeout", co.DeleteTimeoutHCL, &co.DeleteTimeout},
		{"coordinator.backoff_base", co.BackoffBaseHCL, &co.BackoffBase},
		{"coordinator.backoff_max", co.BackoffMaxHCL, &co.BackoffMax},
		{"gc.interval", gc.IntervalHCL, &gc.Interval},
		{"gc.deleted_grace", gc.DeletedGraceHCL, &gc.DeletedGrace},
		{"auth.session_ttl", c.Auth.SessionTTLHCL, &c.Auth.SessionTTL},
		{"audit.retention", c.Audit.RetentionHCL, &c.Audit.Retention},
	}
	if c.Backend != nil && c.Backend.Nomad != nil {
		n := c.Backend.Nomad
		fields = append(fields, durationField{"backend.nomad.check_interval", n.CheckIntervalHCL, &n.CheckInterval})
	}
	return fields
}

// resolve converts the values written as text (durations, proxy ranges)
// into their typed fields, once. A value that does not parse is a problem
// and leaves its typed field as it was.
func (c *Config) resolve() []problem {
	var ps []problem
	for _, f := range c.durationFields() {
		if inDays[f.path] {
			d, err := parseRetention(f.text)
			if err != nil {
				ps = append(ps, problem{f.path, err.Error()})
				continue
			}
			*f.dst = d
			continue
		}
		d, err := time.ParseDuration(f.text)
		if err != nil {
			ps = append(ps, problem{f.path, fmt.Sprintf(`%q is not a duration; write it like "90s", "15m" or "2h"`, f.text)})
			continue
		}
		*f.dst = d
	}
	c.Proxy.TrustedProxyPrefixes = nil
	for i, s := range c.Proxy.TrustedProxies {
		p, err := parsePrefix(s)
		if err != nil {
			ps = append(ps, problem{fmt.Sprintf("proxy.trusted_proxies[%d]", i), fmt.Sprintf("%q is neither an IP address nor a CIDR range", s)})
			continue
		}
		c.Proxy.TrustedProxyPrefixes = append(c.Proxy.TrustedProxyPrefixes, p)
	}
	return append(ps, c.resolveTemplates()...)
}

// parsePrefix accepts a CIDR range or a single address (a one-address range).
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// quoted shows an address in a problem message, unless it may carry a
// credential: in user info (after an "@") or in a query (after a "?").
// Then the message names only the field.
func quoted(address string) string {
	if strings.ContainsAny(address, "@?") {
		return "the value"
	}
	return strconv.Quote(address)
}

// checker collects problems; each check names the path it judges.
type checker struct {
	problems []problem
}

func (ch *checker) add(path, format string, args ...any) {
	ch.problems = append(ch.problems, problem{path, fmt.Sprintf(format, args...)})
}

func (ch *checker) required(path, value string) bool {
	if value == "" {
		ch.add(path, "must be set (in the file or %s)", EnvName(path))
		return false
	}
	return true
}

func (ch *checker) positive(path string, d time.Duration) {
	if d <= 0 {
		ch.add(path, "must be a positive duration")
	}
}

func (ch *checker) atLeast(path string, n, low int) {
	if n < low {
		ch.add(path, "must be at least %d", low)
	}
}

// problems judges every value; it is pure and reports all it finds.
func (c *Config) problems() []problem {
	ch := &checker{}
	c.checkTop(ch)
	c.checkStores(ch)
	c.checkBackend(ch)
	if c.Consul != nil {
		ch.required("consul.address", c.Consul.Address)
	}
	c.checkWorkspace(ch)
	c.checkTemplates(ch)
	c.checkPolicies(ch)
	c.checkProxy(ch)
	c.checkIdentity(ch)
	return ch.problems
}

func (c *Config) checkTop(ch *checker) {
	checkListen(ch, "listen", c.Listen)
	if l := c.Metrics.Listen; l != "" {
		checkListen(ch, "metrics.listen", l)
		if l == c.Listen {
			ch.add("metrics.listen", "must differ from listen")
		}
	}

	if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ch.add("public_url", "%s must be an absolute http:// or https:// URL", quoted(c.PublicURL))
	} else if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		ch.add("public_url", "%s must be a scheme and host only: codehub serves from the root", quoted(c.PublicURL))
	} else if problem := publicPortProblem(u); problem != "" {
		ch.add("public_url", "%s %s", quoted(c.PublicURL), problem)
	}

	if hclog.LevelFromString(c.LogLevel) == hclog.NoLevel {
		ch.add("log_level", "%q must be one of trace, debug, info, warn, error, off", c.LogLevel)
	}
}

// publicPortProblem judges the port of public_url. The URL is compared with
// the Origin header browsers send, which never names the scheme's default
// port, so an explicit ":443" or ":80" would refuse every browser request
// that changes state, the login included.
func publicPortProblem(u *url.URL) string {
	if strings.HasSuffix(u.Host, ":") {
		return "has an empty port"
	}
	port := u.Port()
	if port == "" {
		return ""
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "must have a port from 1 to 65535"
	}
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		return fmt.Sprintf("must leave out the default port :%s: browsers omit it from Origin, which must match", port)
	}
	return ""
}

// checkStores judges the database, Redis and S3 settings. Messages never
// echo a URL or key: they may hold credentials.
func (c *Config) checkStores(ch *checker) {
	// The drivers' own parsers judge the URLs now: at start, the server
	// would find a bad Redis URL only after migrating the database.
	if db := c.Database.URL.Reveal(); ch.required("database.url", db) {
		if !hasScheme(db, "postgres", "postgresql") {
			ch.add("database.url", "must be a postgres:// or postgresql:// URL")
		} else if _, err := pgxpool.ParseConfig(db); err != nil {
			ch.add("database.url", "is not a usable PostgreSQL URL: %s", postgresURLProblem(err))
		}
	}
	if r := c.Redis.URL.Reveal(); ch.required("redis.url", r) {
		if !hasScheme(r, "redis", "rediss", "unix") {
			ch.add("redis.url", "must be a redis://, rediss:// or unix:// URL")
		} else if _, err := redis.ParseURL(r); err != nil {
			// Its messages name the faulty part, never the password.
			ch.add("redis.url", "is not a usable Redis URL: %v", err)
		}
	}

	s3 := c.S3
	if ch.required("s3.endpoint", s3.Endpoint) && !validEndpoint(s3.Endpoint) {
		ch.add("s3.endpoint", "%s must be host or host:port (port 1 to 65535) without a scheme or path; use_ssl selects https", quoted(s3.Endpoint))
	}
	if ch.required("s3.bucket", s3.Bucket) && !bucketName.MatchString(s3.Bucket) {
		ch.add("s3.bucket", "%q must be 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit", s3.Bucket)
	}
	ch.required("s3.access_key", s3.AccessKey.Reveal())
	ch.required("s3.secret_key", s3.SecretKey.Reveal())
	ch.required("s3.region", s3.Region)
}

// postgresURLProblem says what pgx found wrong. pgx's own text quotes the
// URL, masking the password only as best it can, so it is rendered with the
// URL left out.
func postgresURLProblem(err error) string {
	var perr *pgconn.ParseConfigError
	if !errors.As(err, &perr) {
		return "check its host, port and parameters"
	}
	bare := *perr
	bare.ConnString = ""
	return strings.TrimPrefix(bare.Error(), "cannot parse ``: ")
}

// validEndpoint accepts host or host:port, the form the S3 client dials.
func validEndpoint(endpoint string) bool {
	if strings.ContainsAny(endpoint, "/") {
		return false
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		// Without a port: a name, or an IPv6 address in brackets.
		inner, bracketed := strings.CutPrefix(endpoint, "[")
		if bracketed {
			inner, bracketed = strings.CutSuffix(inner, "]")
			return bracketed && net.ParseIP(inner) != nil
		}
		return !strings.Contains(endpoint, ":")
	}
	n, err := strconv.Atoi(port)
	return host != "" && err == nil && n >= 1 && n <= 65535
}

var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

func hasScheme(raw string, schemes ...string) bool {
	u, err := url.Parse(raw)
	return err == nil && slices.Contains(schemes, u.Scheme)
}

func (c *Config) checkBackend(ch *checker) {
	b := c.Backend
	switch {
	case b == nil:
		ch.add("backend", `must be configured: backend "nomad" {…} or backend "local" {…}`)
	case b.Kind == BackendNomad && b.Nomad != nil:
		c.checkNomad(ch, b.Nomad)
	case b.Kind == BackendLocal && b.Local != nil:
		ch.required("backend.local.data_dir", b.Local.DataDir)
		ch.required("backend.local.code_server", b.Local.CodeServer)
		if u := b.Local.User; u != "" && !systemUser.MatchString(u) {
			ch.add("backend.local.user", "%q must be a user name or a numeric uid", u)
		}
	default:
		ch.add("backend", "kind %q must be %q or %q, with its settings", b.Kind, BackendNomad, BackendLocal)
	}
}

func (c *Config) checkNomad(ch *checker, n *NomadBackend) {
	if u, err := url.Parse(n.Address); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ch.add("backend.nomad.address", "%s must be an http:// or https:// URL", quoted(n.Address))
	}
	ch.required("backend.nomad.namespace", n.Namespace)
	ch.required("backend.nomad.node_pool", n.NodePool)
	ch.required("backend.nomad.volume_plugin", n.VolumePlugin)
	if len(n.Datacenters) == 0 || slices.Contains(n.Datacenters, "") {
		ch.add("backend.nomad.datacenters", `must list at least one datacenter, none empty ("*" means all)`)
	}
	// Nomad refuses a job whose check runs more often than this, so a
	// shorter interval would fail every workspace start instead.
	if n.CheckInterval < minNomadCheckInterval {
		ch.add("backend.nomad.check_interval", "must be at least %s (Nomad's minimum)", minNomadCheckInterval)
	}

	switch n.Driver {
	case DriverDocker:
		if n.JobImage == "" {
			ch.add("backend.nomad.job_image", "must be set for the docker driver: archive and restore jobs run codehub from this image")
		}
		if n.CodehubPath != "" {
			ch.add("backend.nomad.codehub_path", "applies only to the exec and raw_exec drivers; the docker driver runs job_image")
		}
		if c.Workspace.Image == "" {
			ch.add("workspace.image", "must be set for the docker driver")
		}
		if slices.Contains(c.Workspace.Entrypoint, "") {
			ch.add("workspace.entrypoint", "must not contain an empty element; [] keeps the image's ENTRYPOINT")
		}
	case DriverExec, DriverRawExec:
		if n.NetworkMode != "" {
			ch.add("backend.nomad.network_mode", "applies only to the docker driver")
		}
		if n.CodehubPath != "" && !filepath.IsAbs(n.CodehubPath) {
			ch.add("backend.nomad.codehub_path", "%q must be an absolute path on the nodes", n.CodehubPath)
		}
		if c.Workspace.Command == "" {
			ch.add("workspace.command", "must be set for the %s driver", n.Driver)
		}
	default:
		ch.add("backend.nomad.driver", "%q must be one of %s, %s, %s", n.Driver, DriverDocker, DriverExec, DriverRawExec)
	}
}

const (
	minNomadCheckInterval = time.Second
	minNomadMemoryMiB     = 10
)

var placeholderLike = regexp.MustCompile(`%[A-Za-z_]+%`)

func (c *Config) checkWorkspace(ch *checker) {
	w := c.Workspace
	if slices.Contains(w.AllowedImages, "") {
		ch.add("workspace.allowed_images", "must not contain an empty image")
	}
	if w.Image != "" && len(w.AllowedImages) > 0 && !slices.Contains(w.AllowedImages, w.Image) {
		ch.add("workspace.allowed_images", "must include workspace.image %q", w.Image)
	}
	for i, arg := range w.Args {
		for _, p := range placeholderLike.FindAllString(arg, -1) {
			if p != PlaceholderPort && p != PlaceholderHome {
				ch.add(fmt.Sprintf("workspace.args[%d]", i), "unknown placeholder %s; use %s or %s", p, PlaceholderPort, PlaceholderHome)
			}
		}
	}
	switch w.UpstreamAuth {
	case UpstreamAuthCodeServer:
		if authNone(w.Args) {
			ch.add("workspace.upstream_auth", "%q needs code-server's password auth, but workspace.args turn it off with --auth none", w.UpstreamAuth)
		}
	case UpstreamAuthNone:
	default:
		ch.add("workspace.upstream_auth", "must be %q or %q", UpstreamAuthCodeServer, UpstreamAuthNone)
	}
	if w.Port < 1 || w.Port > 65535 {
		ch.add("workspace.port", "must be from 1 to 65535")
	}
	ch.atLeast("workspace.uid", w.UID, 0)
	ch.atLeast("workspace.gid", w.GID, 0)
	ch.atLeast("workspace.cpu", w.CPU, 1)
	if c.Backend != nil && c.Backend.Kind == BackendNomad {
		// Nomad refuses a task reserving less, at every workspace start.
		if w.Memory < minNomadMemoryMiB {
			ch.add("workspace.memory", "must be at least %d MiB (Nomad's minimum)", minNomadMemoryMiB)
		}
	} else {
		ch.atLeast("workspace.memory", w.Memory, 1)
	}
	ch.positive("workspace.standby_ttl", w.StandbyTTL)
	ch.positive("workspace.archive_ttl", w.ArchiveTTL)
	if w.MaxStandbyTTL < w.StandbyTTL {
		ch.add("workspace.max_standby_ttl", "must be at least standby_ttl (%s)", w.StandbyTTL)
	}
	if w.MaxArchiveTTL < w.ArchiveTTL {
		ch.add("workspace.max_archive_ttl", "must be at least archive_ttl (%s)", w.ArchiveTTL)
	}
	if w.MaxExtend < 0 {
		ch.add("workspace.max_extend", "must not be negative")
	}
	if w.BackupInterval < 0 {
		ch.add("workspace.backup_interval", "must not be negative (\"0s\" turns backups off)")
	}
	if w.SnapshotInterval < 0 || (w.SnapshotInterval > 0 && w.SnapshotInterval < 5*time.Second) {
		ch.add("workspace.snapshot_interval", "must be \"0s\" (off) or at least 5s")
	}
	if w.AutostartLead < 0 || w.AutostartLead > 24*time.Hour {
		ch.add("workspace.autostart_lead", "must be between 0s and 24h")
	}
}

func checkListen(ch *checker, path, addr string) {
	if _, port, err := net.SplitHostPort(addr); err != nil {
		ch.add(path, "%q is not host:port", addr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		ch.add(path, "port %q must be a number from 0 to 65535", port)
	}
}

// checkPolicies judges limits, coordinator pacing, GC and auth.
func (c *Config) checkPolicies(ch *checker) {
	l := c.Limits
	ch.atLeast("limits.max_running_per_user", l.MaxRunningPerUser, 1)
	ch.atLeast("limits.max_running_global", l.MaxRunningGlobal, 1)
	if l.MaxRunningPerUser > l.MaxRunningGlobal {
		ch.add("limits.max_running_per_user", "must not exceed limits.max_running_global (%d)", l.MaxRunningGlobal)
	}

	co := c.Coordinator
	for _, f := range c.durationFields() {
		if strings.HasPrefix(f.path, "coordinator.") {
			ch.positive(f.path, *f.dst)
		}
	}
	if co.ActiveInterval > co.IdleInterval {
		ch.add("coordinator.active_interval", "must not exceed coordinator.idle_interval (%s)", co.IdleInterval)
	}
	if co.BackoffMax < co.BackoffBase {
		ch.add("coordinator.backoff_max", "must be at least coordinator.backoff_base (%s)", co.BackoffBase)
	}

	ch.positive("gc.interval", c.GC.Interval)
	ch.atLeast("gc.keep_archives", c.GC.KeepArchives, 1)
	ch.atLeast("coordinator.evacuation_parallel", c.Coordinator.EvacuationParallel, 1)
	ch.atLeast("coordinator.parallel", c.Coordinator.Parallel, 1)
	if c.Coordinator.Parallel > maxParallel {
		ch.add("coordinator.parallel", "must be at most %d", maxParallel)
	}
	if c.GC.DeletedGrace < 0 {
		ch.add("gc.deleted_grace", "must not be negative")
	}

	ch.positive("auth.session_ttl", c.Auth.SessionTTL)
	if admin := c.Auth.BootstrapAdmin; admin != nil && admin.Password.IsSet() {
		if ch.required("auth.bootstrap_admin.username", admin.Username) && !ValidUsername(admin.Username) {
			ch.add("auth.bootstrap_admin.username", "%q must be 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", admin.Username)
		}
		// The login form sends UTF-8 in a capped request body: any other
		// password could never be typed there.
		password := admin.Password.Reveal()
		switch n := utf8.RuneCountInString(password); {
		case !utf8.ValidString(password):
			ch.add("auth.bootstrap_admin.password", "must be UTF-8 text")
		case n < minBootstrapPassword:
			ch.add("auth.bootstrap_admin.password", "must be at least %d characters", minBootstrapPassword)
		case n > maxBootstrapPassword:
			ch.add("auth.bootstrap_admin.password", "must be at most %d characters", maxBootstrapPassword)
		}
	}
}

// The same bounds as for passwords set with `codehub user`.
const (
	minBootstrapPassword = 8
	maxBootstrapPassword = 1024
)

// ValidUsername applies the users table's CHECK constraint, so a name it
// refuses is reported before anything is written: the bootstrap admin's
// would otherwise stop the server at start.
func ValidUsername(name string) bool { return usernamePattern.MatchString(name) }

// systemUser is what useradd accepts as a name (Debian's default
// NAME_REGEX, with the trailing "$" of machine accounts), or a uid.
var systemUser = regexp.MustCompile(`^([a-z_][a-z0-9_-]*[$]?|[0-9]+)$`)

var usernamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

var dnsName = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func (c *Config) checkProxy(ch *checker) {
	if _, err := ports.ParseLevel(c.Proxy.MaxPortShare); err != nil {
		ch.add("proxy.max_port_share", "%q must be owner, authenticated or public", c.Proxy.MaxPortShare)
	}
	base := c.Proxy.SubdomainBase
	if base != "" && (len(base) > 253 || !dnsName.MatchString(base)) {
		ch.add("proxy.subdomain_base", "%q must be a lowercase DNS name without scheme, port or wildcard (e.g. ws.example.com)", base)
	}
	domain := strings.TrimPrefix(c.Proxy.CookieDomain, ".")
	if domain == "" {
		return
	}
	if !dnsName.MatchString(domain) {
		ch.add("proxy.cookie_domain", "%q must be a lowercase DNS name (e.g. example.com)", c.Proxy.CookieDomain)
		return
	}
	if base != "" && base != domain && !strings.HasSuffix(base, "."+domain) {
		ch.add("proxy.cookie_domain", "%q must cover the workspace hosts under %q", domain, base)
	}
}

// authNone reports args that switch code-server's own auth off.
func authNone(args []string) bool {
	for i, a := range args {
		if a == "--auth=none" || a == "--auth" && i+1 < len(args) && args[i+1] == "none" {
			return true
		}
	}
	return false
}
