package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultTemplate names the template the workspace block makes. It always
// exists, so workspaces created before templates keep starting; a
// `template "default"` block describes or restricts it.
const DefaultTemplate = "default"

// GroupAdmins is the group of every administrator, the one group a
// template's groups may name.
const GroupAdmins = "admins"

// Parameter types.
const (
	ParamString = "string"
	ParamNumber = "number"
	ParamBool   = "bool"
)

// Template is one kind of workspace a user may create: what it runs, how
// big it is, and what the user chooses. Unset fields take the workspace
// block's values (Config.Template resolves them).
type Template struct {
	Name        string `hcl:"name,label"`
	Description string `hcl:"description,optional"`
	// Image runs under the docker driver; Command and Args under exec and
	// raw_exec (Args also follow the image's entrypoint).
	Image      string   `hcl:"image,optional"`
	Entrypoint []string `hcl:"entrypoint,optional"`
	Command    string   `hcl:"command,optional"`
	Args       []string `hcl:"args,optional"`
	// CPU in MHz; Memory is the reservation and MemoryMax the most the
	// program may use (0: the reservation), both in MiB.
	CPU       int               `hcl:"cpu,optional"`
	Memory    int               `hcl:"memory,optional"`
	MemoryMax int               `hcl:"memory_max,optional"`
	Env       map[string]string `hcl:"env,optional"`

	// The idle timers of its workspaces, within the workspace block's
	// max_standby_ttl and max_archive_ttl; empty keeps the workspace
	// block's.
	StandbyTTLHCL string `hcl:"standby_ttl,optional"`
	StandbyTTL    time.Duration
	ArchiveTTLHCL string `hcl:"archive_ttl,optional"`
	ArchiveTTL    time.Duration

	// Users (user names) and Groups (GroupAdmins, or groups of the
	// identity provider) who may use it; both empty: everyone.
	Users  []string `hcl:"users,optional"`
	Groups []string `hcl:"groups,optional"`

	// RepositoryParameter names the string parameter holding a git URL
	// cloned into the home at the workspace's first start.
	RepositoryParameter string       `hcl:"repository_parameter,optional"`
	Parameters          []*Parameter `hcl:"parameter,block"`

	// Prebuild prepares homes ahead of time; nil: every first start
	// clones.
	Prebuild *Prebuild `hcl:"prebuild,block"`
	// Warm is how many homes are kept ready for new workspaces with the
	// default parameters: volumes provisioned and holding the newest
	// prebuilt home (an empty one without prebuilds). A creation claims
	// one and starts as a wake does.
	Warm int `hcl:"warm,optional"`
}

// Prebuild is a template's prebuilt homes: a home with the template's
// default repository cloned and Init run in it, archived, from which a new
// workspace with the default parameters starts instead of cloning.
type Prebuild struct {
	// Init are shell commands run one after the other in the repository's
	// checkout at a first start that clones (a prebuild's, and any
	// workspace's that no prebuilt home serves); the first to fail fails
	// the start.
	Init []string `hcl:"init"`
	// Every is how often a prebuild is made again from the repository's
	// newest commit; a change of the template's version, or an admin's
	// request, makes one at once. Empty: only then.
	EveryHCL string `hcl:"every,optional"`
	Every    time.Duration
	// Keep is how many good prebuilt homes are kept (the newest serves).
	Keep int `hcl:"keep,optional"`
}

// Prebuild defaults and bounds.
const (
	DefaultPrebuildKeep = 2
	MaxPrebuildKeep     = 10
	MinPrebuildEvery    = 10 * time.Minute
	MaxWarm             = 100
)

// Parameter is one value a user gives when creating a workspace. It
// reaches the program as the environment variable ParamEnv(Name).
type Parameter struct {
	Name        string `hcl:"name,label"`
	Type        string `hcl:"type,optional"`
	Description string `hcl:"description,optional"`
	// Default is the value when none is given (HCL numbers and bools are
	// read as their text); nil makes the parameter required.
	Default *string `hcl:"default,optional"`
	// Regex must match a whole string value.
	Regex string `hcl:"regex,optional"`
	// Min and Max bound a number.
	Min *float64 `hcl:"min,optional"`
	Max *float64 `hcl:"max,optional"`
	// Options, when set, lists the only values a string may take.
	Options []string `hcl:"options,optional"`
}

// ParamEnv is the environment variable a parameter's value is given in.
func ParamEnv(name string) string { return "CODEHUB_PARAM_" + strings.ToUpper(name) }

// TemplateNames lists the templates in the order users see them: the
// default first, then the file's order.
func (c *Config) TemplateNames() []string {
	names := []string{DefaultTemplate}
	for _, t := range c.Templates {
		if !slices.Contains(names, t.Name) {
			names = append(names, t.Name)
		}
	}
	return names
}

// Template returns template name with every unset field taken from the
// workspace block, and whether it exists. The result is a copy.
func (c *Config) Template(name string) (*Template, bool) {
	w := c.Workspace
	base := &Template{
		Name: DefaultTemplate, Description: "The standard workspace.",
		Image: w.Image, Entrypoint: w.Entrypoint, Command: w.Command, Args: w.Args,
		CPU: w.CPU, Memory: w.Memory,
		StandbyTTL: w.StandbyTTL, ArchiveTTL: w.ArchiveTTL,
	}
	var own *Template
	for _, t := range c.Templates {
		if t.Name == name {
			own = t
			break
		}
	}
	if own == nil {
		return base, name == DefaultTemplate
	}
	r := *own
	r.Env = maps.Clone(own.Env)
	r.Parameters = slices.Clone(own.Parameters)
	if own.Prebuild != nil {
		pb := *own.Prebuild
		pb.Init = slices.Clone(own.Prebuild.Init)
		r.Prebuild = &pb
	}
	if r.Description == "" {
		r.Description = base.Description
	}
	fill(&r.Image, base.Image)
	fill(&r.Command, base.Command)
	fill(&r.CPU, base.CPU)
	fill(&r.Memory, base.Memory)
	fill(&r.StandbyTTL, base.StandbyTTL)
	fill(&r.ArchiveTTL, base.ArchiveTTL)
	if len(r.Entrypoint) == 0 {
		r.Entrypoint = base.Entrypoint
	}
	if len(r.Args) == 0 {
		r.Args = base.Args
	}
	return &r, true
}

func fill[T comparable](dst *T, base T) {
	var zero T
	if *dst == zero {
		*dst = base
	}
}

// Version is a hash of everything of the template that goes into what a
// workspace runs: a workspace started from another version runs an older
// template.
func (t *Template) Version() string {
	var init []string
	if t.Prebuild != nil {
		init = t.Prebuild.Init
	}
	inputs := struct {
		Image, Command, Repository string
		Entrypoint, Args           []string
		CPU, Memory, MemoryMax     int
		Env                        map[string]string
		Parameters                 []*Parameter
		// What a first start runs: a template without it keeps the
		// version it had before prebuilds existed.
		Init []string `json:",omitempty"`
	}{t.Image, t.Command, t.RepositoryParameter, t.Entrypoint, t.Args, t.CPU, t.Memory, t.MemoryMax, t.Env, t.Parameters, init}
	b, err := json.Marshal(inputs)
	if err != nil {
		// Strings, numbers and maps of strings always encode.
		panic(fmt.Sprintf("encode template inputs: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// Allows reports whether a user, an administrator or not and in groups
// (from single sign-on), may create workspaces of t.
func (t *Template) Allows(username string, admin bool, groups []string) bool {
	if len(t.Users) == 0 && len(t.Groups) == 0 {
		return true
	}
	return slices.Contains(t.Users, username) || admin && slices.Contains(t.Groups, GroupAdmins) ||
		slices.ContainsFunc(groups, func(g string) bool { return g != GroupAdmins && slices.Contains(t.Groups, g) })
}

// ParameterError names the parameter a value was refused for.
type ParameterError struct {
	Name    string
	Message string
}

func (e *ParameterError) Error() string { return e.Name + ": " + e.Message }

// ParameterValues checks the values a user gave (JSON-decoded: strings,
// float64 numbers, bools) and returns every parameter's value, defaults
// filled in. The first refusal is a *ParameterError.
func (t *Template) ParameterValues(given map[string]any) (map[string]any, error) {
	for name := range given {
		if t.parameter(name) == nil {
			return nil, &ParameterError{name, fmt.Sprintf("template %q has no such parameter", t.Name)}
		}
	}
	values := make(map[string]any, len(t.Parameters))
	for _, p := range t.Parameters {
		v, ok := given[p.Name]
		if !ok || v == nil {
			if p.Default == nil {
				return nil, &ParameterError{p.Name, "is required"}
			}
			d, err := p.parseText(*p.Default)
			if err != nil {
				return nil, &ParameterError{p.Name, err.Error()}
			}
			v = d
		}
		if err := p.Check(v); err != nil {
			return nil, &ParameterError{p.Name, err.Error()}
		}
		values[p.Name] = v
	}
	return values, nil
}

func (t *Template) parameter(name string) *Parameter {
	for _, p := range t.Parameters {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Repository is the git URL the values name for cloning at first start,
// empty when the template clones nothing.
func (t *Template) Repository(values map[string]any) string {
	if t.RepositoryParameter == "" {
		return ""
	}
	s, _ := values[t.RepositoryParameter].(string)
	return s
}

// ParameterEnv is the environment the values give the program.
func (t *Template) ParameterEnv(values map[string]any) map[string]string {
	env := make(map[string]string, len(values))
	for _, p := range t.Parameters {
		if v, ok := values[p.Name]; ok {
			env[ParamEnv(p.Name)] = ValueText(v)
		}
	}
	return env
}

// ValueText writes a parameter value as the program reads it.
func ValueText(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case string:
		return x
	}
	return fmt.Sprint(v)
}

func (p *Parameter) kind() string {
	if p.Type == "" {
		return ParamString
	}
	return p.Type
}

// parseText reads a default written in the file.
func (p *Parameter) parseText(s string) (any, error) {
	switch p.kind() {
	case ParamNumber:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("%q is not a number", s)
		}
		return f, nil
	case ParamBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", s)
		}
		return b, nil
	}
	return s, nil
}

// Check judges one value against the parameter's type and validation.
func (p *Parameter) Check(v any) error {
	switch p.kind() {
	case ParamNumber:
		f, ok := v.(float64)
		if !ok {
			return fmt.Errorf("must be a number")
		}
		if p.Min != nil && f < *p.Min || p.Max != nil && f > *p.Max {
			return fmt.Errorf("must be %s", p.rangeText())
		}
	case ParamBool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("must be true or false")
		}
	default:
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("must be a string")
		}
		if len(p.Options) > 0 && !slices.Contains(p.Options, s) {
			return fmt.Errorf("must be one of %s", strings.Join(quoteAll(p.Options), ", "))
		}
		if p.Regex != "" {
			re, err := regexp.Compile(wholeMatch(p.Regex))
			if err != nil {
				return fmt.Errorf("cannot be checked: regex %q does not compile", p.Regex)
			}
			if !re.MatchString(s) {
				return fmt.Errorf("%q must match %s", s, p.Regex)
			}
		}
	}
	return nil
}

func (p *Parameter) rangeText() string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	switch {
	case p.Min != nil && p.Max != nil:
		return "from " + f(*p.Min) + " to " + f(*p.Max)
	case p.Min != nil:
		return "at least " + f(*p.Min)
	default:
		return "at most " + f(*p.Max)
	}
}

func wholeMatch(re string) string { return `^(?:` + re + `)$` }

func quoteAll(items []string) []string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = strconv.Quote(s)
	}
	return out
}

// Schema describes the parameters as a JSON Schema object, which clients
// build their forms from.
func (t *Template) Schema() map[string]any {
	props := map[string]any{}
	required := []string{}
	for _, p := range t.Parameters {
		s := map[string]any{"description": p.Description}
		switch p.kind() {
		case ParamNumber:
			s["type"] = "number"
			if p.Min != nil {
				s["minimum"] = *p.Min
			}
			if p.Max != nil {
				s["maximum"] = *p.Max
			}
		case ParamBool:
			s["type"] = "boolean"
		default:
			s["type"] = "string"
			if p.Regex != "" {
				s["pattern"] = wholeMatch(p.Regex)
			}
			if len(p.Options) > 0 {
				s["enum"] = p.Options
			}
		}
		if p.Default != nil {
			if d, err := p.parseText(*p.Default); err == nil {
				s["default"] = d
			}
		} else {
			required = append(required, p.Name)
		}
		props[p.Name] = s
	}
	return map[string]any{
		"type": "object", "properties": props, "required": required, "additionalProperties": false,
	}
}
