package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func withOIDC(c *Config) {
	c.Auth.OIDC.Issuer = "https://idp.example.com/realms/company"
	c.Auth.OIDC.ClientID = "codehub"
	c.Auth.OIDC.ClientSecret = "client-secret"
}

func TestValidateIdentity(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"oidc", withOIDC, nil},
		{"oidc issuer on loopback over http", func(c *Config) { withOIDC(c); c.Auth.OIDC.Issuer = "http://127.0.0.1:5556" }, nil},
		{"oidc issuer over http elsewhere", func(c *Config) { withOIDC(c); c.Auth.OIDC.Issuer = "http://idp.example.com" }, []string{"auth.oidc.issuer"}},
		{"oidc issuer not a URL", func(c *Config) { withOIDC(c); c.Auth.OIDC.Issuer = "idp.example.com" }, []string{"auth.oidc.issuer"}},
		{"oidc issuer with query", func(c *Config) { withOIDC(c); c.Auth.OIDC.Issuer = "https://idp.example.com?x=1" }, []string{"auth.oidc.issuer"}},
		{"oidc without client", func(c *Config) {
			withOIDC(c)
			c.Auth.OIDC.ClientID, c.Auth.OIDC.ClientSecret = "", ""
		}, []string{"auth.oidc.client_id", "auth.oidc.client_secret"}},
		{"oidc scopes without openid", func(c *Config) { withOIDC(c); c.Auth.OIDC.Scopes = []string{"profile"} }, []string{"auth.oidc.scopes"}},
		{"oidc without username claim", func(c *Config) { withOIDC(c); c.Auth.OIDC.UsernameClaim = "" }, []string{"auth.oidc.username_claim"}},
		{"oidc groups without groups claim", func(c *Config) {
			withOIDC(c)
			c.Auth.OIDC.GroupsClaim = ""
			c.Auth.OIDC.AdminGroups = []string{"ops"}
		}, []string{"auth.oidc.groups_claim"}},
		{"oidc empty group name", func(c *Config) { withOIDC(c); c.Auth.OIDC.AllowedGroups = []string{"dev", ""} }, []string{"auth.oidc.allowed_groups"}},
		{"oidc without label", func(c *Config) { withOIDC(c); c.Auth.OIDC.Label = "" }, []string{"auth.oidc.label"}},
		{"oidc settings without issuer", func(c *Config) { c.Auth.OIDC.ClientID = "codehub" }, []string{"auth.oidc.issuer"}},
		{"password login off with oidc", func(c *Config) { withOIDC(c); c.Auth.PasswordLogin = false }, nil},
		{"password login off without oidc", func(c *Config) { c.Auth.PasswordLogin = false }, []string{"auth.password_login"}},
		{"audit retention too short", func(c *Config) { c.Audit.Retention = time.Minute }, []string{"audit.retention"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(c)
			if got := problemPaths(c); !slices.Equal(got, tt.want) {
				t.Errorf("problems at %q, want %q\n%v", got, tt.want, c.Validate())
			}
		})
	}
}

func TestParseRetention(t *testing.T) {
	for _, tt := range []struct {
		text string
		want time.Duration
		ok   bool
	}{
		{"90d", 90 * 24 * time.Hour, true},
		{"720h", 720 * time.Hour, true},
		{"1d", 24 * time.Hour, true},
		{"d", 0, false},
		{"-1d", 0, false},
		{"1.5d", 0, false},
		{"ninety days", 0, false},
	} {
		got, err := parseRetention(tt.text)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseRetention(%q) = %s, %v; want %s (ok %v)", tt.text, got, err, tt.want, tt.ok)
		}
	}
}

const oidcFile = `s3 {
  access_key = "a"
  secret_key = "b"
}
backend "nomad" {
  job_image = "ghcr.io/codehub-io/codehub:1.0.0"
}
auth {
  password_login = false
  oidc {
    issuer    = "http://idp.example.com"
    client_id = "codehub"
    scopes    = ["profile"]
  }
}
audit {
  retention = "ninety days"
}
`

// The oidc block's problems are reported at their lines, like every
// block's, and its secret comes from the environment.
func TestLoadOIDCDiagnostics(t *testing.T) {
	env := func(name string) (string, bool) {
		if name == "CODEHUB_AUTH_OIDC_CLIENT_SECRET" {
			return "from-env", true
		}
		return "", false
	}
	_, err := parse([]byte(oidcFile), "oidc.hcl", env)
	cerr := configError(t, err)
	want := []string{
		"11:5 Invalid auth.oidc.issuer",
		"13:5 Invalid auth.oidc.scopes",
		"17:3 Invalid audit.retention",
	}
	if got := summaries(cerr.Diagnostics); !slices.Equal(got, want) {
		t.Errorf("diagnostics = %q, want %q", got, want)
	}

	fixed := []byte(oidcFile[:len(oidcFile)-len("audit {\n  retention = \"ninety days\"\n}\n")])
	fixed = []byte(strings.NewReplacer(`"http://idp.example.com"`, `"https://idp.example.com"`, `["profile"]`, `["openid", "groups"]`).Replace(string(fixed)))
	c, err := parse(fixed, "oidc.hcl", env)
	if err != nil {
		t.Fatalf("fixed file: %v", err)
	}
	o := c.Auth.OIDC
	if o.ClientSecret.Reveal() != "from-env" || o.UsernameClaim != "preferred_username" || !slices.Equal(o.Scopes, []string{"openid", "groups"}) || c.Auth.PasswordLogin {
		t.Errorf("oidc = %+v, password login %v", o, c.Auth.PasswordLogin)
	}
	if c.Audit.Retention != 90*24*time.Hour {
		t.Errorf("retention = %s, want the default 90d", c.Audit.Retention)
	}
}
