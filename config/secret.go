package config

import (
	"fmt"
	"io"
	"net/url"
	"reflect"
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

func (s Secret) Format(f fmt.State, verb rune) { formatText(f, verb, s.String()) }

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

func (u SecretURL) Format(f fmt.State, verb rune) { formatText(f, verb, u.String()) }

func (u SecretURL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// formatText prints a redacted form for any verb: quoted for %q and %#v,
// plain otherwise. Accepting every verb matters: fmt prints a value it
// finds a verb wrong for without consulting String.
func formatText(f fmt.State, verb rune, text string) {
	if verb == 'q' || (verb == 'v' && f.Flag('#')) {
		text = strconv.Quote(text)
	}
	_, _ = io.WriteString(f, text)
}

// The blocks holding secrets format themselves field by field under every
// verb. Were they left to fmt, a verb that does not fit a pointer to one
// (%s on a *S3 inside another struct) would make fmt print the block raw,
// secrets included, without asking its fields.

func (d Database) Format(f fmt.State, verb rune)       { formatFields(f, verb, reflect.ValueOf(d)) }
func (r Redis) Format(f fmt.State, verb rune)          { formatFields(f, verb, reflect.ValueOf(r)) }
func (s S3) Format(f fmt.State, verb rune)             { formatFields(f, verb, reflect.ValueOf(s)) }
func (n NomadBackend) Format(f fmt.State, verb rune)   { formatFields(f, verb, reflect.ValueOf(n)) }
func (c Consul) Format(f fmt.State, verb rune)         { formatFields(f, verb, reflect.ValueOf(c)) }
func (b BootstrapAdmin) Format(f fmt.State, verb rune) { formatFields(f, verb, reflect.ValueOf(b)) }
func (o OIDC) Format(f fmt.State, verb rune)           { formatFields(f, verb, reflect.ValueOf(o)) }

// formatFields writes a struct the way %v, %+v or %#v would (any other verb
// counts as %v), formatting each field through fmt so that fields with
// their own Format (secrets, nested blocks) redact themselves.
func formatFields(f fmt.State, verb rune, v reflect.Value) {
	sharp := verb == 'v' && f.Flag('#')
	named := sharp || (verb == 'v' && f.Flag('+'))
	fieldVerb, sep := "%v", " "
	switch {
	case sharp:
		fieldVerb, sep = "%#v", ", "
		_, _ = io.WriteString(f, v.Type().String())
	case named:
		fieldVerb = "%+v"
	}
	_, _ = io.WriteString(f, "{")
	t := v.Type()
	for i := range t.NumField() {
		if i > 0 {
			_, _ = io.WriteString(f, sep)
		}
		if named {
			_, _ = io.WriteString(f, t.Field(i).Name+":")
		}
		field := v.Field(i)
		if field.Kind() == reflect.Pointer && field.IsNil() {
			_, _ = io.WriteString(f, "<nil>")
			continue
		}
		_, _ = fmt.Fprintf(f, fieldVerb, field.Interface())
	}
	_, _ = io.WriteString(f, "}")
}
