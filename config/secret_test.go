package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestSecretString(t *testing.T) {
	tests := []struct {
		value Secret
		want  string
	}{
		{"", "unset"},
		{"hunter2", "set"},
	}
	for _, tt := range tests {
		if got := tt.value.String(); got != tt.want {
			t.Errorf("Secret(%q).String() = %q, want %q", tt.value.Reveal(), got, tt.want)
		}
		if got := fmt.Sprintf("%#v", tt.value); got != `"`+tt.want+`"` {
			t.Errorf("%%#v of Secret = %s, want %q", got, tt.want)
		}
	}
}

func TestSecretURLString(t *testing.T) {
	tests := []struct {
		name  string
		value SecretURL
		want  string
	}{
		{"unset", "", "unset"},
		{"no password", "postgres://codehub@db:5432/codehub", "postgres://codehub@db:5432/codehub"},
		{"password in user part", "postgres://codehub:pa55word@db:5432/codehub", "postgres://codehub:xxxxx@db:5432/codehub"},
		{"password query parameter", "postgres://db/codehub?sslmode=disable&password=pa55word", "postgres://db/codehub?password=xxxxx&sslmode=disable"},
		{"redis password only", "redis://:pa55word@cache:6379/0", "redis://:xxxxx@cache:6379/0"},
		{"key=value form", "host=db user=codehub password=pa55word", "set"},
		{"unparsable", "postgres://codehub:%zz@db/x", "set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.value.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

// secretConfig sets every secret to a value containing "LEAK".
func secretConfig() *Config {
	c := validConfig()
	c.Database.URL = "postgres://codehub:LEAKdb@db:5432/codehub?password=LEAKquery"
	c.Redis.URL = "redis://:LEAKredis@cache:6379/0"
	c.S3.AccessKey = "LEAKaccess"
	c.S3.SecretKey = "LEAKsecret"
	c.Backend.Nomad.Token = "LEAKnomad"
	c.Consul = &Consul{Address: "127.0.0.1:8500", Token: "LEAKconsul"}
	c.Auth.BootstrapAdmin.Password = "LEAKadmin"
	return c
}

func TestSecretsNeverPrinted(t *testing.T) {
	c := secretConfig()
	values := map[string]any{
		"config":          c,
		"config value":    *c,
		"database":        c.Database,
		"database value":  *c.Database,
		"redis":           c.Redis,
		"s3":              c.S3,
		"s3 value":        *c.S3,
		"backend":         c.Backend,
		"backend value":   *c.Backend,
		"nomad":           c.Backend.Nomad,
		"nomad value":     *c.Backend.Nomad,
		"consul":          c.Consul,
		"consul value":    *c.Consul,
		"auth":            c.Auth,
		"auth value":      *c.Auth,
		"bootstrap admin": *c.Auth.BootstrapAdmin,
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d", "%x", "%t"} {
			if out := fmt.Sprintf(verb, v); strings.Contains(out, "LEAK") {
				t.Errorf("%s printed with %s leaks a secret: %s", name, verb, out)
			}
		}
	}
	// A caller's own struct holding blocks, printed with an unfitting verb:
	// fmt would print a pointer field it cannot format with %s raw.
	holder := struct {
		Database *Database
		Redis    *Redis
		S3       *S3
		Nomad    *NomadBackend
		Consul   *Consul
		Admin    *BootstrapAdmin
	}{c.Database, c.Redis, c.S3, c.Backend.Nomad, c.Consul, c.Auth.BootstrapAdmin}
	for _, verb := range []string{"%s", "%q", "%t"} {
		if out := fmt.Sprintf(verb, holder); strings.Contains(out, "LEAK") {
			t.Errorf("a struct holding blocks printed with %s leaks a secret: %s", verb, out)
		}
	}
	var logged bytes.Buffer
	c.newLogger(&logged).Info("starting", "config", c, "s3", c.S3, "key", c.S3.SecretKey)
	if strings.Contains(logged.String(), "LEAK") {
		t.Errorf("logging the config leaks a secret: %s", logged.String())
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "LEAK") {
		t.Errorf("JSON of the config leaks a secret: %s", out)
	}
	// The secrets are still there for the code that needs them.
	if c.S3.SecretKey.Reveal() != "LEAKsecret" || !strings.Contains(c.Database.URL.Reveal(), "LEAKdb") {
		t.Error("Reveal lost the values")
	}
	// Struct fields print in their redacted form, proving the redaction
	// reaches nested values rather than the output merely omitting them.
	if got := fmt.Sprintf("%+v", *c.S3); !strings.Contains(got, "AccessKey:set SecretKey:set") {
		t.Errorf("%%+v of S3 = %s, want the keys shown as set", got)
	}
}

func TestValidationProblemsDoNotEchoSecrets(t *testing.T) {
	c := secretConfig()
	c.Database.URL = "mysql://codehub:LEAKdb@db/codehub"
	c.Redis.URL = "http://:LEAKredis@cache"
	c.Auth.BootstrapAdmin.Password = "LEAK"
	err := c.Validate()
	if err == nil {
		t.Fatal("want problems with the database URL, Redis URL and admin password")
	}
	if strings.Contains(err.Error(), "LEAK") {
		t.Errorf("validation error leaks a secret:\n%v", err)
	}
	if got := len(configError(t, err).Diagnostics); got != 3 {
		t.Errorf("got %d problems, want 3:\n%v", got, err)
	}
}
