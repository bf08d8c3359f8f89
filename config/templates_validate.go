package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// resolveTemplates reads the templates' idle timers; an empty one keeps
// the workspace block's.
func (c *Config) resolveTemplates() []problem {
	var ps []problem
	for _, t := range c.Templates {
		for _, f := range []struct {
			name string
			text string
			dst  *time.Duration
		}{{"standby_ttl", t.StandbyTTLHCL, &t.StandbyTTL}, {"archive_ttl", t.ArchiveTTLHCL, &t.ArchiveTTL}} {
			if f.text == "" {
				continue
			}
			d, err := time.ParseDuration(f.text)
			if err != nil {
				ps = append(ps, problem{templatePath(t.Name, f.name), fmt.Sprintf(`%q is not a duration; write it like "90s", "15m" or "2h"`, f.text)})
				continue
			}
			*f.dst = d
		}
		if pb := t.Prebuild; pb != nil {
			if pb.Keep == 0 {
				pb.Keep = DefaultPrebuildKeep
			}
			if pb.EveryHCL != "" {
				d, err := time.ParseDuration(pb.EveryHCL)
				if err != nil {
					ps = append(ps, problem{templatePath(t.Name, "prebuild.every"), fmt.Sprintf(`%q is not a duration; write it like "6h" or "24h"`, pb.EveryHCL)})
					continue
				}
				pb.Every = d
			}
		}
	}
	return ps
}

func templatePath(name, field string) string { return "template." + name + "." + field }

var (
	templateName  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	parameterName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	envName       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// reservedEnv are set by codehub itself for every workspace program.
var reservedEnv = []string{"HOME", "PORT", "HASHED_PASSWORD"}

// checkTemplates judges every template as its workspaces would run it,
// workspace block values filled in.
func (c *Config) checkTemplates(ch *checker) {
	seen := map[string]bool{}
	for _, own := range c.Templates {
		name := own.Name
		if !templateName.MatchString(name) {
			ch.add("template."+name, "name %q must be 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit", name)
			continue
		}
		if seen[name] {
			ch.add("template."+name, "is defined more than once")
			continue
		}
		seen[name] = true
		t, _ := c.Template(name)
		c.checkTemplate(ch, t)
	}
}

func (c *Config) checkTemplate(ch *checker, t *Template) {
	path := func(field string) string { return templatePath(t.Name, field) }
	if c.Backend != nil && c.Backend.Kind == BackendNomad && c.Backend.Nomad != nil {
		switch c.Backend.Nomad.Driver {
		case DriverDocker:
			if t.Image == "" {
				ch.add(path("image"), "must be set for the docker driver (here or in the workspace block)")
			}
		case DriverExec, DriverRawExec:
			if t.Command == "" {
				ch.add(path("command"), "must be set for the %s driver (here or in the workspace block)", c.Backend.Nomad.Driver)
			}
		}
	}
	for i, arg := range t.Args {
		for _, p := range placeholderLike.FindAllString(arg, -1) {
			if p != PlaceholderPort && p != PlaceholderHome {
				ch.add(fmt.Sprintf("%s[%d]", path("args"), i), "unknown placeholder %s; use %s or %s", p, PlaceholderPort, PlaceholderHome)
			}
		}
	}
	if c.Workspace.UpstreamAuth == UpstreamAuthCodeServer && authNone(t.Args) {
		ch.add(path("args"), "turn off code-server's password auth with --auth none, which workspace.upstream_auth %q needs", c.Workspace.UpstreamAuth)
	}
	c.checkTemplateResources(ch, t)
	for _, name := range slices.Sorted(maps.Keys(t.Env)) {
		switch {
		case !envName.MatchString(name):
			ch.add(path("env"), "%q is not an environment variable name", name)
		case slices.Contains(reservedEnv, name) || strings.HasPrefix(name, "CODEHUB_"):
			ch.add(path("env"), "%q is set by codehub itself", name)
		}
	}
	w := c.Workspace
	if t.StandbyTTL <= 0 || t.StandbyTTL > w.MaxStandbyTTL {
		ch.add(path("standby_ttl"), "must be positive and at most workspace.max_standby_ttl (%s)", w.MaxStandbyTTL)
	}
	if t.ArchiveTTL <= 0 || t.ArchiveTTL > w.MaxArchiveTTL {
		ch.add(path("archive_ttl"), "must be positive and at most workspace.max_archive_ttl (%s)", w.MaxArchiveTTL)
	}
	for i, g := range t.Groups {
		if strings.TrimSpace(g) == "" {
			ch.add(fmt.Sprintf("%s[%d]", path("groups"), i), "a group name must not be empty")
		}
	}
	for i, u := range t.Users {
		if !ValidUsername(u) {
			ch.add(fmt.Sprintf("%s[%d]", path("users"), i), "%q is not a user name", u)
		}
	}
	checkParameters(ch, t)
}

func (c *Config) checkTemplateResources(ch *checker, t *Template) {
	path := func(field string) string { return templatePath(t.Name, field) }
	ch.atLeast(path("cpu"), t.CPU, 1)
	if c.Backend != nil && c.Backend.Kind == BackendNomad {
		if t.Memory < minNomadMemoryMiB {
			ch.add(path("memory"), "must be at least %d MiB (Nomad's minimum)", minNomadMemoryMiB)
		}
	} else {
		ch.atLeast(path("memory"), t.Memory, 1)
	}
	if t.MemoryMax != 0 && t.MemoryMax < t.Memory {
		ch.add(path("memory_max"), "must be at least memory (%d MiB), or 0 for no more than memory", t.Memory)
	}
}

func checkParameters(ch *checker, t *Template) {
	seen := map[string]bool{}
	for _, p := range t.Parameters {
		path := func(field string) string { return templatePath(t.Name, "parameter."+p.Name+"."+field) }
		if !parameterName.MatchString(p.Name) {
			ch.add(templatePath(t.Name, "parameter."+p.Name), "name %q must be 1 to 63 of a-z, 0-9 and '_', starting with a letter", p.Name)
			continue
		}
		if seen[p.Name] {
			ch.add(templatePath(t.Name, "parameter."+p.Name), "is defined more than once")
			continue
		}
		seen[p.Name] = true
		kind := p.kind()
		if kind != ParamString && kind != ParamNumber && kind != ParamBool {
			ch.add(path("type"), "%q must be %q, %q or %q", p.Type, ParamString, ParamNumber, ParamBool)
			continue
		}
		if kind != ParamString && (p.Regex != "" || len(p.Options) > 0) {
			ch.add(path("type"), "regex and options apply only to string parameters")
		}
		if kind != ParamNumber && (p.Min != nil || p.Max != nil) {
			ch.add(path("type"), "min and max apply only to number parameters")
		}
		if p.Regex != "" {
			if _, err := regexp.Compile(wholeMatch(p.Regex)); err != nil {
				ch.add(path("regex"), "%q does not compile: %v", p.Regex, err)
				continue
			}
		}
		if p.Min != nil && p.Max != nil && *p.Min > *p.Max {
			ch.add(path("max"), "must be at least min")
			continue
		}
		if p.Default == nil {
			continue
		}
		v, err := p.parseText(*p.Default)
		if err == nil {
			err = p.Check(v)
		}
		if err != nil {
			ch.add(path("default"), "%v", err)
		}
	}
	if r := t.RepositoryParameter; r != "" {
		if p := t.parameter(r); p == nil || p.kind() != ParamString {
			ch.add(templatePath(t.Name, "repository_parameter"), "%q must name a string parameter of the template", r)
		}
	}
	if pb := t.Prebuild; pb != nil {
		checkPrebuild(ch, t, pb)
	}
	if t.Warm < 0 || t.Warm > MaxWarm {
		ch.add(templatePath(t.Name, "warm"), "must be between 0 and %d", MaxWarm)
	}
	for _, p := range t.Parameters {
		if t.Warm > 0 && p.Default == nil {
			ch.add(templatePath(t.Name, "warm"), "parameter %q needs a default: warm homes are made with every parameter's default", p.Name)
		}
	}
}

// checkPrebuild judges a template's prebuild block: a prebuild clones the
// repository parameter's default, so there must be one.
func checkPrebuild(ch *checker, t *Template, pb *Prebuild) {
	path := func(field string) string { return templatePath(t.Name, "prebuild."+field) }
	if p := t.parameter(t.RepositoryParameter); p == nil || p.Default == nil || *p.Default == "" {
		ch.add(templatePath(t.Name, "prebuild"), "needs repository_parameter naming a string parameter with a default: a prebuild clones that repository")
	}
	for _, p := range t.Parameters {
		if p.Default == nil {
			ch.add(templatePath(t.Name, "prebuild"), "parameter %q needs a default: a prebuild uses every parameter's default", p.Name)
		}
	}
	if len(pb.Init) == 0 {
		ch.add(path("init"), "must list at least one command")
	}
	for i, c := range pb.Init {
		if strings.TrimSpace(c) == "" {
			ch.add(path("init"), "command %d is empty", i+1)
		}
	}
	if pb.Keep < 1 || pb.Keep > MaxPrebuildKeep {
		ch.add(path("keep"), "must be between 1 and %d", MaxPrebuildKeep)
	}
	// An every that does not parse was reported as such already.
	if d, err := time.ParseDuration(pb.EveryHCL); pb.EveryHCL != "" && err == nil && d < MinPrebuildEvery {
		ch.add(path("every"), "must be at least %s", MinPrebuildEvery)
	}
}
