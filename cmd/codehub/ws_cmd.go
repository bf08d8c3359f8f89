package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/codehub-io/codehub/proxy"
)

// wsInfo is what the CLI reads of the API's Workspace object; -json
// prints the object as the server sent it.
type wsInfo struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	Image         string     `json:"image"`
	Phase         string     `json:"phase"`
	DesiredState  string     `json:"desired_state"`
	Operation     string     `json:"operation"`
	ErrorReason   *string    `json:"error_reason"`
	ErrorMessage  *string    `json:"error_message"`
	ErrorCount    int        `json:"error_count"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	DesiredBy     string     `json:"desired_by"`
	DesiredAt     *time.Time `json:"desired_at"`
	LastAccessAt  time.Time  `json:"last_access_at"`
	RecoveryPoint struct {
		ArchivedAt *time.Time `json:"archived_at"`
		Current    bool       `json:"current"`
	} `json:"recovery_point"`
	URL        string    `json:"url"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	Version    int64     `json:"version"`
	Conditions map[string]struct {
		Status             string    `json:"status"`
		Reason             string    `json:"reason"`
		Message            string    `json:"message"`
		LastTransitionTime time.Time `json:"last_transition_time"`
	} `json:"conditions"`
}

// wsRun runs a subcommand with its positional arguments.
type wsRun func(u *userCLI, c *client, args []string) error

// wsCommand is one "codehub ws" subcommand: its help, how many arguments
// it takes, and define, which declares its flags and returns its runner.
type wsCommand struct {
	summary string
	help    userCommand
	nargs   int
	define  func(fs *flag.FlagSet) wsRun
}

const workspaceArg = "WORKSPACE is the workspace's id or its name."

func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "Print the result as JSON, as the API returns it.")
}

func wsCommands() map[string]wsCommand {
	return map[string]wsCommand{
		"list": {summary: "List your workspaces", help: userCommand{
			usage: "codehub ws list [options]",
			about: "List your workspaces with their state.",
		}, define: func(fs *flag.FlagSet) wsRun {
			asJSON := jsonFlag(fs)
			return func(u *userCLI, c *client, _ []string) error { return u.wsList(c, *asJSON) }
		}},
		"create": {summary: "Create a workspace and start it", nargs: 1, help: userCommand{
			usage: "codehub ws create [options] NAME",
			about: `Create a workspace called NAME and start it. NAME is 1-63 lowercase
letters, digits and dashes. At your running limit it is created stopped,
and the server says so.`,
			extra: "Examples:\n\n  $ codehub ws create backend\n  $ codehub ws create backend -image codercom/code-server:4.100.3\n" +
				"  $ codehub ws create api -template service -param repo=https://git.example.com/api.git\n\n",
		}, define: func(fs *flag.FlagSet) wsRun {
			image := fs.String("image", "", "The container `image`, one the server allows; empty for the server's default.")
			desc := fs.String("description", "", "A `description` shown in the dashboard.")
			tmpl := fs.String("template", "", "The `template` to make it of, one the dashboard offers you; empty for the default.")
			var params paramFlags
			fs.Var(&params, "param", "A template parameter, `name=value`; repeat for more. Those left out take their defaults.")
			asJSON := jsonFlag(fs)
			return func(u *userCLI, c *client, args []string) error {
				return u.wsCreate(c, createRequest{name: args[0], image: *image, description: *desc, template: *tmpl, params: params}, *asJSON)
			}
		}},
		"prebuild": {summary: "Build a template's prebuilt home now (administrators)", nargs: 1, help: userCommand{
			usage: "codehub ws prebuild [options] TEMPLATE",
			about: `Ask the server to build a prebuilt home of TEMPLATE now, from its
repository's newest commit (docs/templates.md, "Prebuilt homes"), then
list the template's prebuilds. A build already asked for and not begun is
not asked for twice. Only administrators may.`,
		}, define: func(fs *flag.FlagSet) wsRun {
			asJSON := jsonFlag(fs)
			return func(u *userCLI, c *client, args []string) error { return u.wsPrebuild(c, args[0], *asJSON) }
		}},
		"ports":   wsPortsCommand(),
		"start":   desiredCommand("start", "Start a workspace", "Start WORKSPACE (restoring it first if it is archived).", "RUNNING"),
		"stop":    desiredCommand("stop", "Stop a workspace", "Stop WORKSPACE. Its home stays on its volume, ready to start again.", "STANDBY"),
		"archive": desiredCommand("archive", "Archive a workspace", "Archive WORKSPACE: its home goes to the archive store and its volume is released.", "ARCHIVED"),
		"open": {summary: "Print a workspace's address and open it", nargs: 1, help: userCommand{
			usage: "codehub ws open [options] WORKSPACE",
			about: "Print the address of WORKSPACE and open it in the browser, which starts\nit if it is stopped. " + workspaceArg,
		}, define: func(fs *flag.FlagSet) wsRun {
			printOnly := fs.Bool("print", false, "Only print the address; do not open a browser.")
			asJSON := jsonFlag(fs)
			return func(u *userCLI, c *client, args []string) error { return u.wsOpen(c, args[0], *printOnly, *asJSON) }
		}},
		"delete": {summary: "Delete a workspace and its home", nargs: 1, help: userCommand{
			usage: "codehub ws delete [options] WORKSPACE",
			about: "Delete WORKSPACE and its home directory. It asks you to type the\nworkspace's name first, unless -yes is given. " + workspaceArg,
		}, define: func(fs *flag.FlagSet) wsRun {
			yes := fs.Bool("yes", false, "Delete without asking.")
			return func(u *userCLI, c *client, args []string) error { return u.wsDelete(c, args[0], *yes) }
		}},
		"logs": {summary: "Show what happened to a workspace", nargs: 1, help: userCommand{
			usage: "codehub ws logs [options] WORKSPACE",
			about: `Show the log of WORKSPACE's last start or stop: when it was asked for,
each step as it completed (home ready, process running, editor answering),
failed attempts and the retries planned. With -f, keep printing changes as
they happen until the workspace is deleted or you press Ctrl-C.
` + workspaceArg,
		}, define: func(fs *flag.FlagSet) wsRun {
			follow := fs.Bool("f", false, "Follow: print changes as they happen.")
			asJSON := fs.Bool("json", false, "Print each entry as a JSON object on a line of its own.")
			return func(u *userCLI, c *client, args []string) error { return u.wsLogs(c, args[0], *follow, *asJSON) }
		}},
	}
}

func desiredCommand(name, summary, about, desired string) wsCommand {
	return wsCommand{summary: summary, nargs: 1, help: userCommand{
		usage: "codehub ws " + name + " [options] WORKSPACE",
		about: about + "\nThe command returns once the server took the request; follow the\nworkspace with \"codehub ws logs -f\". " + workspaceArg,
	}, define: func(fs *flag.FlagSet) wsRun {
		asJSON := jsonFlag(fs)
		return func(u *userCLI, c *client, args []string) error { return u.wsSetDesired(c, args[0], desired, *asJSON) }
	}}
}

const wsHelpTop = `Usage: codehub ws <subcommand> [options] [args]

  Work with your workspaces on the CodeHub server you logged in to with
  "codehub login". WORKSPACE is a workspace's id or its name.

Subcommands:

`

const wsHelpBottom = `
Run "codehub ws <subcommand> -h" for the options of a subcommand.

Examples:

  $ codehub ws create backend
  $ codehub ws list -json
  $ codehub ws logs -f backend

`

func printWsHelp(w io.Writer, cmds map[string]wsCommand) {
	fmt.Fprint(w, wsHelpTop)
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprint(w, wsHelpBottom+exitStatusHelp)
}

func runWs(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	u, stop := newUserCLI(stdin, stdout, stderr)
	defer stop()
	return u.ws(args)
}

// ws runs a "codehub ws" subcommand against the server logged in to.
func (u *userCLI) ws(args []string) int {
	cmds := wsCommands()
	if len(args) == 0 {
		printWsHelp(u.stderr, cmds)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		printWsHelp(u.stdout, cmds)
		return exitOK
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(u.stderr, "codehub ws: unknown subcommand %q\n\n", args[0])
		printWsHelp(u.stderr, cmds)
		return exitUsage
	}
	name := "ws " + args[0]
	fs := cmd.help.flagSet(name, u.stdout, u.stderr)
	run := cmd.define(fs)
	pos, help, err := parseArgs(fs, args[1:])
	switch {
	case help:
		return exitOK
	case err != nil:
		return exitUsage
	case len(pos) != cmd.nargs:
		fmt.Fprintf(u.stderr, "codehub %s: takes %d argument(s), got %d\nUsage: %s\n", name, cmd.nargs, len(pos), cmd.help.usage)
		return exitUsage
	}
	creds, err := loadCredentials()
	if err != nil {
		fmt.Fprintf(u.stderr, "codehub %s: %v\n", name, err)
		return exitStatus(err)
	}
	if err := run(u, newClient(creds), pos); err != nil {
		fmt.Fprintf(u.stderr, "codehub %s: %v\n", name, err)
		return exitStatus(err)
	}
	return exitOK
}

// listAll returns every workspace of the user, page by page, as the
// server sent each.
func (u *userCLI) listAll(c *client) ([]json.RawMessage, error) {
	var all []json.RawMessage
	after := ""
	for {
		path := "/api/v1/workspaces?limit=200"
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		var page struct {
			Workspaces []json.RawMessage `json:"workspaces"`
			Next       *string           `json:"next"`
		}
		if err := c.get(u.ctx, path, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Workspaces...)
		if page.Next == nil {
			return all, nil
		}
		after = *page.Next
	}
}

// resolve finds the user's workspace named by ref: an id, or a name.
func (u *userCLI) resolve(c *client, ref string) (wsInfo, error) {
	if proxy.ValidID(ref) {
		var ws wsInfo
		err := c.get(u.ctx, "/api/v1/workspaces/"+ref, &ws)
		if exitStatus(err) != exitNotFound {
			return ws, err
		}
		// A 26-character name looks like an id.
	}
	all, err := u.listAll(c)
	if err != nil {
		return wsInfo{}, err
	}
	for _, raw := range all {
		var ws wsInfo
		if err := decodeAnswer(raw, &ws); err != nil {
			return wsInfo{}, err
		}
		if ws.Name == ref {
			return ws, nil
		}
	}
	return wsInfo{}, fmt.Errorf("you have no workspace %q: %w", ref, errNotFound)
}

// printJSON writes raw, indented, as one document.
func (u *userCLI) printJSON(raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("the server's answer is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := u.stdout.Write(buf.Bytes())
	return err
}

// saved says what of the home S3 holds: what losing its node would cost.
func (ws wsInfo) saved() string {
	rp := ws.RecoveryPoint
	switch {
	case rp.ArchivedAt == nil:
		return "never"
	case rp.Current:
		return "all of it"
	}
	return "as of " + rp.ArchivedAt.Local().Format("2006-01-02 15:04")
}

func (u *userCLI) wsList(c *client, asJSON bool) error {
	all, err := u.listAll(c)
	if err != nil {
		return err
	}
	if asJSON {
		raw, err := json.Marshal(append([]json.RawMessage{}, all...))
		if err != nil {
			return err
		}
		return u.printJSON(raw)
	}
	tw := tabwriter.NewWriter(u.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPHASE\tDESIRED\tLAST USED\tSAVED TO S3")
	for _, raw := range all {
		var ws wsInfo
		if err := decodeAnswer(raw, &ws); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ws.ID, ws.Name, ws.Phase, ws.DesiredState,
			ws.LastAccessAt.Local().Format("2006-01-02 15:04"), ws.saved())
	}
	return tw.Flush()
}

// createRequest is what "ws create" asks for.
type createRequest struct {
	name, image, description, template string
	params                             paramFlags
}

// paramFlags are the -param name=value flags, in order.
type paramFlags []string

func (p *paramFlags) String() string { return strings.Join(*p, ",") }

func (p *paramFlags) Set(v string) error {
	if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
		return fmt.Errorf("%q is not name=value", v)
	}
	*p = append(*p, v)
	return nil
}

func (u *userCLI) wsCreate(c *client, req createRequest, asJSON bool) error {
	body := map[string]any{"name": req.name, "image": req.image, "description": req.description}
	if req.template != "" {
		body["template"] = req.template
	}
	if len(req.params) > 0 {
		values, err := u.paramValues(c, req.template, req.params)
		if err != nil {
			return err
		}
		body["parameters"] = values
	}
	res, err := c.do(u.ctx, http.MethodPost, "/api/v1/workspaces", body)
	if err != nil {
		return err
	}
	if notice := res.header.Get("CodeHub-Notice"); notice != "" {
		fmt.Fprintln(u.stderr, notice)
	}
	if asJSON {
		return u.printJSON(res.body)
	}
	var ws wsInfo
	if err := decodeAnswer(res.body, &ws); err != nil {
		return err
	}
	how := "it is starting"
	if ws.DesiredState != "RUNNING" {
		how = "stopped"
	}
	fmt.Fprintf(u.stdout, "Created workspace %s (%s), %s.\n", ws.Name, ws.ID, how)
	return nil
}

// paramValues types each name=value by the template's parameters, as
// the server states them: a number or a boolean is sent as one. A name
// the template lacks is left to the server to refuse.
func (u *userCLI) paramValues(c *client, template string, params []string) (map[string]any, error) {
	if template == "" {
		template = "default"
	}
	var list struct {
		Templates []struct {
			Name       string `json:"name"`
			Parameters struct {
				Properties map[string]struct {
					Type string `json:"type"`
				} `json:"properties"`
			} `json:"parameters"`
		} `json:"templates"`
	}
	if err := c.get(u.ctx, "/api/v1/templates", &list); err != nil {
		return nil, err
	}
	values := make(map[string]any, len(params))
	for _, kv := range params {
		name, text, _ := strings.Cut(kv, "=")
		values[name] = text
		for _, t := range list.Templates {
			if t.Name != template {
				continue
			}
			switch t.Parameters.Properties[name].Type {
			case "number":
				n, err := strconv.ParseFloat(text, 64)
				if err != nil {
					return nil, &usageError{fmt.Sprintf("-param %s: %q is not a number", name, text)}
				}
				values[name] = n
			case "boolean":
				b, err := strconv.ParseBool(text)
				if err != nil {
					return nil, &usageError{fmt.Sprintf("-param %s: %q is not true or false", name, text)}
				}
				values[name] = b
			}
		}
	}
	return values, nil
}

// desiredWords says what asking for a desired state does.
var desiredWords = map[string]string{"RUNNING": "start", "STANDBY": "stop", "ARCHIVED": "archive"}

func (u *userCLI) wsSetDesired(c *client, ref, desired string, asJSON bool) error {
	ws, err := u.resolve(c, ref)
	if err != nil {
		return err
	}
	res, err := c.do(u.ctx, http.MethodPatch, "/api/v1/workspaces/"+ws.ID, map[string]string{"desired_state": desired})
	if err != nil {
		return err
	}
	if asJSON {
		return u.printJSON(res.body)
	}
	if err := decodeAnswer(res.body, &ws); err != nil {
		return err
	}
	fmt.Fprintf(u.stdout, "Asked workspace %s (%s) to %s; it is %s. Follow it with \"codehub ws logs -f %s\".\n",
		ws.Name, ws.ID, desiredWords[desired], ws.Phase, ws.Name)
	return nil
}

func (u *userCLI) wsOpen(c *client, ref string, printOnly, asJSON bool) error {
	ws, err := u.resolve(c, ref)
	if err != nil {
		return err
	}
	if asJSON {
		raw, err := json.Marshal(map[string]string{"id": ws.ID, "name": ws.Name, "url": ws.URL})
		if err != nil {
			return err
		}
		if err := u.printJSON(raw); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(u.stdout, ws.URL)
	}
	if printOnly {
		return nil
	}
	if err := u.openURL(ws.URL); err != nil {
		fmt.Fprintf(u.stderr, "Could not open a browser (%v); open the address yourself.\n", err)
	}
	return nil
}

func (u *userCLI) wsDelete(c *client, ref string, yes bool) error {
	ws, err := u.resolve(c, ref)
	if err != nil {
		return err
	}
	if !yes {
		fmt.Fprintf(u.stderr, "Deleting workspace %s (%s) removes its home directory. Type its name to confirm: ", ws.Name, ws.ID)
		line, err := bufio.NewReader(io.LimitReader(u.stdin, 256)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read the confirmation: %w", err)
		}
		if strings.TrimSpace(line) != ws.Name {
			fmt.Fprintln(u.stderr)
			return &usageError{"not confirmed; nothing was deleted (pass -yes to delete without asking)"}
		}
	}
	if _, err := c.do(u.ctx, http.MethodDelete, "/api/v1/workspaces/"+ws.ID, nil); err != nil {
		return err
	}
	fmt.Fprintf(u.stdout, "Deleted workspace %s (%s).\n", ws.Name, ws.ID)
	return nil
}

// usageError is a refusal of the command itself, before the server was
// asked: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// prebuildInfo is what the CLI reads of the API's Prebuild object.
type prebuildInfo struct {
	ID         string     `json:"id"`
	Template   string     `json:"template"`
	Version    string     `json:"version"`
	Status     string     `json:"status"`
	Commit     *string    `json:"commit"`
	Error      string     `json:"error"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

func (u *userCLI) wsPrebuild(c *client, template string, asJSON bool) error {
	res, err := c.do(u.ctx, http.MethodPost, "/api/v1/admin/templates/"+url.PathEscape(template)+"/prebuilds", nil)
	if err != nil {
		return err
	}
	if asJSON {
		return u.printJSON(res.body)
	}
	var asked prebuildInfo
	if err := decodeAnswer(res.body, &asked); err != nil {
		return err
	}
	fmt.Fprintf(u.stdout, "prebuild %s of template %s asked for; the server starts it once the template's current build is done\n\n", asked.ID, template)
	var usage struct {
		Prebuilds []prebuildInfo `json:"prebuilds"`
	}
	if err := c.get(u.ctx, "/api/v1/admin/templates", &usage); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(u.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tVERSION\tCOMMIT\tSTATUS\tASKED\tFINISHED\tERROR")
	for _, p := range usage.Prebuilds {
		if p.Template != template {
			continue
		}
		finished := "-"
		if p.FinishedAt != nil {
			finished = p.FinishedAt.Local().Format("2006-01-02 15:04")
		}
		commit := "-"
		if p.Commit != nil {
			commit = (*p.Commit)[:min(12, len(*p.Commit))]
		}
		why, _, _ := strings.Cut(p.Error, "\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Version, commit, p.Status, p.CreatedAt.Local().Format("2006-01-02 15:04"), finished, why)
	}
	return tw.Flush()
}
