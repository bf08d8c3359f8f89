package api_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/workspace"
)

type archiveJSON struct {
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	Current   bool      `json:"current"`
}

func TestArchives(t *testing.T) {
	s3 := testenv.NewS3(t)
	store := archive.NewStore(hclog.NewNullLogger(), s3.Client, s3.Bucket)
	env := apitest.New(t, apitest.Config{Archives: store})
	alice, bob := env.CreateUser("alice", false), env.CreateUser("bob", false)
	w := env.CreateWorkspace(alice, "dev")
	c := env.Login(alice)
	v := validate(t, c)
	ctx := context.Background()

	list := func() []archiveJSON {
		t.Helper()
		res := env.Do(c, "GET", "/api/v1/workspaces/"+w.ID+"/archives", nil)
		if res.StatusCode != 200 {
			t.Fatalf("archives: %d %s", res.StatusCode, res.Body)
		}
		var body struct {
			Archives []archiveJSON `json:"archives"`
		}
		res.Decode(t, &body)
		return body.Archives
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("archives of a new workspace: %+v", got)
	}

	older, newer := archive.Key(w.ID, workspace.NewID()), archive.Key(w.ID, workspace.NewID())
	for _, key := range []string{older, newer} {
		if err := store.CreateEmpty(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	// An attempt that died before its meta is no archive to show.
	unfinished := archive.Key(w.ID, workspace.NewID())
	if _, err := s3.Client.PutObject(ctx, s3.Bucket, unfinished, bytes.NewReader([]byte("partial")), 7, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	env.Exec(`UPDATE workspaces SET archive_key = $2 WHERE id = $1`, w.ID, older)

	got := list()
	if len(got) != 2 {
		t.Fatalf("archives: %+v, want the two complete ones", got)
	}
	if got[0].Current || !got[1].Current {
		t.Errorf("current: %+v, want only the older one (the workspace's archive_key)", got)
	}
	for _, a := range got {
		if a.SizeBytes <= 0 || time.Since(a.CreatedAt) > time.Minute {
			t.Errorf("archive %+v: want its size and a creation time of now", a)
		}
	}
	if !slices.IsSortedFunc(got, func(a, b archiveJSON) int { return b.CreatedAt.Compare(a.CreatedAt) }) {
		t.Errorf("archives not newest first: %+v", got)
	}

	if res := env.Do(env.Login(bob), "GET", "/api/v1/workspaces/"+w.ID+"/archives", nil); res.StatusCode != 403 {
		t.Errorf("another user's archives: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "GET", "/api/v1/workspaces/"+workspace.NewID()+"/archives", nil); res.StatusCode != 404 {
		t.Errorf("archives of an unknown workspace: %d %s", res.StatusCode, res.Body)
	}
	if v.seen[200] == 0 || v.seen[404] == 0 {
		t.Fatalf("validated statuses %v", v.seen)
	}
}

func TestImages(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	c := env.Login(env.CreateUser("alice", false))
	validate(t, c)
	if res := env.Do(env.Client(), "GET", "/api/v1/images", nil); res.StatusCode != 401 {
		t.Fatalf("images without a session: %d", res.StatusCode)
	}
	var body struct {
		Default string   `json:"default"`
		Images  []string `json:"images"`
	}
	res := env.Do(c, "GET", "/api/v1/images", nil)
	res.Decode(t, &body)
	if res.StatusCode != 200 || body.Default != apitest.Images[0] || !slices.Equal(body.Images, apitest.Images) {
		t.Fatalf("images: %d %s", res.StatusCode, res.Body)
	}
	// Each one listed is one a workspace may be created with.
	res = env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "second", "image": body.Images[1]})
	var ws wsJSON
	res.Decode(t, &ws)
	if res.StatusCode != 201 || ws.Image != body.Images[1] {
		t.Fatalf("create with the second image: %d %s", res.StatusCode, res.Body)
	}
}

// A start that failed and waits for its retry shows how often it failed
// and when the next attempt runs.
func TestRetryShown(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	w := env.CreateWorkspace(alice, "flaky")
	next := time.Now().Add(20 * time.Second).UTC().Truncate(time.Microsecond)
	env.Exec(`UPDATE workspaces SET phase = 'STANDBY', error_reason = 'StartFailed', error_message = 'exited with code 1',
		error_count = 2, next_attempt_at = $2 WHERE id = $1`, w.ID, next)
	var got struct {
		ErrorReason   string     `json:"error_reason"`
		ErrorCount    int        `json:"error_count"`
		NextAttemptAt *time.Time `json:"next_attempt_at"`
	}
	res := env.Do(c, "GET", "/api/v1/workspaces/"+w.ID, nil)
	res.Decode(t, &got)
	if got.ErrorReason != "StartFailed" || got.ErrorCount != 2 || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(next) {
		t.Fatalf("failing workspace: %s", res.Body)
	}
}
