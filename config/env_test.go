package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEnvName(t *testing.T) {
	for path, want := range map[string]string{
		"listen":                        "CODEHUB_LISTEN",
		"database.url":                  "CODEHUB_DATABASE_URL",
		"s3.secret_key":                 "CODEHUB_S3_SECRET_KEY",
		"backend.nomad.token":           "CODEHUB_BACKEND_NOMAD_TOKEN",
		"auth.bootstrap_admin.password": "CODEHUB_AUTH_BOOTSTRAP_ADMIN_PASSWORD",
		"coordinator.provision_timeout": "CODEHUB_COORDINATOR_PROVISION_TIMEOUT",
	} {
		if got := EnvName(path); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name  string
		hcl   string
		env   map[string]string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "codehub variables fill every kind of scalar",
			env: map[string]string{
				"CODEHUB_LISTEN":                               "0.0.0.0:9999",
				"CODEHUB_PUBLIC_URL":                           "https://hub.example.com",
				"CODEHUB_LOG_LEVEL":                            "debug",
				"CODEHUB_LOG_JSON":                             "true",
				"CODEHUB_DATABASE_URL":                         "postgres://env@db/codehub",
				"CODEHUB_REDIS_URL":                            "redis://env-redis:6379/3",
				"CODEHUB_S3_ENDPOINT":                          "minio.internal:9000",
				"CODEHUB_S3_BUCKET":                            "env-bucket",
				"CODEHUB_S3_ACCESS_KEY":                        "env-access",
				"CODEHUB_S3_SECRET_KEY":                        "env-secret",
				"CODEHUB_S3_USE_SSL":                           "1",
				"CODEHUB_WORKSPACE_PORT":                       "8443",
				"CODEHUB_WORKSPACE_STANDBY_TTL":                "45m",
				"CODEHUB_LIMITS_MAX_RUNNING_GLOBAL":            "12",
				"CODEHUB_GC_DRY_RUN":                           "true",
				"CODEHUB_AUTH_BOOTSTRAP_ADMIN_PASSWORD":        "from-the-env",
				"CODEHUB_PROXY_SUBDOMAIN_BASE":                 "ws.example.com",
				"CODEHUB_BACKEND_NOMAD_DRIVER":                 "exec",
				"CODEHUB_BACKEND_NOMAD_CHECK_INTERVAL":         "3s",
				"CODEHUB_BACKEND_NOMAD_INSECURE_ALLOW_NO_ACLS": "true",
			},
			check: func(t *testing.T, c *Config) {
				if c.Listen != "0.0.0.0:9999" || c.PublicURL != "https://hub.example.com" || c.LogLevel != "debug" || !c.LogJSON {
					t.Errorf("top level = %q %q %q %v", c.Listen, c.PublicURL, c.LogLevel, c.LogJSON)
				}
				if c.Database.URL != "postgres://env@db/codehub" || c.Redis.URL != "redis://env-redis:6379/3" {
					t.Errorf("urls = %s %s", c.Database.URL.Reveal(), c.Redis.URL.Reveal())
				}
				s3 := c.S3
				if s3.Endpoint != "minio.internal:9000" || s3.Bucket != "env-bucket" || s3.AccessKey != "env-access" || s3.SecretKey != "env-secret" || !s3.UseSSL {
					t.Errorf("s3 = %+v", s3)
				}
				if c.Workspace.Port != 8443 || c.Workspace.StandbyTTL != 45*time.Minute {
					t.Errorf("workspace port %d, standby %s", c.Workspace.Port, c.Workspace.StandbyTTL)
				}
				if c.Limits.MaxRunningGlobal != 12 || !c.GC.DryRun || c.Auth.BootstrapAdmin.Password != "from-the-env" {
					t.Errorf("limits %+v, gc %+v, admin password set %v", c.Limits, c.GC, c.Auth.BootstrapAdmin.Password.IsSet())
				}
				if c.Proxy.SubdomainBase != "ws.example.com" || c.Backend.Nomad.Driver != DriverExec || c.Backend.Nomad.CheckInterval != 3*time.Second || !c.Backend.Nomad.InsecureAllowNoACLs {
					t.Errorf("proxy %q, nomad %+v", c.Proxy.SubdomainBase, c.Backend.Nomad)
				}
			},
		},
		{
			name: "the file wins over the environment",
			hcl:  "listen = \"127.0.0.1:7000\"\ns3 {\n  secret_key = \"file-secret\"\n}\nworkspace {\n  standby_ttl = \"5m\"\n}\n",
			env: map[string]string{
				"CODEHUB_LISTEN":                "0.0.0.0:9999",
				"CODEHUB_S3_SECRET_KEY":         "env-secret",
				"CODEHUB_WORKSPACE_STANDBY_TTL": "45m",
				"CODEHUB_S3_BUCKET":             "env-bucket",
			},
			check: func(t *testing.T, c *Config) {
				if c.Listen != "127.0.0.1:7000" || c.S3.SecretKey != "file-secret" || c.Workspace.StandbyTTL != 5*time.Minute {
					t.Errorf("listen %q, secret from file %v, standby %s", c.Listen, c.S3.SecretKey == "file-secret", c.Workspace.StandbyTTL)
				}
				if c.S3.Bucket != "env-bucket" {
					t.Errorf("bucket = %q: the environment must still fill what the file left out", c.S3.Bucket)
				}
			},
		},
		{
			name: "nomad's own variables",
			env: map[string]string{
				"NOMAD_ADDR":      "https://nomad.example.com:4646",
				"NOMAD_TOKEN":     "nomad-acl",
				"NOMAD_NAMESPACE": "ws",
				"NOMAD_REGION":    "eu",
			},
			check: func(t *testing.T, c *Config) {
				n := c.Backend.Nomad
				if n.Address != "https://nomad.example.com:4646" || n.Token != "nomad-acl" || n.Namespace != "ws" || n.Region != "eu" {
					t.Errorf("nomad = %+v", n)
				}
			},
		},
		{
			name: "nomad's own variables before codehub's",
			env: map[string]string{
				"NOMAD_ADDR":                    "http://from-nomad-addr:4646",
				"CODEHUB_BACKEND_NOMAD_ADDRESS": "http://from-codehub:4646",
				"CODEHUB_BACKEND_NOMAD_TOKEN":   "codehub-token",
			},
			check: func(t *testing.T, c *Config) {
				if c.Backend.Nomad.Address != "http://from-nomad-addr:4646" {
					t.Errorf("address = %q, want NOMAD_ADDR's", c.Backend.Nomad.Address)
				}
				if c.Backend.Nomad.Token != "codehub-token" {
					t.Errorf("token not taken from CODEHUB_BACKEND_NOMAD_TOKEN when NOMAD_TOKEN is unset")
				}
			},
		},
		{
			name: "an empty variable counts as unset",
			env:  map[string]string{"NOMAD_ADDR": "", "CODEHUB_BACKEND_NOMAD_ADDRESS": "http://fallback:4646", "CODEHUB_LISTEN": ""},
			check: func(t *testing.T, c *Config) {
				if c.Backend.Nomad.Address != "http://fallback:4646" || c.Listen != "127.0.0.1:8080" {
					t.Errorf("address %q, listen %q", c.Backend.Nomad.Address, c.Listen)
				}
			},
		},
		{
			name: "consul variables do not enable consul",
			env:  map[string]string{"CONSUL_HTTP_ADDR": "consul:8500", "CODEHUB_CONSUL_DATACENTER": "dc1"},
			check: func(t *testing.T, c *Config) {
				if c.Consul != nil {
					t.Errorf("consul = %+v, want nil without a consul block", c.Consul)
				}
			},
		},
		{
			name: "consul variables fill a consul block",
			hcl:  "consul {}\n",
			env:  map[string]string{"CONSUL_HTTP_ADDR": "consul:8500", "CONSUL_HTTP_TOKEN": "consul-acl", "CODEHUB_CONSUL_DATACENTER": "dc1"},
			check: func(t *testing.T, c *Config) {
				if c.Consul.Address != "consul:8500" || c.Consul.Token != "consul-acl" || c.Consul.Datacenter != "dc1" {
					t.Errorf("consul = %+v", c.Consul)
				}
			},
		},
		{
			name: "the local backend takes only its own variables",
			hcl:  "backend \"local\" {}\n",
			env:  map[string]string{"CODEHUB_BACKEND_LOCAL_DATA_DIR": "/tmp/ws", "CODEHUB_BACKEND_LOCAL_CODE_SERVER": "/opt/cs/bin/code-server", "NOMAD_ADDR": "http://x:4646"},
			check: func(t *testing.T, c *Config) {
				if c.Backend.Nomad != nil || c.Backend.Local.DataDir != "/tmp/ws" || c.Backend.Local.CodeServer != "/opt/cs/bin/code-server" {
					t.Errorf("backend = %+v, local %+v", c.Backend, c.Backend.Local)
				}
			},
		},
		{
			name: "lists are not read from the environment",
			env:  map[string]string{"CODEHUB_WORKSPACE_ALLOWED_IMAGES": "a,b", "CODEHUB_PROXY_TRUSTED_PROXIES": "10.0.0.0/8"},
			check: func(t *testing.T, c *Config) {
				if c.Workspace.AllowedImages != nil || c.Proxy.TrustedProxies != nil {
					t.Errorf("allowed %q, trusted %q", c.Workspace.AllowedImages, c.Proxy.TrustedProxies)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse([]byte(tt.hcl), "test.hcl", mapEnv(withRequired(tt.env)))
			if err != nil {
				t.Fatalf("parse:\n%v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestEnvProblems(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // one line of the error each, in order
	}{
		{
			name: "unparsable number and boolean",
			env:  map[string]string{"CODEHUB_WORKSPACE_PORT": "http", "CODEHUB_LOG_JSON": "maybe"},
			want: []string{
				"Invalid environment variable: CODEHUB_LOG_JSON (for log_json) must be true or false.",
				"Invalid environment variable: CODEHUB_WORKSPACE_PORT (for workspace.port) must be a whole number.",
			},
		},
		{
			name: "a bad value names the variable and has no file position",
			env:  map[string]string{"CODEHUB_LOG_LEVEL": "loud", "NOMAD_ADDR": "nomad:4646"},
			want: []string{
				`Invalid log_level: "loud" must be one of trace, debug, info, warn, error, off (set by CODEHUB_LOG_LEVEL)`,
				`Invalid backend.nomad.address: "nomad:4646" must be an http:// or https:// URL (set by NOMAD_ADDR)`,
			},
		},
		{
			name: "a bad duration from the environment",
			env:  map[string]string{"CODEHUB_GC_INTERVAL": "daily"},
			want: []string{`Invalid gc.interval: "daily" is not a duration; write it like "90s", "15m" or "2h" (set by CODEHUB_GC_INTERVAL)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse([]byte("gc {}\n"), "test.hcl", mapEnv(withRequired(tt.env)))
			cerr := configError(t, err)
			got := strings.Split(cerr.Error(), "\n")
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Errorf("error lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
