package controller

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// A template change reaches a workspace at its next start, never while it
// runs; the row records the version each start ran.
func TestTemplateChangeTakesEffectAtNextStart(t *testing.T) {
	h := newHarness(t)
	cfg := config.Default()
	cfg.Templates = []*config.Template{{Name: "go", CPU: 1000, Env: map[string]string{"GOFLAGS": "-mod=mod"},
		Parameters: []*config.Parameter{{Name: "editor", Options: []string{"vim", "emacs"}}}}}
	h.svc = workspace.NewService(hclog.NewNullLogger(), h.pool, workspace.Options{Templates: cfg,
		Policy: workspace.Policy{StandbyTTL: cfg.Workspace.StandbyTTL, ArchiveTTL: cfg.Workspace.ArchiveTTL}})
	ccfg := ConfigFrom(cfg)
	c := NewWorkspaceController(hclog.NewNullLogger(), h.pool, h.backend, h.backend.store, ccfg)
	c.SetClock(h.now)

	dots, token := "https://example.com/dots.git", "s3cret"
	if _, err := store.SetFirstStartSettings(context.Background(), h.pool, h.owner, &dots, &token); err != nil {
		t.Fatal(err)
	}
	created, err := h.svc.Create(context.Background(), workspace.CreateRequest{OwnerID: h.owner, Name: "dev",
		Template: "go", Parameters: map[string]any{"editor": "vim"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ID
	h.converge(c)
	first := h.expect(id, workspace.PhaseRunning, "volume", "container")
	v1, _ := cfg.Template("go")
	spec := h.backend.specOf(id)
	if spec.Dotfiles != dots || spec.GitToken != token {
		t.Errorf("first start without the owner's settings: dotfiles %q token %q", spec.Dotfiles, spec.GitToken)
	}
	if spec.CPU != 1000 || spec.Env["GOFLAGS"] != "-mod=mod" || spec.UserEnv["CODEHUB_PARAM_EDITOR"] != "vim" || first.TemplateVersion != v1.Version() {
		t.Fatalf("first start: spec %+v, version %q want %q", spec, first.TemplateVersion, v1.Version())
	}

	cfg.Templates[0].CPU = 3000
	v2, _ := cfg.Template("go")
	starts := h.backend.count("StartWorkspace")
	h.tick(c, 3)
	if got := h.expect(id, workspace.PhaseRunning, "volume", "container"); got.TemplateVersion != v1.Version() ||
		h.backend.count("StartWorkspace") != starts || h.backend.specOf(id).CPU != 1000 {
		t.Fatalf("a running workspace took the change: version %q, %d more starts", got.TemplateVersion, h.backend.count("StartWorkspace")-starts)
	}

	h.setDesired(id, workspace.DesiredStandby)
	h.converge(c)
	h.setDesired(id, workspace.DesiredRunning)
	h.converge(c)
	if got := h.expect(id, workspace.PhaseRunning, "volume", "container"); got.TemplateVersion != v2.Version() || h.backend.specOf(id).CPU != 3000 {
		t.Fatalf("next start: version %q want %q, cpu %d", got.TemplateVersion, v2.Version(), h.backend.specOf(id).CPU)
	}

	// A template the operator removed fails the start for good.
	cfg.Templates = nil
	h.setDesired(id, workspace.DesiredStandby)
	h.converge(c)
	h.setDesired(id, workspace.DesiredRunning)
	h.converge(c)
	got := h.row(id)
	if got.Phase != workspace.PhaseError || deref(got.ErrorReason) != workspace.ReasonStartFailed {
		t.Errorf("start of a removed template: %s %s %s", got.Phase, deref(got.ErrorReason), deref(got.ErrorMessage))
	}
}
