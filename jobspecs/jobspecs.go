// Package jobspecs renders the HCL jobspecs codehub submits to Nomad: the
// workspace service job and the archive and restore batch jobs. The text it
// returns is exactly what the Nomad server parses and what operators see as
// the job's source in the Nomad UI, so it must never hold a secret: batch
// jobs read S3 credentials, and workspaces their upstream token, from a Nomad
// Variable at run time.
package jobspecs

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/codehub-io/codehub/config"
)

// Kind names one of the three templates.
type Kind string

const (
	KindWorkspace Kind = "workspace"
	KindArchive   Kind = "archive"
	KindRestore   Kind = "restore"
)

// Kinds lists every template, in a stable order.
var Kinds = []Kind{KindWorkspace, KindArchive, KindRestore}

// ParseKind checks a kind given on a command line.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown jobspec kind %q (want workspace, archive or restore)", s)
}

// FileName is the template file of a kind, embedded or in an operator's dir.
func (k Kind) FileName() string { return string(k) + ".nomad.hcl" }

// HelpersFile holds the templates the jobs share (define blocks, such as
// the data mover's task), embedded or in an operator's dir.
const HelpersFile = "_helpers.tpl"

// Placeholders operators put in workspace args (config's syntax); the
// renderer replaces them with Nomad's runtime interpolation of the assigned
// port and with the home directory the task sees.
const (
	PlaceholderPort = config.PlaceholderPort
	PlaceholderHome = config.PlaceholderHome
)

//go:embed templates/*.nomad.hcl templates/_helpers.tpl
var embedded embed.FS

// Renderer holds the parsed templates. It is safe for concurrent use.
type Renderer struct {
	templates map[Kind]*template.Template
}

// Errors of an operator's template dir.
var (
	errUnknownTemplate = errors.New("not a jobspec template codehub knows")
	errNoTemplates     = errors.New("holds no jobspec template")
)

// NewRenderer loads the embedded templates. When dir is not empty, each
// template file the operator put there replaces the embedded one of its
// name, and the operator's helpers file is read after the embedded one,
// so its define blocks replace those of the same name in every job; a
// define in a job's own file replaces it in that job only.
func NewRenderer(dir string) (*Renderer, error) {
	own, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	shared := template.New(HelpersFile).
		Delims("[[", "]]").
		Option("missingkey=error").
		Funcs(funcs)
	helpers, err := embedded.ReadFile("templates/" + HelpersFile)
	if err != nil {
		return nil, fmt.Errorf("read embedded jobspec helpers: %w", err)
	}
	if _, err := shared.Parse(string(helpers)); err != nil {
		return nil, fmt.Errorf("parse jobspec helpers %s: %w", HelpersFile, err)
	}
	if f, ok := own[HelpersFile]; ok {
		if _, err := shared.New(f.path).Parse(f.text); err != nil {
			return nil, fmt.Errorf("parse jobspec helpers: %w", err)
		}
	}
	r := &Renderer{templates: make(map[Kind]*template.Template, len(Kinds))}
	for _, k := range Kinds {
		f, ok := own[k.FileName()]
		if !ok {
			b, err := embedded.ReadFile("templates/" + k.FileName())
			if err != nil {
				return nil, fmt.Errorf("read embedded jobspec template: %w", err)
			}
			f = templateFile{path: k.FileName(), text: string(b)}
		}
		set, err := shared.Clone()
		if err != nil {
			return nil, fmt.Errorf("copy jobspec helpers: %w", err)
		}
		t, err := set.New(f.path).Parse(f.text)
		if err != nil {
			return nil, fmt.Errorf("parse jobspec template %s: %w", f.path, err)
		}
		r.templates[k] = t
	}
	return r, nil
}

// templateFile is one template an operator supplied.
type templateFile struct{ path, text string }

// readDir reads the templates in an operator's dir, by file name. A file
// named like a template (*.nomad.hcl, *.tpl) that is none, or a dir with
// no template at all, is refused: a misspelt name would otherwise leave
// the embedded template in use unnoticed.
func readDir(dir string) (map[string]templateFile, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read jobspec template dir: %w", err)
	}
	known := []string{HelpersFile}
	for _, k := range Kinds {
		known = append(known, k.FileName())
	}
	own := make(map[string]templateFile)
	for _, e := range entries {
		name := e.Name()
		if !slices.Contains(known, name) {
			if strings.HasSuffix(name, ".nomad.hcl") || strings.HasSuffix(name, ".tpl") {
				return nil, fmt.Errorf("%s: %w (want %s)", filepath.Join(dir, name), errUnknownTemplate, strings.Join(known, ", "))
			}
			continue
		}
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read jobspec template: %w", err)
		}
		own[name] = templateFile{path: path, text: string(b)}
	}
	if len(own) == 0 {
		return nil, fmt.Errorf("%s: %w (want any of %s)", dir, errNoTemplates, strings.Join(known, ", "))
	}
	return own, nil
}

// Render executes the template of kind with v. A template that names a
// field Values lacks, or a required value left empty, fails the render.
func (r *Renderer) Render(kind Kind, v Values) (string, error) {
	t, ok := r.templates[kind]
	if !ok {
		return "", fmt.Errorf("unknown jobspec kind %q", kind)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		return "", fmt.Errorf("render %s jobspec for %s: %w", kind, v.JobID, err)
	}
	return buf.String(), nil
}

// Values is everything a template may use. Secrets have no field here on
// purpose: nothing a template can reach may leak into the submitted HCL.
type Values struct {
	JobID       string
	WorkspaceID string
	OwnerID     string
	// RunID names a workspace job's start. A new run changes the job, so
	// Nomad replaces the allocation and its task reads the new token.
	RunID string

	Namespace   string
	Region      string
	NodePool    string
	Datacenters []string

	// Driver is docker, exec or raw_exec.
	Driver string
	// VolumeName is the dynamic host volume holding the home directory.
	VolumeName string
	// HomeDir is where the task sees the home: the mount destination for
	// docker and exec, the volume's host path for raw_exec.
	HomeDir string

	// Workspace program. Command runs under exec and raw_exec; under
	// docker the image runs, its ENTRYPOINT replaced by Entrypoint when set.
	// Args follow either.
	Image      string
	Entrypoint []string
	Command    string
	Args       []string
	// Port is the port the program listens on inside its own network
	// namespace (docker bridge); 0 means it listens on the Nomad-assigned
	// port given through the port placeholder (host networking, exec,
	// raw_exec).
	Port int
	// NetworkMode is the docker network mode; empty is docker's default.
	NetworkMode string
	UID         int
	GID         int
	CPU         int
	Memory      int
	// MemoryMax is the most memory the program may use, in MiB; 0 leaves
	// it at Memory.
	MemoryMax int
	// Env is the program's environment beyond HOME and PORT, in order.
	Env           []EnvVar
	Service       string
	Provider      string
	CheckInterval string

	// Batch jobs.
	OpID       string
	ArchiveKey string
	Attempt    int
	ArchiveURL string
	// ArchiveParent is the archive an archive (the batch job's, or the
	// stop archive) uploads only the changes since; "" for a full one.
	ArchiveParent string
	// Backup marks an archive job that backs up a home its volume keeps:
	// its task tries again until S3 takes the home.
	Backup           bool
	JobImage         string
	CodehubPath      string
	ArtifactURL      string
	ArtifactChecksum string
	S3Endpoint       string
	S3Region         string
	S3UseSSL         bool
	// VariablePath is the Nomad Variable holding the S3 credentials, read by
	// the task's template block through its workload identity.
	VariablePath string

	// FirstStartScript, when set, runs in a prestart task that clones the
	// repository and dotfiles into an empty home. FirstStartVariablePath
	// is the Nomad Variable whose ItemFirstStartEnv item that task gets as
	// its environment: the URLs and the git credential.
	FirstStartScript       string
	FirstStartVariablePath string
	// FirstStartInit: the first start runs the template's init commands
	// (the project's set-up), so its task gets the program's environment
	// (Env) and resources rather than a clone's.
	FirstStartInit bool
	// Prebuild makes an archive job a prebuild's: its prestart task
	// "build" runs FirstStartScript as a prebuild's first start (with
	// FirstStartInit and the template's Image, Env and resources), and
	// the mover completes ArchiveURL, the prebuild's prefix, with the
	// commit it built.
	Prebuild bool

	// UserEnvVariablePath, when set, is the Nomad Variable whose
	// ItemUserEnv item the program gets as further environment: the
	// values the user chose (template parameters).
	UserEnvVariablePath string

	// AgentVariablePath, when set, runs the program under `codehub agent`
	// (fetched as the stop-archive task fetches it: ArtifactURL or
	// CodehubPath) on a second port, "agent"; the variable's
	// ItemAgentToken and ItemAgentHostKey items are its secrets. Not for
	// docker.
	AgentVariablePath string

	// TokenVariablePath is the Nomad Variable whose "token" item the
	// workspace program gets as HASHED_PASSWORD; empty runs it without one.
	TokenVariablePath string

	// StopArchiveURL, when set, adds the workspace's poststop task, which
	// archives the home there after a stop codehub did not ask for; it
	// uses the batch jobs' mover fields (JobImage, CodehubPath, ArtifactURL,
	// S3*). StopVariablePath is that task's own Nomad Variable: the S3
	// credentials and the run whose stop is to be archived.
	StopArchiveURL   string
	StopVariablePath string
}

// Mover is what the data mover's shared templates (mover_job and
// mover_task in HelpersFile) are given: a job's values and which of the
// mover's tasks to write. Templates make one with (mover . TASK).
type Mover struct {
	Values
	// Task names the task, and the batch job's group.
	Task string
	// Op is the mover's command: MoverArchive or MoverRestore.
	Op string
	// OnStop makes it the workspace job's poststop task, which archives
	// the home of the run that stopped (StopArchiveURL, StopVariablePath).
	OnStop bool
}

// The data mover's tasks.
const (
	MoverArchive     = "archive"
	MoverRestore     = "restore"
	MoverStopArchive = "stop-archive"
)

// errUnknownMover reports a task the data mover has not.
var errUnknownMover = errors.New("not a data mover task")

func mover(v Values, task string) (Mover, error) {
	switch task {
	case MoverArchive, MoverRestore:
		return Mover{Values: v, Task: task, Op: task}, nil
	case MoverStopArchive:
		return Mover{Values: v, Task: task, Op: MoverArchive, OnStop: true}, nil
	}
	return Mover{}, fmt.Errorf("%q: %w (want %s, %s or %s)", task, errUnknownMover, MoverArchive, MoverRestore, MoverStopArchive)
}

// ReadOnly reports whether the task only reads the home.
func (m Mover) ReadOnly() bool { return m.Op == MoverArchive }

// Items of a workspace job's Nomad Variable that its tasks read as
// environment files (EnvFile): values a user typed travel this way, never
// in an env block. Nomad replaces every "${name}" it knows in an env
// block's values when it starts a task (node attributes and metadata
// included), with no escape that survives, but leaves a rendered file's
// text as it is.
const (
	ItemFirstStartEnv = "first_start_env"
	ItemUserEnv       = "user_env"
)

// Items of a workspace job's Nomad Variable that hold the agent's secrets
// (AgentVariablePath).
const (
	ItemAgentToken   = "agent_token"
	ItemAgentHostKey = "agent_host_key"
)

// EnvFile writes vars as the text of an environment file a template block
// with env = true gives a task: every value double-quoted, with the
// escapes Nomad's parser of such files reads back (\", \\, \n, \r,
// \t, \u00XX for other control bytes), so each arrives byte for byte.
// A name that cannot be an environment variable, or a value holding a NUL
// byte, which no environment can carry, is an error.
func EnvFile(vars []EnvVar) (string, error) {
	var b strings.Builder
	for _, v := range vars {
		if _, err := ident(v.Name); err != nil {
			return "", err
		}
		if strings.IndexByte(v.Value, 0) >= 0 {
			return "", fmt.Errorf("%s: %w", v.Name, errNUL)
		}
		b.WriteString(v.Name)
		b.WriteString(`="`)
		for i := 0; i < len(v.Value); i++ {
			switch c := v.Value[i]; {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\r':
				b.WriteString(`\r`)
			case c == '\t':
				b.WriteString(`\t`)
			case c < 0x20 || c == 0x7f:
				fmt.Fprintf(&b, `\u%04x`, c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteString("\"\n")
	}
	return b.String(), nil
}

// errNUL reports a value no environment can hold.
var errNUL = errors.New("value holds a NUL byte")

// EnvVar is one variable of a program's environment.
type EnvVar struct {
	Name, Value string
}

// SortedEnv orders env by name, so a rendering is the same every time.
func SortedEnv(env map[string]string) []EnvVar {
	out := make([]EnvVar, 0, len(env))
	for _, name := range slices.Sorted(maps.Keys(env)) {
		out = append(out, EnvVar{name, env[name]})
	}
	return out
}

var funcs = template.FuncMap{
	"hcl":                quote,
	"hclList":            quoteList,
	"argv":               argv,
	"agentArgv":          agentArgv,
	"agentEntrypoint":    agentEntrypoint,
	"agentContainerPort": func() int { return AgentContainerPort },
	"required":           required,
	"ident":              ident,
	"mover":              mover,
}

// envName is what may stand unquoted as a name in an env block.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// errNotIdentifier reports an environment variable name HCL cannot hold.
var errNotIdentifier = errors.New("not an environment variable name")

func ident(name string) (string, error) {
	if !envName.MatchString(name) {
		return "", fmt.Errorf("%q: %w", name, errNotIdentifier)
	}
	return name, nil
}

// errMissing reports a required value left empty.
var errMissing = errors.New("required value is empty")

func required(name string, v any) (any, error) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return nil, fmt.Errorf("%s: %w", name, errMissing)
		}
	case int:
		if x == 0 {
			return nil, fmt.Errorf("%s: %w", name, errMissing)
		}
	case []string:
		if len(x) == 0 {
			return nil, fmt.Errorf("%s: %w", name, errMissing)
		}
	}
	return v, nil
}

// quote returns s as an HCL string literal whose value is exactly s once
// the server has parsed the jobspec. That is all it can promise: the
// client later replaces "${name}" in env values, artifact and template
// fields with what it knows of the node and task, so values a user typed
// never go through it (ItemUserEnv, ItemFirstStartEnv).
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case (c == '$' || c == '%') && i+1 < len(s) && s[i+1] == '{':
			// "${" and "%{" start interpolation and directives; doubling the
			// sigil makes them literal.
			b.WriteByte(c)
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			b.WriteString(`\u00`)
			b.WriteString(strconv.FormatUint(uint64(c)>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(c)&0xf, 16))
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func quoteList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// argv quotes program arguments, replacing the port placeholder with Nomad's
// runtime interpolation of the assigned port and the home placeholder with
// the home directory. Placeholders are replaced before quoting, so the
// escaping of a "%{" or "${" sees the text around them.
func argv(args []string, home string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		pieces := strings.Split(a, PlaceholderPort)
		for k, p := range pieces {
			q := unquoted(quote(strings.ReplaceAll(p, PlaceholderHome, home)))
			// A "$" right before the port's interpolation would turn it
			// into the escape "$${": such a run is written as a string
			// interpolated on its own.
			if body := strings.TrimRight(q, "$"); k < len(pieces)-1 && body != q {
				q = body + `${"` + q[len(body):] + `"}`
			}
			pieces[k] = q
		}
		quoted[i] = `"` + strings.Join(pieces, "${NOMAD_PORT_http}") + `"`
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// agentArgv is the argument list of `codehub agent` running the program
// command (quoted) with its arguments (as argv renders them), listening on
// the allocation's agent port, leaving the program's port alone, with
// home (quoted) as the home of the program and its sessions: exec sets
// HOME from the node's user database whatever the env block says.
func agentArgv(home, command, args string) string {
	inner := strings.TrimSuffix(strings.TrimPrefix(args, "["), "]")
	out := `["agent", "-listen", "${NOMAD_ADDR_agent}", "-exclude-port", "${NOMAD_PORT_http}", "-home", ` + home + `, "--", ` + command
	if inner != "" {
		out += ", " + inner
	}
	return out + "]"
}

// AgentContainerPort is the agent's port inside a docker workspace's own
// network namespace (bridge networking), mapped to the allocation's
// "agent" port.
const AgentContainerPort = 7022

// agentEntrypoint is a docker workspace's entrypoint under `codehub agent`
// from the task directory: the agent listens on the allocation's agent
// port (host networking, port 0) or on AgentContainerPort in the
// container's own network, and starts entrypoint, which the image's
// arguments then follow.
func agentEntrypoint(port int, entrypoint []string) string {
	listen, program := `"${NOMAD_ADDR_agent}"`, `"${NOMAD_PORT_http}"`
	if port != 0 {
		listen, program = quote(fmt.Sprintf("0.0.0.0:%d", AgentContainerPort)), quote(strconv.Itoa(port))
	}
	items := []string{`"/local/codehub-agent/codehub"`, `"agent"`, `"-listen"`, listen, `"-exclude-port"`, program, `"--"`}
	for _, e := range entrypoint {
		items = append(items, quote(e))
	}
	return "[" + strings.Join(items, ", ") + "]"
}

// unquoted strips the quotes quote added, leaving the escaped body.
func unquoted(q string) string { return q[1 : len(q)-1] }
