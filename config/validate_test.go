package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string // problem paths, sorted; empty means valid
	}{
		{"valid", func(c *Config) {}, nil},

		{"listen not host:port", func(c *Config) { c.Listen = "8080" }, []string{"listen"}},
		{"listen port out of range", func(c *Config) { c.Listen = "127.0.0.1:70000" }, []string{"listen"}},
		{"listen port zero picks one", func(c *Config) { c.Listen = "127.0.0.1:0" }, nil},
		{"listen all interfaces", func(c *Config) { c.Listen = ":8080" }, nil},
		{"public_url without scheme", func(c *Config) { c.PublicURL = "codehub.example.com" }, []string{"public_url"}},
		{"public_url ftp", func(c *Config) { c.PublicURL = "ftp://codehub.example.com" }, []string{"public_url"}},
		{"public_url with path", func(c *Config) { c.PublicURL = "https://example.com/codehub" }, []string{"public_url"}},
		{"public_url trailing slash", func(c *Config) { c.PublicURL = "https://example.com/" }, nil},
		{"public_url with its own port", func(c *Config) { c.PublicURL = "https://example.com:8443" }, nil},
		{"public_url ipv6 with port", func(c *Config) { c.PublicURL = "http://[::1]:8080" }, nil},
		// Browsers leave a default port out of Origin, so naming it would
		// make every login look cross-origin.
		{"public_url with https default port", func(c *Config) { c.PublicURL = "https://example.com:443" }, []string{"public_url"}},
		{"public_url with http default port", func(c *Config) { c.PublicURL = "http://example.com:80/" }, []string{"public_url"}},
		{"public_url with empty port", func(c *Config) { c.PublicURL = "https://example.com:" }, []string{"public_url"}},
		{"public_url port out of range", func(c *Config) { c.PublicURL = "https://example.com:70000" }, []string{"public_url"}},
		{"public_url port zero", func(c *Config) { c.PublicURL = "https://example.com:0" }, []string{"public_url"}},
		{"log_level unknown", func(c *Config) { c.LogLevel = "verbose" }, []string{"log_level"}},
		{"log_level any case", func(c *Config) { c.LogLevel = "WARN" }, nil},

		{"database url missing", func(c *Config) { c.Database.URL = "" }, []string{"database.url"}},
		{"database url not postgres", func(c *Config) { c.Database.URL = "mysql://u:p@db/x" }, []string{"database.url"}},
		{"database url postgresql scheme", func(c *Config) { c.Database.URL = "postgresql://u:p@db/x?sslmode=require" }, nil},
		{"redis url missing", func(c *Config) { c.Redis.URL = "" }, []string{"redis.url"}},
		{"redis url wrong scheme", func(c *Config) { c.Redis.URL = "http://cache:6379" }, []string{"redis.url"}},
		{"redis over tls", func(c *Config) { c.Redis.URL = "rediss://:pw@cache:6380/1" }, nil},
		// The server would apply migrations before its Redis client refused these.
		{"redis database not a number", func(c *Config) { c.Redis.URL = "redis://cache:6379/zero" }, []string{"redis.url"}},
		{"redis unknown option", func(c *Config) { c.Redis.URL = "redis://cache:6379/0?pool=9" }, []string{"redis.url"}},
		{"redis unix socket", func(c *Config) { c.Redis.URL = "unix:///run/redis.sock?db=2" }, nil},
		{"database port out of range", func(c *Config) { c.Database.URL = "postgres://u:p@db:99999/x" }, []string{"database.url"}},
		{"database sslmode unknown", func(c *Config) { c.Database.URL = "postgres://u:p@db/x?sslmode=sometimes" }, []string{"database.url"}},
		{"database pool setting", func(c *Config) { c.Database.URL = "postgres://u:p@db/x?pool_max_conns=20" }, nil},

		{"s3 endpoint missing", func(c *Config) { c.S3.Endpoint = "" }, []string{"s3.endpoint"}},
		{"s3 endpoint with scheme", func(c *Config) { c.S3.Endpoint = "https://s3.example.com" }, []string{"s3.endpoint"}},
		{"s3 endpoint without port", func(c *Config) { c.S3.Endpoint = "s3.example.com" }, nil},
		{"s3 endpoint ipv6 with port", func(c *Config) { c.S3.Endpoint = "[::1]:9000" }, nil},
		{"s3 endpoint ipv6 without port", func(c *Config) { c.S3.Endpoint = "[::1]" }, nil},
		{"s3 endpoint ipv6 without brackets", func(c *Config) { c.S3.Endpoint = "::1" }, []string{"s3.endpoint"}},
		// The server would start and only fail to reach S3 at every archive.
		{"s3 endpoint port out of range", func(c *Config) { c.S3.Endpoint = "s3.example.com:99999" }, []string{"s3.endpoint"}},
		{"s3 endpoint empty port", func(c *Config) { c.S3.Endpoint = "s3.example.com:" }, []string{"s3.endpoint"}},
		{"s3 endpoint empty host", func(c *Config) { c.S3.Endpoint = ":9000" }, []string{"s3.endpoint"}},
		{"s3 bucket missing", func(c *Config) { c.S3.Bucket = "" }, []string{"s3.bucket"}},
		{"s3 bucket upper case", func(c *Config) { c.S3.Bucket = "CodeHub" }, []string{"s3.bucket"}},
		{"s3 bucket too short", func(c *Config) { c.S3.Bucket = "ab" }, []string{"s3.bucket"}},
		{"s3 keys missing", func(c *Config) { c.S3.AccessKey, c.S3.SecretKey = "", "" }, []string{"s3.access_key", "s3.secret_key"}},
		{"s3 region missing", func(c *Config) { c.S3.Region = "" }, []string{"s3.region"}},

		{"no backend", func(c *Config) { c.Backend = nil }, []string{"backend"}},
		{"backend kind without settings", func(c *Config) { c.Backend = &Backend{Kind: BackendLocal} }, []string{"backend"}},
		{"backend unknown kind", func(c *Config) { c.Backend.Kind = "k8s" }, []string{"backend"}},
		{"nomad address without scheme", func(c *Config) { c.Backend.Nomad.Address = "127.0.0.1:4646" }, []string{"backend.nomad.address"}},
		{"nomad namespace empty", func(c *Config) { c.Backend.Nomad.Namespace = "" }, []string{"backend.nomad.namespace"}},
		{"nomad node_pool empty", func(c *Config) { c.Backend.Nomad.NodePool = "" }, []string{"backend.nomad.node_pool"}},
		{"nomad volume_plugin empty", func(c *Config) { c.Backend.Nomad.VolumePlugin = "" }, []string{"backend.nomad.volume_plugin"}},
		{"nomad datacenters empty", func(c *Config) { c.Backend.Nomad.Datacenters = nil }, []string{"backend.nomad.datacenters"}},
		{"nomad datacenter blank", func(c *Config) { c.Backend.Nomad.Datacenters = []string{"dc1", ""} }, []string{"backend.nomad.datacenters"}},
		{"nomad check_interval zero", func(c *Config) { c.Backend.Nomad.CheckInterval = 0 }, []string{"backend.nomad.check_interval"}},
		{"nomad check_interval below Nomad's minimum", func(c *Config) {
			c.Backend.Nomad.CheckInterval = 500 * time.Millisecond
		}, []string{"backend.nomad.check_interval"}},
		{"nomad memory below Nomad's minimum", func(c *Config) { c.Workspace.Memory = 9 }, []string{"workspace.memory"}},
		{"nomad memory at Nomad's minimum", func(c *Config) { c.Workspace.Memory = 10 }, nil},
		{"local backend ignores Nomad's minimum memory", func(c *Config) {
			c.Backend = &Backend{Kind: BackendLocal, Local: defaultLocalBackend()}
			c.Workspace.Memory = 1
		}, nil},
		{"cookie_domain not covering workspace hosts", func(c *Config) {
			c.Proxy.SubdomainBase = "ws.example.com"
			c.Proxy.CookieDomain = "other.org"
		}, []string{"proxy.cookie_domain"}},
		{"cookie_domain not a DNS name", func(c *Config) { c.Proxy.CookieDomain = "Bad_Domain" }, []string{"proxy.cookie_domain"}},
		{"upstream_auth unknown", func(c *Config) { c.Workspace.UpstreamAuth = "basic" }, []string{"workspace.upstream_auth"}},
		{"upstream_auth with code-server auth off", func(c *Config) {
			c.Workspace.Args = []string{"--auth", "none", "--bind-addr", "0.0.0.0:%PORT%"}
		}, []string{"workspace.upstream_auth"}},
		{"upstream_auth with code-server auth off, one arg", func(c *Config) { c.Workspace.Args = []string{"--auth=none"} }, []string{"workspace.upstream_auth"}},
		{"upstream_auth none with auth off", func(c *Config) {
			c.Workspace.UpstreamAuth = UpstreamAuthNone
			c.Workspace.Args = []string{"--auth", "none"}
		}, nil},
		{"upstream_auth with a program that names none elsewhere", func(c *Config) { c.Workspace.Args = []string{"--cache", "none"} }, nil},
		{"nomad driver unknown", func(c *Config) { c.Backend.Nomad.Driver = "podman" }, []string{"backend.nomad.driver"}},
		{"docker without job_image", func(c *Config) { c.Backend.Nomad.JobImage = "" }, []string{"backend.nomad.job_image"}},
		{"docker with codehub_path", func(c *Config) { c.Backend.Nomad.CodehubPath = "/usr/local/bin/codehub" }, []string{"backend.nomad.codehub_path"}},
		{"docker without image", func(c *Config) { c.Workspace.Image = "" }, []string{"workspace.image"}},
		{"exec needs no images", func(c *Config) {
			c.Backend.Nomad.Driver, c.Backend.Nomad.JobImage, c.Workspace.Image = DriverExec, "", ""
		}, nil},
		{"raw_exec with absolute codehub_path", func(c *Config) {
			c.Backend.Nomad.Driver, c.Backend.Nomad.CodehubPath = DriverRawExec, "/opt/codehub"
		}, nil},
		{"raw_exec with relative codehub_path", func(c *Config) {
			c.Backend.Nomad.Driver, c.Backend.Nomad.CodehubPath = DriverRawExec, "bin/codehub"
		}, []string{"backend.nomad.codehub_path"}},
		{"exec without command", func(c *Config) {
			c.Backend.Nomad.Driver, c.Workspace.Command = DriverExec, ""
		}, []string{"workspace.command"}},
		{"local backend", func(c *Config) {
			c.Backend = &Backend{Kind: BackendLocal, Local: defaultLocalBackend()}
		}, nil},
		{"local backend without data_dir and code_server", func(c *Config) {
			c.Backend = &Backend{Kind: BackendLocal, Local: &LocalBackend{}}
		}, []string{"backend.local.code_server", "backend.local.data_dir"}},
		{"local backend with a workspace user", func(c *Config) {
			c.Backend = &Backend{Kind: BackendLocal, Local: defaultLocalBackend()}
			c.Backend.Local.User = "codehub-ws"
		}, nil},
		{"local backend with a numeric workspace user", func(c *Config) {
			c.Backend = &Backend{Kind: BackendLocal, Local: defaultLocalBackend()}
			c.Backend.Local.User = "65534"
		}, nil},
		{"local backend with a user that is no name", func(c *Config) {
			c.Backend = &Backend{Kind: BackendLocal, Local: defaultLocalBackend()}
			c.Backend.Local.User = "ws user;"
		}, []string{"backend.local.user"}},

		{"consul with address", func(c *Config) { c.Consul = defaultConsul() }, nil},
		{"consul without address", func(c *Config) { c.Consul = &Consul{} }, []string{"consul.address"}},

		{"allowed_images with blank", func(c *Config) {
			c.Workspace.AllowedImages = []string{defaultWorkspaceImage, ""}
		}, []string{"workspace.allowed_images"}},
		{"allowed_images without image", func(c *Config) {
			c.Workspace.AllowedImages = []string{"other:1"}
		}, []string{"workspace.allowed_images"}},
		{"allowed_images with image", func(c *Config) {
			c.Workspace.AllowedImages = []string{"other:1", defaultWorkspaceImage}
		}, nil},
		{"args with unknown placeholder", func(c *Config) {
			c.Workspace.Args = []string{"--bind-addr", "0.0.0.0:%PROT%", "%HOME%"}
		}, []string{"workspace.args[1]"}},
		{"args with literal percent", func(c *Config) { c.Workspace.Args = []string{"--x=100%", "50% done"} }, nil},
		{"port zero", func(c *Config) { c.Workspace.Port = 0 }, []string{"workspace.port"}},
		{"port too high", func(c *Config) { c.Workspace.Port = 65536 }, []string{"workspace.port"}},
		{"uid negative", func(c *Config) { c.Workspace.UID = -1 }, []string{"workspace.uid"}},
		{"gid negative", func(c *Config) { c.Workspace.GID = -1 }, []string{"workspace.gid"}},
		{"root uid allowed", func(c *Config) { c.Workspace.UID, c.Workspace.GID = 0, 0 }, nil},
		{"cpu zero", func(c *Config) { c.Workspace.CPU = 0 }, []string{"workspace.cpu"}},
		{"memory zero", func(c *Config) { c.Workspace.Memory = 0 }, []string{"workspace.memory"}},
		{"standby_ttl zero", func(c *Config) { c.Workspace.StandbyTTL = 0 }, []string{"workspace.standby_ttl"}},
		{"archive_ttl negative", func(c *Config) { c.Workspace.ArchiveTTL = -time.Minute }, []string{"workspace.archive_ttl"}},
		{"backup_interval negative", func(c *Config) { c.Workspace.BackupInterval = -time.Hour }, []string{"workspace.backup_interval"}},
		{"backup_interval set", func(c *Config) { c.Workspace.BackupInterval = 24 * time.Hour }, nil},
		{"snapshot_interval negative", func(c *Config) { c.Workspace.SnapshotInterval = -time.Minute }, []string{"workspace.snapshot_interval"}},
		{"snapshot_interval too short", func(c *Config) { c.Workspace.SnapshotInterval = time.Second }, []string{"workspace.snapshot_interval"}},
		{"snapshot_interval off", func(c *Config) { c.Workspace.SnapshotInterval = 0 }, nil},

		{"per-user limit zero", func(c *Config) { c.Limits.MaxRunningPerUser = 0 }, []string{"limits.max_running_per_user"}},
		{"global limit zero", func(c *Config) {
			c.Limits.MaxRunningGlobal, c.Limits.MaxRunningPerUser = 0, 0
		}, []string{"limits.max_running_global", "limits.max_running_per_user"}},
		{"per-user above global", func(c *Config) {
			c.Limits.MaxRunningPerUser, c.Limits.MaxRunningGlobal = 5, 4
		}, []string{"limits.max_running_per_user"}},

		{"every coordinator duration must be positive", func(c *Config) {
			*c.Coordinator = Coordinator{}
		}, []string{
			"coordinator.active_interval", "coordinator.archive_timeout", "coordinator.backoff_base",
			"coordinator.backoff_max", "coordinator.delete_timeout", "coordinator.evacuation_parallel", "coordinator.idle_interval",
			"coordinator.parallel", "coordinator.provision_timeout", "coordinator.restore_timeout", "coordinator.start_timeout",
			"coordinator.stop_timeout", "coordinator.ttl_interval",
		}},
		{"active interval above idle", func(c *Config) {
			c.Coordinator.ActiveInterval = time.Minute
		}, []string{"coordinator.active_interval"}},
		{"backoff max below base", func(c *Config) {
			c.Coordinator.BackoffMax = time.Second
		}, []string{"coordinator.backoff_max"}},

		{"gc interval zero", func(c *Config) { c.GC.Interval = 0 }, []string{"gc.interval"}},
		{"gc keep no archives", func(c *Config) { c.GC.KeepArchives = 0 }, []string{"gc.keep_archives"}},
		{"no evacuation at a time", func(c *Config) { c.Coordinator.EvacuationParallel = 0 }, []string{"coordinator.evacuation_parallel"}},
		{"no workspace acted on at a time", func(c *Config) { c.Coordinator.Parallel = 0 }, []string{"coordinator.parallel"}},
		{"more workers than the database serves", func(c *Config) { c.Coordinator.Parallel = 65 }, []string{"coordinator.parallel"}},
		{"gc grace negative", func(c *Config) { c.GC.DeletedGrace = -time.Second }, []string{"gc.deleted_grace"}},
		{"gc grace zero", func(c *Config) { c.GC.DeletedGrace = 0 }, nil},

		{"session_ttl zero", func(c *Config) { c.Auth.SessionTTL = 0 }, []string{"auth.session_ttl"}},
		{"bootstrap password short", func(c *Config) { c.Auth.BootstrapAdmin.Password = "short" }, []string{"auth.bootstrap_admin.password"}},
		{"bootstrap password without username", func(c *Config) {
			c.Auth.BootstrapAdmin = &BootstrapAdmin{Password: "long-enough"}
		}, []string{"auth.bootstrap_admin.username"}},
		{"bootstrap admin complete", func(c *Config) { c.Auth.BootstrapAdmin.Password = "long-enough" }, nil},
		{"bootstrap username upper case", func(c *Config) {
			c.Auth.BootstrapAdmin = &BootstrapAdmin{Username: "Admin", Password: "long-enough"}
		}, []string{"auth.bootstrap_admin.username"}},
		{"bootstrap username with a space", func(c *Config) {
			c.Auth.BootstrapAdmin = &BootstrapAdmin{Username: "the admin", Password: "long-enough"}
		}, []string{"auth.bootstrap_admin.username"}},
		{"bootstrap username too long", func(c *Config) {
			c.Auth.BootstrapAdmin = &BootstrapAdmin{Username: strings.Repeat("a", 64), Password: "long-enough"}
		}, []string{"auth.bootstrap_admin.username"}},
		{"bootstrap password counted in characters", func(c *Config) { c.Auth.BootstrapAdmin.Password = "äöüäöü" }, []string{"auth.bootstrap_admin.password"}},
		{"bootstrap password of eight accented characters", func(c *Config) { c.Auth.BootstrapAdmin.Password = "äöüäöüäö" }, nil},
		// The login request body is capped; a longer password could never be used.
		{"bootstrap password too long", func(c *Config) {
			c.Auth.BootstrapAdmin.Password = Secret(strings.Repeat("p", 1025))
		}, []string{"auth.bootstrap_admin.password"}},
		{"bootstrap password not UTF-8", func(c *Config) { c.Auth.BootstrapAdmin.Password = "\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8" }, []string{"auth.bootstrap_admin.password"}},
		{"no bootstrap username without password", func(c *Config) { c.Auth.BootstrapAdmin.Username = "" }, nil},

		{"subdomain base", func(c *Config) { c.Proxy.SubdomainBase = "ws.example.com" }, nil},
		{"subdomain base localhost", func(c *Config) { c.Proxy.SubdomainBase = "localhost" }, nil},
		{"subdomain base with scheme", func(c *Config) { c.Proxy.SubdomainBase = "https://ws.example.com" }, []string{"proxy.subdomain_base"}},
		{"subdomain base with port", func(c *Config) { c.Proxy.SubdomainBase = "ws.example.com:8080" }, []string{"proxy.subdomain_base"}},
		{"subdomain base wildcard", func(c *Config) { c.Proxy.SubdomainBase = "*.ws.example.com" }, []string{"proxy.subdomain_base"}},
		{"subdomain base upper case", func(c *Config) { c.Proxy.SubdomainBase = "WS.example.com" }, []string{"proxy.subdomain_base"}},
		{"max port share unknown", func(c *Config) { c.Proxy.MaxPortShare = "everyone" }, []string{"proxy.max_port_share"}},
		{"max port share empty", func(c *Config) { c.Proxy.MaxPortShare = "" }, []string{"proxy.max_port_share"}},
		{"max port share public", func(c *Config) { c.Proxy.MaxPortShare = "public" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(c)
			if got := problemPaths(c); !slices.Equal(got, tt.want) {
				t.Errorf("problems at %q, want %q\n%v", got, tt.want, c.Validate())
			}
			if err := c.Validate(); (err == nil) != (len(tt.want) == 0) {
				t.Errorf("Validate() = %v, want an error exactly when problems are expected", err)
			}
		})
	}
}

// A connection URL the drivers refuse is reported without the password it
// holds.
func TestValidateURLProblemsHideThePassword(t *testing.T) {
	c := validConfig()
	c.Database.URL = "postgres://codehub:hunter2-db@db:99999/codehub?sslmode=require"
	c.Redis.URL = "redis://:hunter2-redis@cache:6379/zero"
	err := c.Validate()
	if got := problemPaths(c); !slices.Equal(got, []string{"database.url", "redis.url"}) {
		t.Fatalf("problems at %q, want database.url and redis.url\n%v", got, err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows a password:\n%v", err)
	}
	if !strings.Contains(err.Error(), "zero") {
		t.Errorf("error does not say what is wrong with the Redis URL:\n%v", err)
	}
}

// Problems quote the faulty value, except where it may carry a credential.
func TestValidateQuotesNoCredential(t *testing.T) {
	for _, tc := range []struct {
		path   string
		change func(c *Config)
	}{
		{"public_url", func(c *Config) { c.PublicURL = "https://admin:hunter2@codehub.example.com" }},
		{"public_url", func(c *Config) { c.PublicURL = "https://codehub.example.com/?token=hunter2" }},
		{"backend.nomad.address", func(c *Config) { c.Backend.Nomad.Address = "nomad://ops:hunter2@nomad.example.com" }},
		{"s3.endpoint", func(c *Config) { c.S3.Endpoint = "key:hunter2@s3.example.com:9000" }},
	} {
		c := validConfig()
		tc.change(c)
		err := c.Validate()
		if got := problemPaths(c); !slices.Equal(got, []string{tc.path}) {
			t.Errorf("problems at %q, want %s\n%v", got, tc.path, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows a credential:\n%v", err)
		}
	}
	c := validConfig()
	c.PublicURL = "ftp://codehub.example.com"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `"ftp://codehub.example.com"`) {
		t.Errorf("error does not quote a harmless value:\n%v", err)
	}
}

func TestValidateErrorNamesThePath(t *testing.T) {
	c := validConfig()
	c.Workspace.Port = 0
	c.Limits.MaxRunningGlobal = 0
	err := c.Validate()
	cerr := configError(t, err)
	if len(cerr.Diagnostics) != 3 {
		t.Fatalf("got %d diagnostics, want 3:\n%v", len(cerr.Diagnostics), err)
	}
	for _, want := range []string{
		"Invalid workspace.port: must be from 1 to 65535",
		"Invalid limits.max_running_global: must be at least 1",
		"Invalid limits.max_running_per_user: must not exceed limits.max_running_global (0)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
