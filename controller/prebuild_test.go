package controller

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/codehub-io/codehub/config"

	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

func TestPlanPrebuilds(t *testing.T) {
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *time.Time { v := now.Add(-ago); return &v }
	cfg := PrebuildConfig{MaxBuilding: 2, BuildTimeout: time.Hour, KeepFailed: 2}
	tmpl := prebuildTemplate{Name: "web", Version: "v2", Keep: 2, Prebuilds: true}
	daily := tmpl
	daily.Every = 24 * time.Hour
	builder := func(phase workspace.Phase, desired workspace.DesiredState, op workspace.Operation) *workspace.Workspace {
		return &workspace.Workspace{ID: "ws-b", Phase: phase, DesiredState: desired, Operation: op}
	}
	row := func(id, status, version string, finished *time.Time, b *workspace.Workspace) prebuildRow {
		r := prebuildRow{Prebuild: store.Prebuild{ID: id, Template: "web", Status: status, Version: version, FinishedAt: finished, StartedAt: at(10 * time.Minute)}, Builder: b}
		if b != nil {
			r.WorkspaceID = &b.ID
		}
		return r
	}
	const commit = "0123456789abcdef0123456789abcdef01234567"
	key := "archives/ws-b/op/web/v2/" + commit + "/home.tar.zst"
	archived := builder(workspace.PhaseArchived, workspace.DesiredArchived, workspace.OpNone)
	archived.ArchiveKey = &key
	failedWS := builder(workspace.PhaseError, workspace.DesiredArchived, workspace.OpNone)
	msg := "archive job failed, BUILD_FAILED: npm ci exited 1"
	failedWS.ErrorMessage = &msg

	type want struct {
		kind prebuildKind
		id   string
	}
	for _, c := range []struct {
		name      string
		templates []prebuildTemplate
		rows      []prebuildRow
		cfg       PrebuildConfig
		want      []want
	}{
		{"a new template builds", []prebuildTemplate{tmpl}, nil, cfg, []want{{prebuildBuild, ""}}},
		{"a request builds under its id", []prebuildTemplate{tmpl}, []prebuildRow{row("r", store.PrebuildRequested, "v2", nil, nil), row("a", store.PrebuildReady, "v2", at(time.Hour), nil)}, cfg, []want{{prebuildBuild, "r"}}},
		{"one build at a time per template", []prebuildTemplate{tmpl}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, builder(workspace.PhaseStandby, workspace.DesiredArchived, workspace.OpArchiving)), row("r", store.PrebuildRequested, "v2", nil, nil)}, cfg, nil},
		{"the bound on builds holds across templates", []prebuildTemplate{tmpl, {Name: "api", Version: "v1", Keep: 1, Prebuilds: true}}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, builder(workspace.PhaseStandby, workspace.DesiredArchived, workspace.OpArchiving))}, PrebuildConfig{MaxBuilding: 1, BuildTimeout: time.Hour, KeepFailed: 2}, nil},
		{"a builder being made waits", []prebuildTemplate{tmpl}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, builder(workspace.PhasePending, workspace.DesiredArchived, workspace.OpProvisioning))}, cfg, nil},
		{"a builder whose placement failed is retried", []prebuildTemplate{tmpl}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, func() *workspace.Workspace {
			w := builder(workspace.PhasePending, workspace.DesiredArchived, workspace.OpNone)
			reason := workspace.ReasonUnschedulable
			w.ErrorReason, w.ErrorCount = &reason, 1
			return w
		}())}, cfg, nil},
		{"a builder building waits", []prebuildTemplate{tmpl}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, builder(workspace.PhaseStandby, workspace.DesiredArchived, workspace.OpArchiving))}, cfg, nil},
		{"an archived builder is ready", []prebuildTemplate{tmpl}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, archived)}, cfg, []want{{prebuildReady, "b"}}},
		{"a builder whose build failed fails the build", []prebuildTemplate{tmpl}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, failedWS)}, cfg, []want{{prebuildFail, "b"}}},
		{"a builder in error after its retries fails the build", []prebuildTemplate{tmpl}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, func() *workspace.Workspace {
			w := builder(workspace.PhaseError, workspace.DesiredArchived, workspace.OpNone)
			reason := workspace.ReasonUnreachable
			w.ErrorReason, w.ErrorCount = &reason, workspace.MaxErrorCount
			return w
		}())}, cfg, []want{{prebuildFail, "b"}}},
		{"a deleted builder fails the build", []prebuildTemplate{tmpl}, []prebuildRow{row("b", store.PrebuildBuilding, "v2", nil, nil)}, cfg, []want{{prebuildFail, "b"}}},
		{"a failure is not retried by itself", []prebuildTemplate{tmpl}, []prebuildRow{row("f", store.PrebuildFailed, "v2", at(time.Minute), nil), row("a", store.PrebuildReady, "v2", at(time.Hour), nil)}, cfg, nil},
		{"a failure is retried at the schedule", []prebuildTemplate{daily}, []prebuildRow{row("f", store.PrebuildFailed, "v2", at(25*time.Hour), nil)}, cfg, []want{{prebuildBuild, ""}}},
		{"fresh enough: nothing", []prebuildTemplate{daily}, []prebuildRow{row("a", store.PrebuildReady, "v2", at(time.Hour), nil)}, cfg, nil},
		{"stale: rebuild", []prebuildTemplate{daily}, []prebuildRow{row("a", store.PrebuildReady, "v2", at(25*time.Hour), nil)}, cfg, []want{{prebuildBuild, ""}}},
		{"a new version builds", []prebuildTemplate{tmpl}, []prebuildRow{row("o", store.PrebuildReady, "v1", at(time.Hour), nil)}, cfg, []want{{prebuildBuild, ""}}},
		{"the old version goes once the new is ready", []prebuildTemplate{tmpl}, []prebuildRow{row("n", store.PrebuildReady, "v2", at(time.Minute), nil), row("o", store.PrebuildReady, "v1", at(time.Hour), nil)}, cfg, []want{{prebuildDrop, "o"}}},
		{"retention keeps the newest", []prebuildTemplate{tmpl}, []prebuildRow{row("c", store.PrebuildReady, "v2", at(time.Minute), nil), row("b", store.PrebuildReady, "v2", at(time.Hour), nil), row("a", store.PrebuildReady, "v2", at(2*time.Hour), archived)}, cfg, []want{{prebuildDrop, "a"}}},
		{"old failures go", []prebuildTemplate{tmpl}, []prebuildRow{row("r", store.PrebuildReady, "v2", at(time.Minute), nil), row("f3", store.PrebuildFailed, "v2", at(time.Hour), nil), row("f2", store.PrebuildFailed, "v2", at(2*time.Hour), nil), row("f1", store.PrebuildFailed, "v2", at(3*time.Hour), nil)}, cfg, []want{{prebuildDrop, "f1"}}},
		{"a template without prebuilds drops them", nil, []prebuildRow{row("a", store.PrebuildReady, "v2", at(time.Hour), archived)}, cfg, []want{{prebuildDrop, "a"}}},
		{"a build past its timeout fails", []prebuildTemplate{tmpl}, []prebuildRow{func() prebuildRow {
			r := row("b", store.PrebuildBuilding, "v2", nil, builder(workspace.PhaseStandby, workspace.DesiredArchived, workspace.OpArchiving))
			r.StartedAt = at(2 * time.Hour)
			return r
		}()}, cfg, []want{{prebuildFail, "b"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []want
			for _, a := range planPrebuilds(c.templates, c.rows, nil, now, c.cfg) {
				got = append(got, want{a.Kind, a.PrebuildID})
				if a.Kind == prebuildReady && (a.ArchiveKey != key || a.Commit != commit) {
					t.Errorf("ready with key %q, commit %q", a.ArchiveKey, a.Commit)
				}
				if a.Kind == prebuildFail && a.PrebuildID == "b" && c.rows[0].Builder == failedWS && a.Message != msg {
					t.Errorf("failure says %q", a.Message)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("plan %v, want %v", got, c.want)
			}
		})
	}
}

func TestPlanPool(t *testing.T) {
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	cfg := PrebuildConfig{MaxBuilding: 2, BuildTimeout: time.Hour, KeepFailed: 2, MaxFilling: 2}
	web := prebuildTemplate{Name: "web", Version: "v2", Keep: 2, Prebuilds: true, Warm: 2}
	plain := prebuildTemplate{Name: "plain", Version: "p1", Warm: 1}
	ready := prebuildRow{Prebuild: store.Prebuild{ID: "pb2", Template: "web", Status: store.PrebuildReady, Version: "v2", FinishedAt: &now}}
	home := func(id, template, version, prebuild string, phase workspace.Phase, op workspace.Operation) workspace.Workspace {
		w := workspace.Workspace{ID: id, PoolOf: &template, TemplateVersion: version, Phase: phase, Operation: op}
		if prebuild != "" {
			w.FromPrebuild = &prebuild
		}
		return w
	}
	standing := func(id, prebuild string) workspace.Workspace {
		return home(id, "web", "v2", prebuild, workspace.PhaseStandby, workspace.OpNone)
	}
	type want struct {
		kind prebuildKind
		ws   string
	}
	for _, c := range []struct {
		name      string
		templates []prebuildTemplate
		rows      []prebuildRow
		pool      []workspace.Workspace
		cfg       PrebuildConfig
		want      []want
	}{
		{"an empty pool fills, bounded", []prebuildTemplate{web, plain}, []prebuildRow{ready}, nil, cfg, []want{{poolFill, ""}, {poolFill, ""}}},
		{"full: nothing", []prebuildTemplate{web}, []prebuildRow{ready}, []workspace.Workspace{standing("a", "pb2"), standing("b", "pb2")}, cfg, nil},
		{"homes being made count", []prebuildTemplate{web}, []prebuildRow{ready}, []workspace.Workspace{standing("a", "pb2"), home("b", "web", "v2", "pb2", workspace.PhaseArchived, workspace.OpRestoring)}, cfg, nil},
		{"a claimed home is refilled", []prebuildTemplate{web}, []prebuildRow{ready}, []workspace.Workspace{standing("a", "pb2")}, cfg, []want{{poolFill, ""}}},
		{"the bound counts homes already filling", []prebuildTemplate{web, plain}, []prebuildRow{ready}, []workspace.Workspace{
			home("a", "web", "v2", "pb2", workspace.PhasePending, workspace.OpProvisioning),
			home("b", "web", "v2", "pb2", workspace.PhaseArchived, workspace.OpRestoring)}, cfg, nil},
		{"without a prebuilt home yet: empty homes", []prebuildTemplate{plain}, nil, nil, cfg, []want{{poolFill, ""}}},
		{"a new prebuilt home: fresh ones first, then the old go", []prebuildTemplate{web}, []prebuildRow{ready}, []workspace.Workspace{standing("a", "pb1"), standing("b", "pb1")}, cfg, []want{{poolFill, ""}, {poolFill, ""}}},
		{"fresh ones stand by: the old go", []prebuildTemplate{web}, []prebuildRow{ready}, []workspace.Workspace{standing("a", "pb1"), standing("b", "pb2"), standing("c", "pb2")}, cfg, []want{{poolDrop, "a"}}},
		{"another version goes at once", []prebuildTemplate{web}, []prebuildRow{ready}, []workspace.Workspace{home("a", "web", "v1", "pb2", workspace.PhaseStandby, workspace.OpNone), standing("b", "pb2")}, cfg, []want{{poolDrop, "a"}, {poolFill, ""}}},
		{"a failed home goes", []prebuildTemplate{web}, []prebuildRow{ready}, []workspace.Workspace{home("a", "web", "v2", "pb2", workspace.PhaseError, workspace.OpNone), standing("b", "pb2"), standing("c", "pb2")}, cfg, []want{{poolDrop, "a"}}},
		{"a smaller pool drops the newest, unready first", []prebuildTemplate{{Name: "web", Version: "v2", Prebuilds: true, Keep: 2, Warm: 1}}, []prebuildRow{ready}, []workspace.Workspace{standing("a", "pb2"), home("b", "web", "v2", "pb2", workspace.PhaseArchived, workspace.OpRestoring), standing("c", "pb2")}, cfg, []want{{poolDrop, "b"}, {poolDrop, "c"}}},
		{"a template without a pool empties it", nil, nil, []workspace.Workspace{standing("a", "pb2")}, cfg, []want{{poolDrop, "a"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []want
			for _, a := range planPrebuilds(c.templates, c.rows, c.pool, now, c.cfg) {
				if a.Kind == poolFill || a.Kind == poolDrop {
					got = append(got, want{a.Kind, a.WorkspaceID})
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("plan %v, want %v", got, c.want)
			}
		})
	}
}

// passCounter is a database that fails every read, counting the passes
// that asked.
type passCounter struct{ passes chan struct{} }

var errNoDatabase = errors.New("no database in this test")

func (p *passCounter) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNoDatabase
}

func (p *passCounter) Query(context.Context, string, ...any) (pgx.Rows, error) {
	p.passes <- struct{}{}
	return nil, errNoDatabase
}

func (p *passCounter) QueryRow(context.Context, string, ...any) pgx.Row { return nil }

// TestPrebuildRunnerWakes holds the runner to looking soon after a wake
// (a workspace changed), not only at its interval, and to one pass for a
// burst of wakes.
func TestPrebuildRunnerWakes(t *testing.T) {
	db := &passCounter{passes: make(chan struct{}, 16)}
	r := NewPrebuildRunner(hclog.NewNullLogger(), db, nil, config.Default(), PrebuildConfig{Interval: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-db.passes // the first pass, at once
	for range 5 {
		r.Wake()
	}
	select {
	case <-db.passes:
	case <-time.After(10 * prebuildWakeGap):
		t.Fatal("no pass after a wake")
	}
	select {
	case <-db.passes:
		t.Fatal("a burst of wakes made more than one pass")
	case <-time.After(3 * prebuildWakeGap):
	}
}
