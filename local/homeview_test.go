package local

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
)

// viewedHome is the home a workspace named name sees: /home/{name} where
// the machine allows the view, the host path otherwise.
func viewedHome(b *Backend, name string) string {
	if b.view == nil {
		return b.HomeDir(testID)
	}
	return "/home/" + name
}

func TestPathElement(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"my-project", "my-project"},
		{"My_Project.v2", "My_Project.v2"},
		{"", "workspace"},
		{".", "workspace"},
		{"..", "workspace"},
		{"../x", "x"},
		{"a/b", "a-b"},
		{"/etc/passwd", "etc-passwd"},
		{".hidden", "hidden"},
		{"-rf", "rf"},
		{"a b\x00c\n", "a-b-c-"},
		{"café", "caf--"},
		{strings.Repeat("x", 100), strings.Repeat("x", 63)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pathElement(tc.name)
			if got != tc.want {
				t.Fatalf("pathElement(%q) = %q, want %q", tc.name, got, tc.want)
			}
			if strings.ContainsRune(got, '/') || got == "." || got == ".." {
				t.Fatalf("pathElement(%q) = %q is not one path element", tc.name, got)
			}
		})
	}
}

func TestHomeFolderLeavesTheHostsHomesVisible(t *testing.T) {
	host := map[string]bool{"alice": true}
	taken := func(name string) bool { return host[name] }
	for _, tc := range []struct{ name, want string }{
		{"backend", "backend"},
		{"alice", "alice-" + testID},
		{"../alice", "alice-" + testID},
		{strings.Repeat("a", 63), strings.Repeat("a", 63)},
	} {
		if got := homeFolder(tc.name, testID, taken); got != tc.want {
			t.Errorf("homeFolder(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	host[strings.Repeat("a", 63)] = true
	if got, want := homeFolder(strings.Repeat("a", 63), testID, taken), strings.Repeat("a", 36)+"-"+testID; got != want {
		t.Errorf("homeFolder of a long taken name = %q, want %q", got, want)
	}
}

// Two workspaces of the same name each see their own home at
// /home/{name}, with their own files, while the program they run and the
// data dir live under the host's /home, which the view must keep in place.
func TestWorkspaceSeesItsHomeUnderItsName(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	if os.Geteuid() == 0 {
		parent = homeRoot
	}
	base, err := os.MkdirTemp(parent, "codehub-view-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	program := copyFakeWorkspace(t, base)
	b, err := New(hclog.NewNullLogger(), Options{
		DataDir: filepath.Join(base, "data"),
		Command: program,
		Args:    []string{"--listen", "127.0.0.1:" + config.PlaceholderPort},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if b.view == nil {
		t.Skip("this machine allows no mount namespace; workspaces see the host path")
	}
	// The second name is not a path element; it must not leave /home.
	workspaces := map[string]string{testID: "my-project", "01jb3x7k9q2m5n8p4r6s0t1zzz": "../my-project"}
	for id, name := range workspaces {
		if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: id}); err != nil {
			t.Fatalf("ProvisionVolume: %v", err)
		}
		if err := os.WriteFile(filepath.Join(b.HomeDir(id), "marker"), []byte(id), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: id, RunID: "run1", Name: name}); err != nil {
			t.Fatalf("StartWorkspace: %v", err)
		}
		t.Cleanup(func() { _ = b.StopWorkspace(ctx, id, controller.StopSave) })
	}
	for id := range workspaces {
		addr := resolveReady(t, b, id)
		if got := get(t, "http://"+addr+"/home"); got != "/home/my-project" {
			t.Errorf("workspace %s: HOME = %q, want /home/my-project", id, got)
		}
		if env := get(t, "http://"+addr+"/env"); strings.Contains(env, b.HomeDir(id)) {
			t.Errorf("workspace %s finds its home's host path in its environment:\n%s", id, env)
		}
		if got := get(t, "http://"+addr+"/read?path=/home/my-project/marker"); got != id {
			t.Errorf("workspace %s reads %q in its home, want its own marker", id, got)
		}
		if got := get(t, "http://"+addr+"/write?path=/home/my-project/written-by-"+id); got != "ok" {
			t.Errorf("workspace %s writing in its home: %s", id, got)
		}
		if _, err := os.Stat(filepath.Join(b.HomeDir(id), "written-by-"+id)); err != nil {
			t.Errorf("what workspace %s wrote is not in its home: %v", id, err)
		}
	}
}

// resolveReady waits until the workspace answers and returns its address.
func resolveReady(t *testing.T, b *Backend, wsID string) string {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		snap, err := b.Observe(ctx)
		if err != nil {
			t.Fatalf("Observe: %v", err)
		}
		if o := snap.Workspaces[wsID]; o.Failure != nil {
			t.Fatalf("workspace %s failed: %v", wsID, o.Failure)
		}
		if addr, err := b.Resolve(ctx, wsID); err == nil {
			return addr
		}
	}
	t.Fatalf("workspace %s never became ready", wsID)
	return ""
}

// A codehub that is not root gets the view from user namespaces; its
// program runs as codehub's own uid, and codehub finds it by its launch
// tag and kills it. Root plays such a codehub as nobody.
func TestHomeViewWithoutRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("playing an unprivileged codehub needs root to become nobody")
	}
	acct, err := lookupAccount(workspaceUser)
	if err != nil {
		t.Skipf("no user %s: %v", workspaceUser, err)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare")
	}
	base, err := os.MkdirTemp("", "codehub-view-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	home := filepath.Join(base, "ws-x-home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "marker"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, filepath.Join(home, "marker")} {
		if err := acct.chown(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	asCodehub := func(program string, args ...string) *exec.Cmd {
		cmd := exec.Command(setpriv, append([]string{"--reuid=" + strconv.Itoa(acct.uid), "--regid=" + strconv.Itoa(acct.gid), "--clear-groups", "--", program}, args...)...)
		cmd.Dir = home
		cmd.Env = []string{"PATH=/usr/bin:/bin", launchEnv + "=tag-of-the-launch"}
		return cmd
	}
	v := &homeView{unshare: unshare, unprivileged: true, uid: acct.uid, gid: acct.gid}
	program, args := v.wrap("my-project", home, "/bin/sh", []string{"-c", `echo "$PWD $(id -u) $(cat marker)"; echo $$; exec sleep 600`})
	cmd := asCodehub(program, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var got []string
	for sc := bufio.NewScanner(out); len(got) < 2 && sc.Scan(); {
		got = append(got, sc.Text())
	}
	if want := "/home/my-project " + strconv.Itoa(acct.uid) + " mine"; len(got) != 2 || got[0] != want {
		t.Fatalf("program saw %q, want %q first (stderr: %s)", got, want, stderr.String())
	}
	pid := got[1]
	find := `tr '\0' '\n' </proc/` + pid + `/environ | grep -qx ` + launchEnv + `=tag-of-the-launch && kill -9 ` + pid
	if out, err := asCodehub("/bin/sh", "-c", find).CombinedOutput(); err != nil {
		t.Fatalf("codehub's user could not find its program by tag and kill it: %v: %s", err, out)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("the program ended by itself, not by the kill")
	}
}
