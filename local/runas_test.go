package local

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/testenv"
)

// workspaceUser is the unprivileged user the tests run workspaces as:
// Debian's nobody, which exists on every machine.
const workspaceUser = "nobody"

// newUserBackend returns a backend running workspaces as workspaceUser,
// with its data dir, a root-only file and a copy of the test program in a
// directory that user may pass through (t.TempDir's may not be).
func newUserBackend(t *testing.T) (b *Backend, base string, acct *account) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running workspaces as another user needs root; run the tests as root")
	}
	acct, err := lookupAccount(workspaceUser)
	if err != nil {
		t.Skipf("no user %s to run workspaces as: %v", workspaceUser, err)
	}
	base, err = os.MkdirTemp("", "codehub-local-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	program := copyFakeWorkspace(t, base)
	b, err = New(hclog.NewNullLogger(), Options{
		DataDir: filepath.Join(base, "data"),
		Command: program,
		Args:    []string{"--listen", "127.0.0.1:" + config.PlaceholderPort},
		User:    workspaceUser,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b, base, acct
}

// ask sends a request to the running test workspace.
func ask(t *testing.T, b *Backend, path string, query url.Values) string {
	t.Helper()
	addr, err := b.Resolve(context.Background(), testID)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return get(t, "http://"+addr+path+"?"+query.Encode())
}

func owner(t *testing.T, path string) (uid, gid int) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

func TestWorkspaceRunsAsTheWorkspaceUser(t *testing.T) {
	ctx := context.Background()
	b, base, acct := newUserBackend(t)
	stopOnCleanup(t, b)
	secret := filepath.Join(base, "admin-password")
	if err := os.WriteFile(secret, []byte("codehub's own secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	provisionAndStart(ctx, t, b)
	waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })

	// uid, gid, and no supplementary group of root's.
	if got, want := strings.TrimSpace(ask(t, b, "/id", nil)), strings.Join([]string{strconv.Itoa(acct.uid), strconv.Itoa(acct.gid), "0"}, " "); got != want {
		t.Errorf("workspace runs as %q (uid gid groups), want %q", got, want)
	}
	if uid, gid := owner(t, b.HomeDir(testID)); uid != acct.uid || gid != acct.gid {
		t.Errorf("home owned by %d:%d, want %d:%d", uid, gid, acct.uid, acct.gid)
	}
	if got := ask(t, b, "/write", url.Values{"path": {filepath.Join(b.HomeDir(testID), "note")}}); got != "ok" {
		t.Errorf("writing in its home: %s", got)
	}
	for _, path := range []string{
		secret,
		filepath.Join(b.workspaceDir(testID), stateFile),
		filepath.Join(b.workspaceDir(testID), logFile),
	} {
		if got := ask(t, b, "/read", url.Values{"path": {path}}); !strings.Contains(got, "permission denied") {
			t.Errorf("reading %s from the workspace gave %q, want permission denied", path, got)
		}
	}
	if env := ask(t, b, "/env", nil); !strings.Contains(env, "\nUSER="+acct.name+"\n") {
		t.Errorf("workspace environment does not name its user %s:\n%s", acct.name, env)
	}
}

// A restore writes the home as codehub's user; the next start gives it,
// every entry of it, to the workspace user.
func TestStartGivesARestoredHomeToTheWorkspaceUser(t *testing.T) {
	ctx := context.Background()
	b, _, acct := newUserBackend(t)
	stopOnCleanup(t, b)
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	home := b.HomeDir(testID)
	if err := b.lockHome(home); err != nil {
		t.Fatal(err)
	}
	if uid, _ := owner(t, home); uid != os.Geteuid() {
		t.Fatalf("locked home owned by %d, want codehub's %d", uid, os.Geteuid())
	}
	deep := filepath.Join(home, "project", "src")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(deep, "main.go")
	if err := os.WriteFile(file, []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
	for _, path := range []string{home, filepath.Join(home, "project"), deep, file, filepath.Join(home, "link")} {
		if uid, gid := owner(t, path); uid != acct.uid || gid != acct.gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", path, uid, gid, acct.uid, acct.gid)
		}
	}
	// The link itself changed hands, never what it points to.
	if uid, _ := owner(t, "/etc/shadow"); uid != 0 {
		t.Errorf("/etc/shadow now owned by %d", uid)
	}
}

func TestNewRefusesADataDirTheWorkspaceUserCannotReach(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running workspaces as another user needs root; run the tests as root")
	}
	if _, err := lookupAccount(workspaceUser); err != nil {
		t.Skipf("no user %s to run workspaces as: %v", workspaceUser, err)
	}
	private := t.TempDir() // 0700, owned by root
	program := filepath.Join(private, "fakeworkspace")
	_, err := New(hclog.NewNullLogger(), Options{DataDir: filepath.Join(private, "data"), Command: "/bin/true", User: workspaceUser})
	if err == nil || !strings.Contains(err.Error(), "cannot pass through") {
		t.Errorf("New with a data dir below a private directory = %v, want a refusal naming it", err)
	}
	if err := os.WriteFile(program, nil, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := New(hclog.NewNullLogger(), Options{DataDir: filepath.Join(private, "data"), Command: program, User: workspaceUser}); err == nil {
		t.Error("New accepted a workspace program the workspace user cannot run")
	}
}

// A prebuild as the workspace user: its build clones and runs init in the
// home as that user, names the commit it built, and the job archives the
// home, without the commit's file, under the key that commit completes.
func TestPrebuildAsTheWorkspaceUser(t *testing.T) {
	ctx := context.Background()
	s3 := testenv.NewS3(t)
	bin := buildCodehub(t)
	b, base, acct := newUserBackend(t)
	b.opts.CodehubBinary = bin
	b.opts.S3 = config.S3{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: s3.Region,
		AccessKey: config.Secret(s3.AccessKey), SecretKey: config.Secret(s3.SecretKey)}
	// The repository where the workspace user can read it, as its own.
	repo := strings.TrimPrefix(testenv.BareRepo(t, "service", map[string]string{"README": "v1"}), "file://")
	shared := filepath.Join(base, "service.git")
	if out, err := exec.Command("cp", "-a", repo, shared).CombinedOutput(); err != nil {
		t.Fatalf("copy the repository: %v\n%s", err, out)
	}
	// git serves only a repository its user owns.
	if out, err := exec.Command("chown", "-R", strconv.Itoa(acct.uid)+":"+strconv.Itoa(acct.gid), shared).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	head, err := exec.Command("git", "-c", "safe.directory=*", "-C", shared, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	commit := strings.TrimSpace(string(head))

	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID, UID: acct.uid, GID: acct.gid}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	const opID = "01jb3x8a0000000000000000aa"
	prefix := archive.PrebuildPrefix(testID, opID, "service", "0a1b2c3d4e5f")
	job := controller.JobSpec{WorkspaceID: testID, OpID: opID, ArchiveKey: prefix, Attempt: 1,
		Build: &controller.WorkspaceSpec{WorkspaceID: testID, Repository: "file://" + shared, Init: []string{"id -un > built-by"}}}
	if err := b.SubmitArchive(ctx, job); err != nil {
		t.Fatalf("SubmitArchive: %v", err)
	}
	o := waitFor(t, b, "built and archived", func(o controller.Observed) bool {
		return o.Archive != nil && (o.Archive.Status == controller.JobSucceeded || o.Archive.Status == controller.JobFailed)
	})
	if o.Archive.Status != controller.JobSucceeded {
		t.Fatalf("the prebuild: %+v", o.Archive)
	}
	key := archive.PrebuildKey(prefix, commit)
	restored := t.TempDir()
	store := archive.NewStore(hclog.NewNullLogger(), s3.Client, s3.Bucket)
	if _, err := store.Restore(ctx, key, restored, nil); err != nil {
		t.Fatalf("restore %s: %v", key, err)
	}
	if by, err := os.ReadFile(filepath.Join(restored, "service", "built-by")); err != nil || strings.TrimSpace(string(by)) != workspaceUser {
		t.Errorf("init ran as %q (%v), want %s", by, err, workspaceUser)
	}
	if _, err := os.Lstat(filepath.Join(restored, prebuildBuiltFile)); !os.IsNotExist(err) {
		t.Errorf("the commit's file is in the archive: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(restored, ".codehub-prebuilt")); err != nil {
		t.Errorf("the home is not marked prebuilt: %v", err)
	}
}
