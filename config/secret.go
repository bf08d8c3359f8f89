package config

import (
	"net/url"
	"strconv"
	"strings"
)

// Secret is a credential. It prints as "set" or "unset" under every fmt verb
// and in JSON, so logging or dumping a configuration cannot leak it; Reveal
// is the one way to read the value.
type Secret string

// Reveal returns the credential itself, for handing to a client library.
func (s Secret) Reveal() string { return string(s) }

// IsSet reports whether a value was configured.
func (s Secret) IsSet() bool { return s != "" }

func (s Secret) String() string {
	if s.IsSet() {
		return "set"
	}
	return "unset"
}

func (s Secret) GoString() string { return strconv.Quote(s.String()) }

func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// SecretURL is a connection URL that may embed a password. It prints with
// the password (in the user part or a password query parameter) replaced,
// keeping the rest readable; a value that is not a URL prints as "set".
type SecretURL string

// Reveal returns the URL itself, for handing to a client library.
func (u SecretURL) Reveal() string { return string(u) }

func (u SecretURL) String() string {
	if u == "" {
		return "unset"
	}
	parsed, err := url.Parse(string(u))
	if err != nil || parsed.Scheme == "" || parsed.Opaque != "" {
		return "set"
	}
	q := parsed.Query()
	for key := range q {
		if strings.Contains(strings.ToLower(key), "password") {
			q.Set(key, "xxxxx")
		}
	}
	parsed.RawQuery = q.Encode()
	return parsed.Redacted()
}

func (u SecretURL) GoString() string { return strconv.Quote(u.String()) }

func (u SecretURL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }
