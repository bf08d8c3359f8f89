package config

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadExample(t *testing.T) {
	c, err := load("codehub.example.hcl", noEnv)
	if err != nil {
		t.Fatalf("example does not load cleanly:\n%v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("example does not validate:\n%v", err)
	}
	if c.Backend.Kind != BackendNomad || c.Backend.Nomad.Driver != DriverDocker {
		t.Errorf("example backend = %+v, want nomad with docker", c.Backend)
	}
	if !slices.Contains(c.Workspace.Args, "0.0.0.0:"+PlaceholderPort) || !slices.Contains(c.Workspace.Args, PlaceholderHome) {
		t.Errorf("example args lost their placeholders through HCL: %q", c.Workspace.Args)
	}
}

// Every attribute must appear in the example, either set or as a commented
// line, so the example stays the complete reference.
func TestExampleDocumentsEveryField(t *testing.T) {
	src, err := os.ReadFile("codehub.example.hcl")
	if err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.Consul = defaultConsul()
	c.Backend.Local = defaultLocalBackend()
	var names []string
	c.visitAttributes(func(path string, _ reflect.Value) {
		names = append(names, path[strings.LastIndexByte(path, '.')+1:])
	})
	if len(names) < 60 {
		t.Fatalf("visited only %d attributes; the walk is broken", len(names))
	}
	for _, name := range names {
		line := regexp.MustCompile(`(?m)^\s*(# )?\s*` + regexp.QuoteMeta(name) + `\s*=`)
		if !line.Match(src) {
			t.Errorf("codehub.example.hcl does not document %q", name)
		}
	}
}

func TestLoadReportsWrongTypeAndUnknownBlockTogether(t *testing.T) {
	const file = "testdata/wrong-type-and-unknown-block.hcl"
	_, err := load(file, noEnv)
	cerr := configError(t, err)
	want := []string{
		"8:1 Unsupported block type",
		"17:11 Unsuitable value type",
	}
	if got := summaries(cerr.Diagnostics); !slices.Equal(got, want) {
		t.Errorf("diagnostics = %q, want %q", got, want)
	}
	for _, pos := range []string{file + ":8:1: ", file + ":17:11: Unsuitable value type: workspace.port: "} {
		if !strings.Contains(err.Error(), pos) {
			t.Errorf("error text lacks %q:\n%v", pos, err)
		}
	}
}

func TestLoadReportsValidationProblemsAtTheirAttributes(t *testing.T) {
	_, err := load("testdata/invalid-values.hcl", noEnv)
	cerr := configError(t, err)
	want := []string{
		"2:1 Invalid log_level",
		"7:3 Invalid s3.bucket",
		"11:3 Invalid backend.nomad.driver",
		"15:3 Invalid workspace.standby_ttl",
		"19:3 Invalid limits.max_running_per_user",
	}
	if got := summaries(cerr.Diagnostics); !slices.Equal(got, want) {
		t.Errorf("diagnostics = %q, want %q", got, want)
	}
}

func TestLoadMinimal(t *testing.T) {
	c, err := load("testdata/minimal.hcl", noEnv)
	if err != nil {
		t.Fatalf("minimal file: %v", err)
	}
	if c.Workspace.Image != defaultWorkspaceImage || c.Coordinator.IdleInterval != defaultIdleInterval {
		t.Errorf("minimal file lost defaults: image %q, idle %s", c.Workspace.Image, c.Coordinator.IdleInterval)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := load("testdata/does-not-exist.hcl", noEnv)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name  string
		hcl   string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "partial block keeps the other defaults",
			hcl:  `workspace { port = 9000 }`,
			check: func(t *testing.T, c *Config) {
				if c.Workspace.Port != 9000 || c.Workspace.Image != defaultWorkspaceImage || c.Workspace.UID != 1000 {
					t.Errorf("workspace = %+v", c.Workspace)
				}
			},
		},
		{
			name: "top-level scalars",
			hcl: `
listen = "0.0.0.0:9090"
public_url = "https://codehub.example.com"
log_level = "DEBUG"
log_json = true`,
			check: func(t *testing.T, c *Config) {
				if c.Listen != "0.0.0.0:9090" || c.PublicURL != "https://codehub.example.com" || c.LogLevel != "DEBUG" || !c.LogJSON {
					t.Errorf("top level = %q %q %q %v", c.Listen, c.PublicURL, c.LogLevel, c.LogJSON)
				}
			},
		},
		{
			name: "durations are parsed once",
			hcl: `
workspace { standby_ttl = "90s" }
coordinator {
  start_timeout = "1h30m"
  backoff_max = "10m"
}
gc { deleted_grace = "0s" }`,
			check: func(t *testing.T, c *Config) {
				if c.Workspace.StandbyTTL != 90*time.Second || c.Workspace.StandbyTTLHCL != "90s" {
					t.Errorf("standby_ttl = %s (%q)", c.Workspace.StandbyTTL, c.Workspace.StandbyTTLHCL)
				}
				if c.Coordinator.StartTimeout != 90*time.Minute || c.Coordinator.BackoffMax != 10*time.Minute {
					t.Errorf("coordinator = %s, %s", c.Coordinator.StartTimeout, c.Coordinator.BackoffMax)
				}
				if c.GC.DeletedGrace != 0 {
					t.Errorf("deleted_grace = %s, want 0", c.GC.DeletedGrace)
				}
			},
		},
		{
			name: "nomad backend",
			hcl: `
backend "nomad" {
  address = "https://nomad.internal:4646"
  namespace = "codehub"
  region = "eu"
  token = "nomad-secret"
  node_pool = "workspaces"
  datacenters = ["dc1", "dc2"]
  driver = "raw_exec"
  volume_plugin = "custom"
  codehub_path = "/opt/codehub/bin/codehub"
  check_interval = "5s"
}`,
			check: func(t *testing.T, c *Config) {
				n := c.Backend.Nomad
				if c.Backend.Kind != BackendNomad || c.Backend.Local != nil {
					t.Fatalf("backend = %+v", c.Backend)
				}
				want := NomadBackend{
					Address: "https://nomad.internal:4646", Namespace: "codehub", Region: "eu",
					Token: "nomad-secret", NodePool: "workspaces", Datacenters: []string{"dc1", "dc2"},
					Driver: DriverRawExec, VolumePlugin: "custom", CodehubPath: "/opt/codehub/bin/codehub",
					CheckIntervalHCL: "5s", CheckInterval: 5 * time.Second,
				}
				if n.Address != want.Address || n.Namespace != want.Namespace || n.Region != want.Region ||
					n.Token != want.Token || n.NodePool != want.NodePool || !slices.Equal(n.Datacenters, want.Datacenters) ||
					n.Driver != want.Driver || n.VolumePlugin != want.VolumePlugin || n.CodehubPath != want.CodehubPath ||
					n.CheckInterval != want.CheckInterval {
					t.Errorf("nomad = %+v\nwant    %+v", *n, want)
				}
			},
		},
		{
			name: "local backend replaces nomad and starts from its defaults",
			hcl:  `backend "local" { data_dir = "/srv/codehub" }`,
			check: func(t *testing.T, c *Config) {
				if c.Backend.Kind != BackendLocal || c.Backend.Nomad != nil {
					t.Fatalf("backend = %+v", c.Backend)
				}
				if c.Backend.Local.DataDir != "/srv/codehub" || c.Backend.Local.CodeServer != "code-server" {
					t.Errorf("local = %+v", c.Backend.Local)
				}
			},
		},
		{
			name: "no consul block means no consul",
			hcl:  "",
			check: func(t *testing.T, c *Config) {
				if c.Consul != nil {
					t.Errorf("consul = %+v, want nil", c.Consul)
				}
			},
		},
		{
			name: "empty consul block enables consul with defaults",
			hcl:  `consul {}`,
			check: func(t *testing.T, c *Config) {
				if c.Consul == nil || c.Consul.Address != "127.0.0.1:8500" {
					t.Errorf("consul = %+v, want the default address", c.Consul)
				}
			},
		},
		{
			name: "consul settings",
			hcl:  `consul { datacenter = "dc9" }`,
			check: func(t *testing.T, c *Config) {
				if c.Consul.Datacenter != "dc9" || c.Consul.Address != "127.0.0.1:8500" {
					t.Errorf("consul = %+v", c.Consul)
				}
			},
		},
		{
			name: "placeholders survive HCL",
			hcl:  `workspace { args = ["--bind-addr=0.0.0.0:%PORT%", "%HOME%", "$HOME", "100%"] }`,
			check: func(t *testing.T, c *Config) {
				want := []string{"--bind-addr=0.0.0.0:%PORT%", "%HOME%", "$HOME", "100%"}
				if !slices.Equal(c.Workspace.Args, want) {
					t.Errorf("args = %q, want %q", c.Workspace.Args, want)
				}
			},
		},
		{
			name: "lists replace the default",
			hcl:  `workspace { allowed_images = ["codercom/code-server:4.100.3", "other:1"] }`,
			check: func(t *testing.T, c *Config) {
				if !slices.Equal(c.Workspace.AllowedImages, []string{"codercom/code-server:4.100.3", "other:1"}) {
					t.Errorf("allowed_images = %q", c.Workspace.AllowedImages)
				}
			},
		},
		{
			name: "trusted proxies are parsed",
			hcl:  `proxy { trusted_proxies = ["10.0.0.0/8", "192.168.1.7", "fd00::1/64"] }`,
			check: func(t *testing.T, c *Config) {
				want := []netip.Prefix{
					netip.MustParsePrefix("10.0.0.0/8"),
					netip.MustParsePrefix("192.168.1.7/32"),
					netip.MustParsePrefix("fd00::/64"),
				}
				if !slices.Equal(c.Proxy.TrustedProxyPrefixes, want) {
					t.Errorf("prefixes = %v, want %v", c.Proxy.TrustedProxyPrefixes, want)
				}
			},
		},
		{
			name: "all remaining blocks",
			hcl: `
database { url = "postgres://u:p@db:5432/x" }
redis { url = "rediss://cache:6380/2" }
s3 {
  endpoint = "s3.example.com"
  bucket = "ws-archives"
  use_ssl = true
  region = "eu-west-1"
}
limits {
  max_running_per_user = 1
  max_running_global = 7
}
gc {
  keep_archives = 5
  dry_run = true
}
auth {
  bootstrap_admin {
    username = "root"
    password = "long-enough"
  }
}
jobspecs { dir = "/etc/codehub/jobspecs" }
proxy { subdomain_base = "ws.example.com" }`,
			check: func(t *testing.T, c *Config) {
				if c.Database.URL != "postgres://u:p@db:5432/x" || c.Redis.URL != "rediss://cache:6380/2" {
					t.Errorf("urls = %s %s", c.Database.URL.Reveal(), c.Redis.URL.Reveal())
				}
				if c.S3.Endpoint != "s3.example.com" || c.S3.Bucket != "ws-archives" || !c.S3.UseSSL || c.S3.Region != "eu-west-1" {
					t.Errorf("s3 = %+v", c.S3)
				}
				if c.Limits.MaxRunningPerUser != 1 || c.Limits.MaxRunningGlobal != 7 {
					t.Errorf("limits = %+v", c.Limits)
				}
				if c.GC.KeepArchives != 5 || !c.GC.DryRun {
					t.Errorf("gc = %+v", c.GC)
				}
				if a := c.Auth.BootstrapAdmin; a.Username != "root" || a.Password.Reveal() != "long-enough" {
					t.Errorf("bootstrap admin = %+v", a)
				}
				if c.Jobspecs.Dir != "/etc/codehub/jobspecs" || c.Proxy.SubdomainBase != "ws.example.com" {
					t.Errorf("jobspecs %q, proxy %q", c.Jobspecs.Dir, c.Proxy.SubdomainBase)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse([]byte(tt.hcl), "test.hcl", requiredEnv)
			if err != nil {
				t.Fatalf("parse:\n%v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	// Positions are relative to the snippet, which starts on line 1.
	tests := []struct {
		name string
		hcl  string
		want []string
	}{
		{
			name: "syntax error stops at parsing",
			hcl:  "listen = \n",
			want: []string{"1:10 Invalid expression"},
		},
		{
			name: "unknown attribute",
			hcl:  "workspace {\n  ports = 1\n}\n",
			want: []string{"2:3 Unsupported argument"},
		},
		{
			name: "wrong type in a nested block",
			hcl:  "auth {\n  bootstrap_admin {\n    username = [\"a\"]\n  }\n}\n",
			want: []string{"3:16 Unsuitable value type"},
		},
		{
			name: "duplicate block",
			hcl:  "redis {}\nredis {}\n",
			want: []string{"2:1 Duplicate redis block"},
		},
		{
			name: "two backends",
			hcl:  "backend \"local\" {}\nbackend \"nomad\" {}\n",
			want: []string{"2:1 Duplicate backend block"},
		},
		{
			name: "unsupported backend",
			hcl:  "backend \"kubernetes\" {}\n",
			want: []string{"1:9 Unsupported backend"},
		},
		{
			name: "backend without label",
			hcl:  "backend {}\n",
			want: []string{"1:9 Missing kind for backend"},
		},
		{
			name: "attribute of the other backend",
			hcl:  "backend \"local\" {\n  driver = \"docker\"\n}\n",
			want: []string{"2:3 Unsupported argument"},
		},
		{
			name: "bad duration",
			hcl:  "coordinator {\n  stop_timeout = \"2 minutes\"\n}\n",
			want: []string{"2:3 Invalid coordinator.stop_timeout"},
		},
		{
			name: "bad trusted proxy",
			hcl:  "proxy {\n  trusted_proxies = [\"10.0.0.1\", \"example.com\"]\n}\n",
			want: []string{"2:3 Invalid proxy.trusted_proxies[1]"},
		},
		{
			name: "every problem at once, in file order",
			hcl:  "backend \"local\" {\n  data_dir = 3\n  code_server = []\n}\nbogus {}\nlog_json = \"maybe\"\n",
			want: []string{"3:17 Unsuitable value type", "5:1 Unsupported block type", "6:13 Unsuitable value type"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse([]byte(tt.hcl), "test.hcl", requiredEnv)
			cerr := configError(t, err)
			if got := summaries(cerr.Diagnostics); !slices.Equal(got, tt.want) {
				t.Errorf("diagnostics = %q, want %q\n%v", got, tt.want, err)
			}
		})
	}
}

// The admin commands that use only the database load the server's file
// without the S3 keys or Nomad settings the server takes from elsewhere.
func TestLoadForDatabaseJudgesOnlyTheDatabase(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Setenv("CODEHUB_S3_ACCESS_KEY", "")
	t.Setenv("CODEHUB_S3_SECRET_KEY", "")
	serverOnly := write("server.hcl", "database { url = \"postgres://codehub@127.0.0.1:5432/codehub\" }\nbackend \"nomad\" { address = \"not a url\" }\n")
	if _, err := Load(serverOnly); err == nil {
		t.Fatal("Load accepted a file without S3 keys")
	}
	cfg, err := LoadForDatabase(serverOnly)
	if err != nil {
		t.Fatalf("LoadForDatabase: %v", err)
	}
	if cfg.Database.URL.Reveal() != "postgres://codehub@127.0.0.1:5432/codehub" {
		t.Errorf("database url = %q", cfg.Database.URL.Reveal())
	}

	badDatabase := write("bad.hcl", "database { url = \"mysql://x\" }\n")
	if _, err := LoadForDatabase(badDatabase); err == nil || !strings.Contains(err.Error(), "database.url") {
		t.Errorf("LoadForDatabase with a bad database url = %v, want a problem naming database.url", err)
	}
	badType := write("type.hcl", "log_json = \"maybe\"\n")
	if _, err := LoadForDatabase(badType); err == nil {
		t.Error("LoadForDatabase accepted a value of the wrong type")
	}
}
