package nomad

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// TestE2EExecFirstStart runs the first start under exec, as nobody with
// every capability dropped: the clone lands in the mounted home, the
// task removes its credential file from its own secrets directory, and
// the dotfiles' install script finds the credential nowhere.
func TestE2EExecFirstStart(t *testing.T) {
	nomadtest.Binary(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	bins := t.TempDir()
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	const (
		wsID  = "01jb3x7k9q2m5n8p4r6s0tex1s"
		token = "ghp_execS3cret55"
	)
	a := nomadtest.Start(t, nomadtest.ExecChrootConfig(bins))
	nomadtest.SkipWithoutExec(t, a)
	uid, gid := nomadtest.ExecUser(t)
	buildStatic(t, bins, "./testdata/wsserver", "wsserver")
	// The chroot holds none of the host's temp dirs: the repository is
	// served over git's dumb HTTP protocol, behind the credential, so the
	// clone shows that the token reached git.
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": testenv.CredentialProbe})
	bare := strings.TrimPrefix(dotfiles, "file://")
	if out, err := exec.Command("git", "-C", bare, "update-server-info").CombinedOutput(); err != nil {
		t.Fatalf("git update-server-info: %v\n%s", err, out)
	}
	files := http.StripPrefix("/dots.git", http.FileServer(http.Dir(bare)))
	git := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, password, ok := r.BasicAuth(); !ok || user != "x-access-token" || password != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "credential required", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(git.Close)
	b := e2eBackend(t, a, bins, e2eConfig{
		driver:      DriverExec,
		command:     path.Join(nomadtest.ExecBinDir, "wsserver"),
		codehubPath: path.Join(nomadtest.ExecBinDir, "codehub"),
		uid:         uid, gid: gid,
		s3: testenv.S3{Endpoint: "127.0.0.1:9", Bucket: "unused", Region: "us-east-1", AccessKey: "unused", SecretKey: "unused"},
	})
	t.Cleanup(func() {
		if t.Failed() {
			logTaskEvents(t, a, jobID(wsID))
			allocs, _, _ := a.Client.Jobs().Allocations(jobID(wsID), true, nil)
			for _, alloc := range allocs {
				t.Logf("first-start stderr of %s:\n%s", alloc.ID, taskStderr(a, alloc.ID))
			}
		}
	})
	hostHome := provisionExecHome(t, b, wsID, uid, gid)
	startExecWorkspace(t, a, b, controller.WorkspaceSpec{WorkspaceID: wsID, OwnerID: "01owner0000000000000000000",
		Dotfiles: git.URL + "/dots.git", GitToken: token})
	probe, err := os.ReadFile(filepath.Join(hostHome, "probe"))
	if err != nil || !strings.Contains(string(probe), "probe done") || !strings.Contains(string(probe), "NOMAD_SECRETS_DIR=") {
		t.Fatalf("the install script did not run to its end in the task: %v\n%s", err, probe)
	}
	if strings.Contains(string(probe), token) {
		t.Errorf("the install script found the token:\n%s", probe)
	}
	stopExecWorkspace(t, b, wsID)
}

// taskStderr is the first-start task's stderr in allocation id.
func taskStderr(a *nomadtest.Agent, id string) string {
	resp, err := a.Client.Raw().Response("/v1/client/fs/logs/"+id+"?task=first-start&type=stderr&plain=true&origin=start", nil)
	if err != nil {
		return err.Error()
	}
	defer resp.Close()
	out, err := io.ReadAll(io.LimitReader(resp, 1<<16))
	if err != nil {
		return err.Error()
	}
	return string(out)
}
