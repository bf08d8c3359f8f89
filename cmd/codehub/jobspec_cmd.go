package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/oklog/ulid/v2"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/jobspecs"
	"github.com/codehub-io/codehub/nomad"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/workspace"
)

// runJobspec implements `codehub jobspec render`: it prints the HCL the
// Nomad backend would submit for a workspace, exactly as submitted (the
// same renderer and values), which holds no secret.
func runJobspec(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "render" {
		fmt.Fprintln(stderr, "usage: codehub jobspec render -config FILE -kind workspace|archive|restore -workspace ID [-template NAME]")
		return 2
	}
	fs := flag.NewFlagSet("jobspec render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "codehub.hcl", "configuration file")
	kindName := fs.String("kind", "workspace", "workspace, archive or restore")
	wsID := fs.String("workspace", "", "workspace id (required)")
	image := fs.String("image", "", "workspace image (default: the template's image)")
	templateName := fs.String("template", config.DefaultTemplate, "template of the workspace, with its parameters' defaults")
	owner := fs.String("owner", "", "owner id shown in the job's meta")
	opID := fs.String("op-id", "", "archive/restore operation id (default: a new one)")
	attempt := fs.Int("attempt", 1, "archive/restore attempt")
	home := fs.String("home", "", "home directory as the task sees it (raw_exec: the volume's host path; default: read from Nomad)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	// What the product would never submit is refused rather than rendered.
	kind, err := jobspecs.ParseKind(*kindName)
	switch {
	case err != nil:
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *wsID == "":
		err = errors.New("-workspace is required")
	case !proxy.ValidID(*wsID):
		err = fmt.Errorf("-workspace %q is not a workspace id (26 lowercase characters)", *wsID)
	case *attempt < 1:
		err = errors.New("-attempt must be at least 1")
	}
	if err != nil {
		fmt.Fprintf(stderr, "codehub jobspec render: %v\n", err)
		return 2
	}

	hcl, err := renderJobspec(renderRequest{
		configPath: *configPath, kind: kind, wsID: *wsID, image: *image, template: *templateName, owner: *owner,
		opID: *opID, attempt: *attempt, home: *home,
	})
	if err != nil {
		fmt.Fprintf(stderr, "codehub jobspec render: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, hcl)
	return 0
}

type renderRequest struct {
	configPath string
	kind       jobspecs.Kind
	wsID       string
	image      string
	template   string
	owner      string
	opID       string
	attempt    int
	home       string
}

func renderJobspec(req renderRequest) (string, error) {
	cfg, err := config.Load(req.configPath)
	if err != nil {
		return "", err
	}
	if cfg.Backend == nil || cfg.Backend.Nomad == nil {
		return "", fmt.Errorf("%s: jobspecs exist only for the nomad backend", req.configPath)
	}
	checksum, err := artifactChecksum(cfg)
	if err != nil {
		return "", err
	}
	opts, err := nomad.OptionsFromConfig(cfg, checksum)
	if err != nil {
		return "", err
	}
	if err := withAgent(cfg, &opts); err != nil {
		return "", err
	}
	renderer, err := jobspecs.NewRenderer(cfg.Jobspecs.Dir)
	if err != nil {
		return "", err
	}
	client, err := nomad.NewClient(cfg.Backend.Nomad, nil)
	if err != nil {
		return "", err
	}
	backend := nomad.New(hclog.NewNullLogger(), client, opts, renderer)

	home := req.home
	if home == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		home, err = backend.HomeDir(ctx, req.wsID)
		if err != nil {
			return "", fmt.Errorf("%w (pass -home to render without Nomad)", err)
		}
	}

	if req.kind == jobspecs.KindWorkspace {
		spec, err := templateSpec(cfg, req)
		if err != nil {
			return "", err
		}
		return backend.RenderWorkspace(spec, home)
	}
	opID := req.opID
	if opID == "" {
		opID = strings.ToLower(ulid.Make().String())
	}
	job := controller.JobSpec{
		WorkspaceID: req.wsID,
		OpID:        opID,
		ArchiveKey:  fmt.Sprintf("archives/%s/%s/home.tar.zst", req.wsID, opID),
		Attempt:     req.attempt,
	}
	return backend.RenderBatch(controller.JobKind(req.kind), job, home)
}

// withAgent renders workspaces under the agent as the server does. Its
// secrets go to the job's variable, never into the HCL, so keys derived
// from a throwaway key render the same text.
func withAgent(cfg *config.Config, opts *nomad.Options) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	keys, err := agent.NewKeys(key)
	if err != nil {
		return err
	}
	opts.Agent = keys
	if cfg.Backend.Nomad.Driver != config.DriverDocker {
		return nil
	}
	self, err := newSelfBinary()
	if err != nil {
		return err
	}
	opts.AgentArchiveURL = strings.TrimSuffix(cfg.PublicURL, "/") + "/dl/codehub.tar"
	opts.AgentArchiveChecksum = self.tarChecksum
	return nil
}

// artifactChecksum is the checksum of this binary when batch jobs fetch it
// from the control plane, as the server announces it.
func artifactChecksum(cfg *config.Config) (string, error) {
	n := cfg.Backend.Nomad
	if n.Driver == config.DriverDocker || n.CodehubPath != "" {
		return "", nil
	}
	self, err := newSelfBinary()
	if err != nil {
		return "", err
	}
	return self.checksum, nil
}

// templateSpec is the spec a workspace of req.template starts with when
// its owner keeps every parameter's default.
func templateSpec(cfg *config.Config, req renderRequest) (controller.WorkspaceSpec, error) {
	t, ok := cfg.Template(req.template)
	if !ok {
		return controller.WorkspaceSpec{}, fmt.Errorf("no template %q in %s (it has %s)", req.template, req.configPath, strings.Join(cfg.TemplateNames(), ", "))
	}
	values, err := t.ParameterValues(nil)
	if err != nil {
		return controller.WorkspaceSpec{}, fmt.Errorf("template %q: parameter %w (a required parameter has no default to render with)", t.Name, err)
	}
	w := workspace.Workspace{ID: req.wsID, OwnerID: req.owner, Image: req.image, Template: t.Name, Parameters: values}
	return controller.SpecFromTemplate(w, t, cfg.Workspace.UpstreamAuth), nil
}
