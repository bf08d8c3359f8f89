package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// ecosystemEnv maps attribute paths to the variables Nomad's and Consul's
// own tools read. They take precedence over codehub's CODEHUB_* names so a
// machine already set up for the nomad and consul CLIs needs nothing more.
var ecosystemEnv = map[string]string{
	"backend.nomad.address":   "NOMAD_ADDR",
	"backend.nomad.token":     "NOMAD_TOKEN",
	"backend.nomad.namespace": "NOMAD_NAMESPACE",
	"backend.nomad.region":    "NOMAD_REGION",
	"consul.address":          "CONSUL_HTTP_ADDR",
	"consul.token":            "CONSUL_HTTP_TOKEN",
}

// EnvName is codehub's own environment variable for an attribute path:
// CODEHUB_ and the upper-cased path, dots as underscores
// ("backend.nomad.token" -> CODEHUB_BACKEND_NOMAD_TOKEN).
func EnvName(path string) string {
	return "CODEHUB_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// applyEnv fills every scalar attribute the file left unset from the
// environment. Only blocks in use are filled: the backend's own block, and
// consul only when the file has a consul block. An empty variable counts as
// unset. Lists are not read from the environment.
func (c *Config) applyEnv(lookupEnv func(string) (string, bool), orig *origins) hcl.Diagnostics {
	var diags hcl.Diagnostics
	c.visitAttributes(func(path string, field reflect.Value) {
		if orig.inFile(path) || !isScalar(field.Kind()) {
			return
		}
		name, value, ok := envValue(path, lookupEnv)
		if !ok {
			return
		}
		orig.env[path] = name
		if err := setScalar(field, value); err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid environment variable",
				Detail:   fmt.Sprintf("%s (for %s) %v.", name, path, err),
			})
		}
	})
	return diags
}

func envValue(path string, lookupEnv func(string) (string, bool)) (name, value string, ok bool) {
	names := []string{EnvName(path)}
	if eco, found := ecosystemEnv[path]; found {
		names = []string{eco, EnvName(path)}
	}
	for _, name := range names {
		if v, found := lookupEnv(name); found && v != "" {
			return name, v, true
		}
	}
	return "", "", false
}

func isScalar(k reflect.Kind) bool {
	return k == reflect.String || k == reflect.Bool || k == reflect.Int
}

func setScalar(field reflect.Value, value string) error {
	switch field.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return errors.New("must be true or false")
		}
		field.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(value)
		if err != nil {
			return errors.New("must be a whole number")
		}
		field.SetInt(int64(n))
	default:
		field.SetString(value)
	}
	return nil
}

// visitAttributes calls visit for every HCL attribute of the blocks in use,
// with its path in the file.
func (c *Config) visitAttributes(visit func(path string, field reflect.Value)) {
	visitStruct("", reflect.ValueOf(c).Elem(), visit)
	if c.Backend == nil {
		return
	}
	if c.Backend.Nomad != nil {
		visitStruct(joinPath("backend", BackendNomad), reflect.ValueOf(c.Backend.Nomad).Elem(), visit)
	}
	if c.Backend.Local != nil {
		visitStruct(joinPath("backend", BackendLocal), reflect.ValueOf(c.Backend.Local).Elem(), visit)
	}
}

func visitStruct(prefix string, v reflect.Value, visit func(path string, field reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("hcl")
		if tag == "" {
			continue
		}
		name, kind, _ := strings.Cut(tag, ",")
		path := joinPath(prefix, name)
		field := v.Field(i)
		if kind == "block" {
			// Labelled blocks (templates) have no environment variables.
			if field.Kind() == reflect.Pointer && !field.IsNil() {
				visitStruct(path, field.Elem(), visit)
			}
			continue
		}
		visit(path, field)
	}
}
