package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

const testImage = "codercom/code-server:4.100.3"

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := store.Open(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	return pool
}

func newService(t *testing.T, pool *pgxpool.Pool, opts workspace.Options) *workspace.Service {
	t.Helper()
	if opts.DefaultImage == "" {
		opts.DefaultImage = testImage
	}
	return workspace.NewService(hclog.NewNullLogger(), pool, opts)
}

func addUser(t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	id := workspace.NewID()
	if _, err := pool.Exec(context.Background(),
		`INSERT INTO users (id, username, password_hash) VALUES ($1, $2, 'x')`, id, name); err != nil {
		t.Fatal(err)
	}
	return id
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func mustCreate(t *testing.T, svc *workspace.Service, owner, name string) workspace.Workspace {
	t.Helper()
	w, err := svc.Create(context.Background(), workspace.CreateRequest{OwnerID: owner, Name: name})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return w.Workspace
}

var ulidRE = regexp.MustCompile(`^[0-9a-hjkmnp-tv-z]{26}$`)

func TestCreateDefaults(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	owner := addUser(t, pool, "alice")
	w := mustCreate(t, svc, owner, "dev")
	if !ulidRE.MatchString(w.ID) {
		t.Errorf("id %q is not a lowercase ULID", w.ID)
	}
	if w.DesiredState != workspace.DesiredRunning || w.Phase != workspace.PhasePending ||
		w.Operation != workspace.OpNone || svc.Image(w) != testImage || w.Template != "default" {
		t.Errorf("new workspace = desired %s phase %s op %s image %s template %s", w.DesiredState, w.Phase, w.Operation, svc.Image(w), w.Template)
	}
	got, err := svc.Get(context.Background(), w.ID)
	if err != nil || got.ID != w.ID || got.Name != "dev" {
		t.Fatalf("get = %+v, %v", got, err)
	}
}

func TestCreateValidation(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{AllowedImages: []string{"other:1"}})
	owner := addUser(t, pool, "alice")
	long := make([]byte, 64)
	for i := range long {
		long[i] = 'a'
	}
	cases := []struct {
		name  string
		req   workspace.CreateRequest
		field string
	}{
		{"empty name", workspace.CreateRequest{OwnerID: owner}, "name"},
		{"upper case", workspace.CreateRequest{OwnerID: owner, Name: "Dev"}, "name"},
		{"leading dash", workspace.CreateRequest{OwnerID: owner, Name: "-dev"}, "name"},
		{"trailing dash", workspace.CreateRequest{OwnerID: owner, Name: "dev-"}, "name"},
		{"64 chars", workspace.CreateRequest{OwnerID: owner, Name: string(long)}, "name"},
		{"dot", workspace.CreateRequest{OwnerID: owner, Name: "a.b"}, "name"},
		{"image not allowed", workspace.CreateRequest{OwnerID: owner, Name: "dev", Image: "evil:1"}, "image"},
		{"no owner", workspace.CreateRequest{Name: "dev"}, "owner_id"},
		{"unknown owner", workspace.CreateRequest{OwnerID: workspace.NewID(), Name: "dev"}, "owner_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := svc.Create(context.Background(), c.req)
			var ie *workspace.InputError
			if !errors.Is(err, workspace.ErrInvalidInput) || !errors.As(err, &ie) || ie.Field != c.field {
				t.Fatalf("err = %v, want input error on %s", err, c.field)
			}
		})
	}
	if _, err := svc.Create(context.Background(), workspace.CreateRequest{OwnerID: owner, Name: string(long[:63]), Image: "other:1"}); err != nil {
		t.Fatalf("63-char name with allowed image: %v", err)
	}
}

func TestNameTakenUntilDeleted(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	alice, bob := addUser(t, pool, "alice"), addUser(t, pool, "bob")
	w := mustCreate(t, svc, alice, "dev")
	if _, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: alice, Name: "dev"}); !errors.Is(err, workspace.ErrNameTaken) {
		t.Fatalf("duplicate create: %v", err)
	}
	mustCreate(t, svc, bob, "dev")
	other := mustCreate(t, svc, alice, "other")
	name := "dev"
	if _, err := svc.Update(ctx, other.ID, workspace.UpdateRequest{Name: &name}); !errors.Is(err, workspace.ErrNameTaken) {
		t.Fatalf("rename onto taken name: %v", err)
	}
	if err := svc.Delete(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Update(ctx, other.ID, workspace.UpdateRequest{Name: &name}); err != nil {
		t.Fatalf("rename onto name of a deleted workspace: %v", err)
	}
}

func TestDeletedIsNotFound(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	w := mustCreate(t, svc, addUser(t, pool, "alice"), "dev")
	// An operation in flight does not block deletion.
	exec(t, pool, `UPDATE workspaces SET operation = 'STARTING' WHERE id = $1`, w.ID)
	if err := svc.Delete(ctx, w.ID); err != nil {
		t.Fatalf("delete with operation in flight: %v", err)
	}
	if _, err := svc.Get(ctx, w.ID); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
	if err := svc.Delete(ctx, w.ID); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}
	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredStandby, workspace.CauseUser); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("set desired of deleted: %v", err)
	}
	if ws, err := svc.List(ctx, workspace.ListFilter{}); err != nil || len(ws) != 0 {
		t.Errorf("list = %d workspaces, %v; want none", len(ws), err)
	}
	var desired string
	if err := pool.QueryRow(ctx, `SELECT desired_state FROM workspaces WHERE id = $1 AND deleted_at IS NOT NULL`, w.ID).Scan(&desired); err != nil || desired != "DELETED" {
		t.Errorf("stored desired = %q, %v", desired, err)
	}
}

func TestDeleteInError(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	w := mustCreate(t, svc, addUser(t, pool, "alice"), "dev")
	exec(t, pool, `UPDATE workspaces SET phase = 'ERROR', error_reason = 'Timeout', error_count = 1 WHERE id = $1`, w.ID)
	if err := svc.Delete(context.Background(), w.ID); err != nil {
		t.Fatalf("delete in ERROR: %v", err)
	}
}

func TestListPagesAndFilters(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	alice, bob := addUser(t, pool, "alice"), addUser(t, pool, "bob")
	var aliceIDs []string
	for i := range 5 {
		aliceIDs = append(aliceIDs, mustCreate(t, svc, alice, fmt.Sprintf("a%d", i)).ID)
	}
	mustCreate(t, svc, bob, "b0")
	var got []string
	after := ""
	for {
		page, err := svc.List(ctx, workspace.ListFilter{OwnerID: alice, Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, w := range page {
			got = append(got, w.ID)
		}
		after = page[len(page)-1].ID
	}
	if fmt.Sprint(got) != fmt.Sprint(aliceIDs) {
		t.Errorf("paged ids = %v, want %v", got, aliceIDs)
	}
	all, err := svc.List(ctx, workspace.ListFilter{})
	if err != nil || len(all) != 6 {
		t.Errorf("list all = %d, %v; want 6", len(all), err)
	}
	if _, err := svc.List(ctx, workspace.ListFilter{Limit: -1}); !errors.Is(err, workspace.ErrInvalidInput) {
		t.Errorf("negative limit: %v", err)
	}
}

func TestSetDesiredRules(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	w := mustCreate(t, svc, addUser(t, pool, "alice"), "dev")

	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredDeleted, workspace.CauseUser); !errors.Is(err, workspace.ErrInvalidInput) {
		t.Errorf("desired DELETED: %v", err)
	}
	exec(t, pool, `UPDATE workspaces SET operation = 'STARTING' WHERE id = $1`, w.ID)
	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredStandby, workspace.CauseUser); !errors.Is(err, workspace.ErrInvalidState) {
		t.Errorf("change while operation in flight: %v", err)
	}
	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredRunning, workspace.CauseUser); err != nil {
		t.Errorf("same desired while operation in flight: %v", err)
	}
	// A backup yields to a wake: it does not refuse one.
	exec(t, pool, `UPDATE workspaces SET operation = 'ARCHIVING', op_backup = true, phase = 'STANDBY', desired_state = 'STANDBY' WHERE id = $1`, w.ID)
	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
		t.Errorf("same desired during a backup: %v", err)
	}
	exec(t, pool, `UPDATE workspaces SET op_backup = false WHERE id = $1`, w.ID)
	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredRunning, workspace.CauseUser); !errors.Is(err, workspace.ErrInvalidState) {
		t.Errorf("wake while archiving: %v", err)
	}
	exec(t, pool, `UPDATE workspaces SET op_backup = true WHERE id = $1`, w.ID)
	if got, err := svc.SetDesired(ctx, w.ID, workspace.DesiredRunning, workspace.CauseUser); err != nil || got.DesiredState != workspace.DesiredRunning {
		t.Errorf("wake during a backup = %s, %v", got.DesiredState, err)
	}
	exec(t, pool, `UPDATE workspaces SET operation = 'NONE', op_backup = false, phase = 'ERROR', error_reason = 'Timeout', error_count = 1 WHERE id = $1`, w.ID)
	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredStandby, workspace.CauseUser); !errors.Is(err, workspace.ErrInvalidState) {
		t.Errorf("change in ERROR: %v", err)
	}
	exec(t, pool, `UPDATE workspaces SET phase = 'STANDBY', error_reason = NULL, error_count = 0 WHERE id = $1`, w.ID)
	got, err := svc.SetDesired(ctx, w.ID, workspace.DesiredArchived, workspace.CauseUser)
	if err != nil || got.DesiredState != workspace.DesiredArchived {
		t.Fatalf("set ARCHIVED = %s, %v", got.DesiredState, err)
	}
}

func TestWakingResetsLastAccess(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	w := mustCreate(t, svc, addUser(t, pool, "alice"), "dev")
	old := time.Now().Add(-24 * time.Hour).UTC().Truncate(time.Second)
	exec(t, pool, `UPDATE workspaces SET desired_state = 'STANDBY', last_access_at = $2 WHERE id = $1`, w.ID, old)
	got, err := svc.SetDesired(ctx, w.ID, workspace.DesiredArchived, workspace.CauseUser)
	if err != nil || !got.LastAccessAt.Equal(old) {
		t.Fatalf("non-waking change moved last_access_at to %v (%v)", got.LastAccessAt, err)
	}
	got, err = svc.SetDesired(ctx, w.ID, workspace.DesiredRunning, workspace.CauseUser)
	if err != nil || !got.LastAccessAt.After(old) {
		t.Fatalf("waking left last_access_at at %v (%v)", got.LastAccessAt, err)
	}
}

// A failed restore waits out its backoff; archiving the workspace and
// opening it again is a new request that starts at once, with the failures
// still counted.
func TestSetDesiredClearsBackoff(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	w := mustCreate(t, svc, addUser(t, pool, "alice"), "dev")
	exec(t, pool, `UPDATE workspaces SET phase = 'ARCHIVED', desired_state = 'ARCHIVED',
		error_reason = 'RestoreFailed', error_count = 2, next_attempt_at = now() + interval '5 minutes' WHERE id = $1`, w.ID)
	same, err := svc.SetDesired(ctx, w.ID, workspace.DesiredArchived, workspace.CauseUser)
	if err != nil || same.NextAttemptAt == nil {
		t.Fatalf("unchanged desired state dropped the backoff: %v, %v", same.NextAttemptAt, err)
	}
	got, err := svc.SetDesired(ctx, w.ID, workspace.DesiredRunning, workspace.CauseUser)
	if err != nil {
		t.Fatal(err)
	}
	if got.NextAttemptAt != nil || got.ErrorCount != 2 {
		t.Fatalf("after a new desired state: next attempt %v, error count %d; want none and 2", got.NextAttemptAt, got.ErrorCount)
	}
}

func TestSetDesiredIfUnchanged(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	w := mustCreate(t, svc, addUser(t, pool, "alice"), "dev")
	exec(t, pool, `UPDATE workspaces SET description = 'touched' WHERE id = $1`, w.ID)
	if _, err := svc.SetDesiredIfUnchanged(ctx, w.ID, w.Version, workspace.DesiredStandby, workspace.CauseUser); !errors.Is(err, workspace.ErrInvalidState) {
		t.Fatalf("stale version: %v", err)
	}
	cur, _ := svc.Get(ctx, w.ID)
	if _, err := svc.SetDesiredIfUnchanged(ctx, w.ID, cur.Version, workspace.DesiredStandby, workspace.CauseUser); err != nil {
		t.Fatalf("current version: %v", err)
	}
}

func TestLimits(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	svc := newService(t, pool, workspace.Options{MaxRunningPerUser: 2, MaxRunningGlobal: 3})
	alice, bob := addUser(t, pool, "alice"), addUser(t, pool, "bob")
	a1 := mustCreate(t, svc, alice, "a1")
	mustCreate(t, svc, alice, "a2")
	// At a limit a workspace is created stopped, and says which limit.
	a3, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: alice, Name: "a3"})
	if err != nil || a3.DesiredState != workspace.DesiredStandby || a3.HeldBy == nil ||
		a3.HeldBy.Scope != workspace.LimitScopeUser || a3.HeldBy.Limit != 2 {
		t.Fatalf("third create of alice: %+v, %v", a3, err)
	}
	if b1, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: bob, Name: "b1"}); err != nil || b1.HeldBy != nil || b1.DesiredState != workspace.DesiredRunning {
		t.Fatalf("create below the limits: %+v, %v", b1, err)
	}
	held, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: bob, Name: "held"})
	if err != nil || held.HeldBy == nil || held.HeldBy.Scope != workspace.LimitScopeGlobal || held.DesiredState != workspace.DesiredStandby {
		t.Fatalf("fourth create overall: %+v, %v", held, err)
	}
	running, err := svc.Running(ctx, alice)
	if err != nil || len(running) != 2 {
		t.Fatalf("running of alice = %d, %v", len(running), err)
	}
	// Stopping one frees a slot; waking it again is limited like creating.
	if _, err := svc.SetDesired(ctx, a1.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	b2, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: bob, Name: "b2"})
	if err != nil || b2.HeldBy != nil {
		t.Fatalf("create after a slot freed: %+v, %v", b2.HeldBy, err)
	}
	if _, err := svc.SetDesired(ctx, a1.ID, workspace.DesiredRunning, workspace.CauseUser); !errors.Is(err, workspace.ErrLimitExceeded) {
		t.Fatalf("wake over the global limit: %v", err)
	}
	if err := svc.Delete(ctx, b2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetDesired(ctx, a1.ID, workspace.DesiredRunning, workspace.CauseUser); err != nil {
		t.Fatalf("wake after a deletion freed a slot: %v", err)
	}
}

// countRunning reads the number of live workspaces with desired RUNNING.
func countRunning(t *testing.T, pool *pgxpool.Pool, owner string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM workspaces
		WHERE desired_state = 'RUNNING' AND deleted_at IS NULL AND ($1 = '' OR owner_id = $1)`, owner).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConcurrentWakesNeverExceedLimits(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	const n = 50
	seed := newService(t, pool, workspace.Options{})
	alice := addUser(t, pool, "alice")
	var aliceWS, globalWS []workspace.Workspace
	for i := range n {
		aliceWS = append(aliceWS, mustCreate(t, seed, alice, fmt.Sprintf("a%d", i)))
		u := addUser(t, pool, fmt.Sprintf("u%d", i))
		globalWS = append(globalWS, mustCreate(t, seed, u, "w"))
	}
	exec(t, pool, `UPDATE workspaces SET desired_state = 'STANDBY'`)

	svc := newService(t, pool, workspace.Options{MaxRunningPerUser: 3, MaxRunningGlobal: 10})
	wakeAll := func(ws []workspace.Workspace) (ok, limited int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() {
				_, err := svc.SetDesired(ctx, w.ID, workspace.DesiredRunning, workspace.CauseUser)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, workspace.ErrLimitExceeded):
					limited++
				default:
					t.Errorf("wake %s: %v", w.ID, err)
				}
			})
		}
		wg.Wait()
		return ok, limited
	}
	if ok, limited := wakeAll(aliceWS); ok != 3 || limited != n-3 {
		t.Errorf("one user, %d concurrent wakes: %d ok, %d limited; want 3 ok", n, ok, limited)
	}
	if got := countRunning(t, pool, alice); got != 3 {
		t.Errorf("alice has %d desired RUNNING, want 3", got)
	}
	if ok, _ := wakeAll(globalWS); ok != 7 {
		t.Errorf("%d users waking at once: %d ok, want the 7 global slots left", n, ok)
	}
	if got := countRunning(t, pool, ""); got != 10 {
		t.Errorf("%d desired RUNNING overall, want 10", got)
	}
}

func TestConcurrentCreatesNeverExceedLimit(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	svc := newService(t, pool, workspace.Options{MaxRunningPerUser: 2})
	alice := addUser(t, pool, "alice")
	var wg sync.WaitGroup
	var held atomic.Int32
	for i := range 50 {
		wg.Go(func() {
			c, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: alice, Name: fmt.Sprintf("w%d", i)})
			if err != nil {
				t.Errorf("create: %v", err)
			}
			if c.HeldBy != nil {
				held.Add(1)
			}
		})
	}
	wg.Wait()
	if got := countRunning(t, pool, alice); got != 2 || held.Load() != 48 {
		t.Errorf("%d workspaces created running, %d held; want 2 and 48", got, held.Load())
	}
}

func TestRecover(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	w := mustCreate(t, svc, addUser(t, pool, "alice"), "dev")
	if _, err := svc.Recover(ctx, w.ID); !errors.Is(err, workspace.ErrInvalidState) {
		t.Fatalf("recover a PENDING workspace: %v", err)
	}
	exec(t, pool, `UPDATE workspaces SET phase = 'ERROR', error_reason = 'Timeout', error_message = 'start took too long',
		error_count = 2, next_attempt_at = now() + interval '1 hour',
		conditions = '{"storage.volume_ready":{"status":"True","last_transition_time":"2026-01-01T00:00:00Z"}}'
		WHERE id = $1`, w.ID)
	got, err := svc.Recover(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ErrorReason != nil || got.ErrorMessage != nil || got.ErrorCount != 0 || got.NextAttemptAt != nil {
		t.Errorf("error fields after recover: %v %v %d %v", got.ErrorReason, got.ErrorMessage, got.ErrorCount, got.NextAttemptAt)
	}
	if got.Phase != workspace.PhaseStandby {
		t.Errorf("phase after recover = %s, want STANDBY from the observed volume", got.Phase)
	}
	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredArchived, workspace.CauseUser); err != nil {
		t.Errorf("set desired after recover: %v", err)
	}
}

func TestRecordAccessKeepsNewest(t *testing.T) {
	pool := newPool(t)
	svc := newService(t, pool, workspace.Options{})
	ctx := context.Background()
	w := mustCreate(t, svc, addUser(t, pool, "alice"), "dev")
	newer := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := svc.RecordAccess(ctx, []workspace.Access{{WorkspaceID: w.ID, At: newer}}); err != nil {
		t.Fatal(err)
	}
	if err := svc.RecordAccess(ctx, []workspace.Access{{WorkspaceID: w.ID, At: newer.Add(-time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	got, _ := svc.Get(ctx, w.ID)
	if !got.LastAccessAt.Equal(newer) {
		t.Errorf("last_access_at = %v, want %v", got.LastAccessAt, newer)
	}
}
