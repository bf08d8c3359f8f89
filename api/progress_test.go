package api_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

// reports answers JobProgress with what a backend read last.
type reports struct {
	mu sync.Mutex
	m  map[string]controller.JobProgress
}

func (r *reports) set(wsID string, kind controller.JobKind, p controller.JobProgress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[wsID+"/"+string(kind)] = p
}

func (r *reports) JobProgress(_ context.Context, wsID string, kind controller.JobKind) (controller.JobProgress, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.m[wsID+"/"+string(kind)]
	if !ok {
		return controller.JobProgress{}, controller.ErrNoProgress
	}
	if p.Step == "broken" {
		return controller.JobProgress{}, errors.New("nomad: 500")
	}
	return p, nil
}

type progressJSON struct {
	Operation  string `json:"operation"`
	Step       string `json:"step"`
	BytesDone  *int64 `json:"bytes_done"`
	BytesTotal *int64 `json:"bytes_total"`
	Percent    *int   `json:"percent"`
}

func TestProgress(t *testing.T) {
	rep := &reports{m: map[string]controller.JobProgress{}}
	env := apitest.New(t, apitest.Config{Progress: rep})
	alice, bob := env.CreateUser("alice", false), env.CreateUser("bob", false)
	w := env.CreateWorkspace(alice, "dev")
	c := env.Login(alice)
	v := validate(t, c)

	get := func() progressJSON {
		t.Helper()
		res := env.Do(c, "GET", "/api/v1/workspaces/"+w.ID+"/progress", nil)
		if res.StatusCode != 200 {
			t.Fatalf("progress: %d %s", res.StatusCode, res.Body)
		}
		var p progressJSON
		res.Decode(t, &p)
		return p
	}
	unknown := func(p progressJSON) bool { return p.BytesDone == nil && p.BytesTotal == nil && p.Percent == nil }

	// Nothing runs: nothing to report, whatever a backend still holds.
	rep.set(w.ID, controller.JobArchive, controller.JobProgress{OpID: "old", Progress: archive.Progress{Step: "upload", Done: 1, Total: 1}})
	if p := get(); p.Operation != "NONE" || !unknown(p) {
		t.Fatalf("idle workspace: %+v", p)
	}
	op := "01JOPARCHIVE00000000000000"
	env.Exec(`UPDATE workspaces SET phase = 'STANDBY', operation = 'ARCHIVING', op_id = $2 WHERE id = $1`, w.ID, op)
	// A report of an earlier attempt's operation is not this one's.
	if p := get(); p.Operation != "ARCHIVING" || !unknown(p) {
		t.Fatalf("report of another operation shown: %+v", p)
	}
	// The home is still being sized: bytes, no total.
	rep.set(w.ID, controller.JobArchive, controller.JobProgress{OpID: op, Progress: archive.Progress{Step: "upload", Done: 4096, Total: -1}})
	if p := get(); p.Step != "upload" || p.BytesDone == nil || *p.BytesDone != 4096 || p.BytesTotal != nil || p.Percent != nil {
		t.Fatalf("sizing: %+v", p)
	}
	rep.set(w.ID, controller.JobArchive, controller.JobProgress{OpID: op, Progress: archive.Progress{Step: "upload", Done: 50 << 20, Total: 200 << 20}})
	if p := get(); p.BytesTotal == nil || *p.BytesTotal != 200<<20 || p.Percent == nil || *p.Percent != 25 {
		t.Fatalf("a quarter through: %+v", p)
	}
	// A backend that fails to answer costs the progress, not the request.
	rep.set(w.ID, controller.JobArchive, controller.JobProgress{OpID: op, Progress: archive.Progress{Step: "broken"}})
	if p := get(); p.Operation != "ARCHIVING" || !unknown(p) {
		t.Fatalf("backend error: %+v", p)
	}
	// A restore reads the restore job.
	env.Exec(`UPDATE workspaces SET phase = 'ARCHIVED', operation = 'RESTORING' WHERE id = $1`, w.ID)
	rep.set(w.ID, controller.JobRestore, controller.JobProgress{OpID: op, Progress: archive.Progress{Step: "download", Done: 3, Total: 3, Result: "OK"}})
	if p := get(); p.Operation != "RESTORING" || p.Step != "download" || p.Percent == nil || *p.Percent != 100 {
		t.Fatalf("restore: %+v", p)
	}

	if res := env.Do(env.Login(bob), "GET", "/api/v1/workspaces/"+w.ID+"/progress", nil); res.StatusCode != 403 {
		t.Errorf("another user's progress: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "GET", "/api/v1/workspaces/"+workspace.NewID()+"/progress", nil); res.StatusCode != 404 {
		t.Errorf("progress of an unknown workspace: %d %s", res.StatusCode, res.Body)
	}
	if v.seen[200] == 0 || v.seen[404] == 0 {
		t.Fatalf("validated statuses %v", v.seen)
	}
}

// TestBackupShown: an ARCHIVING that is a backup says so, so that clients
// do not tell its user the home is leaving its volume.
func TestBackupShown(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	w := env.CreateWorkspace(alice, "dev")
	c := env.Login(alice)
	validate(t, c)
	backup := func() (bool, string) {
		t.Helper()
		var v struct {
			Backup    bool   `json:"backup"`
			Operation string `json:"operation"`
		}
		env.Do(c, "GET", "/api/v1/workspaces/"+w.ID, nil).Decode(t, &v)
		return v.Backup, v.Operation
	}
	env.Exec(`UPDATE workspaces SET phase = 'STANDBY', operation = 'ARCHIVING', op_id = $2, op_backup = true WHERE id = $1`, w.ID, "01JOPBACKUP000000000000000")
	if b, op := backup(); !b || op != "ARCHIVING" {
		t.Fatalf("a backup under way: backup %v, operation %s", b, op)
	}
	env.Exec(`UPDATE workspaces SET op_backup = false WHERE id = $1`, w.ID)
	if b, _ := backup(); b {
		t.Fatal("an archive shown as a backup")
	}
}
