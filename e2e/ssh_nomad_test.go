package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// TestNomadSSH reaches a workspace on a real Nomad agent under raw_exec,
// whose agent the task fetches from the server's /dl/codehub, with the
// real OpenSSH client and rsync; then wakes and restores it over SSH.
func TestNomadSSH(t *testing.T) {
	agent := nomadtest.Start(t, "")
	srv := startServer(t, nomadConfig(t, agent))
	admin := login(t, srv)
	ws := createRunning(t, admin, "nomad-ssh")
	me := newSSHUser(t, srv, admin)
	me.configSSH(t)
	// raw_exec cannot mount: the home is the volume's host path.
	sshBasics(t, srv, me, "nomad-ssh", volumePath(t, agent, ws.ID))
	sshStopEndsDetached(t, admin, me, "codehub.nomad-ssh", ws.ID)
	sshWake(t, admin, me, "codehub.nomad-ssh", ws.ID)
}

// TestNomadExecSSH reaches a workspace on Nomad's exec driver (the program
// in Nomad's chroot as nobody, the home mounted at /home/coder, the agent
// fetched from the server's /dl/codehub into the task directory) through
// `codehub server`, `codehub login` and `codehub config-ssh` with the real
// OpenSSH client. The program is the single-machine backend's test
// program, which reports what it sees.
func TestNomadExecSSH(t *testing.T) {
	bins := t.TempDir()
	// The chroot copies directories with their modes; t.TempDir's 0700
	// would hide the program from nobody.
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	copyExecutable(t, fakeServer(t), filepath.Join(bins, "fakeworkspace"))
	agent := nomadtest.Start(t, nomadtest.ExecChrootConfig(bins))
	nomadtest.SkipWithoutExec(t, agent)
	uid, gid := nomadtest.ExecUser(t)
	cfg := serverConfig{databaseURL: testenv.PostgresURL(t), redisURL: testenv.RedisURL(t), s3: testenv.NewS3(t)}
	cfg.backend = fmt.Sprintf(`backend "nomad" {
  address = %q
  driver  = "exec"
`+aclOptOut+`}

workspace {
  command       = %q
  args          = ["--listen", "127.0.0.1:%%PORT%%"]
  upstream_auth = "none"
  uid           = %d
  gid           = %d
  cpu           = 100
  memory        = 256
}
`, agent.Addr, nomadtest.ExecBinDir+"/fakeworkspace", uid, gid)
	srv := startServer(t, cfg)
	admin := login(t, srv)
	ws := createRunning(t, admin, "exec-ssh")
	me := newSSHUser(t, srv, admin)
	me.configSSH(t)
	host := "codehub.exec-ssh"

	t.Run("a command sees what the program sees, with its status", func(t *testing.T) {
		program := func(path string) string {
			t.Helper()
			resp := browserGet(t, admin, "/w/"+ws.ID+path)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the program's %s: %d %s", path, resp.StatusCode, b)
			}
			return strings.TrimSpace(string(b))
		}
		env := map[string]string{}
		for _, kv := range strings.Split(program("/env"), "\n") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		ids := strings.Fields(program("/id"))
		if len(ids) != 3 || ids[0] != strconv.Itoa(uid) {
			t.Fatalf("the program runs as %q, want uid %d", ids, uid)
		}
		if env["HOME"] != "/home/coder" {
			t.Fatalf("the program's HOME is %q, want the mounted home", env["HOME"])
		}
		want := fmt.Sprintf("%s %s\nhome=%s\npath=%s\ncwd=%s", ids[0], ids[1], env["HOME"], env["PATH"], env["HOME"])
		out, err := me.tool("ssh", host, `printf '%s %s\nhome=%s\npath=%s\ncwd=%s\n' "$(id -u)" "$(id -g)" "$HOME" "$PATH" "$(pwd)"; exit 3`).CombinedOutput()
		if code := exitCode(err); code != 3 || strings.TrimSpace(string(out)) != want {
			t.Fatalf("ssh command: status %d (%v):\n%s\nwant:\n%s", code, err, out, want)
		}
		// The CLI's own client, with the command's status.
		got, err := me.codehub("ssh", "exec-ssh", "echo", "via-cli;", "exit", "4")
		if code := exitCode(err); code != 4 || !strings.Contains(got, "via-cli") {
			t.Fatalf("codehub ssh: status %d (%v): %s", code, err, got)
		}
	})

	t.Run("scp round trip", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "blob")
		writeRandom(t, src, 3<<20+91)
		me.run(t, "scp", src, host+":blob")
		back := filepath.Join(dir, "blob.scp")
		me.run(t, "scp", host+":blob", back)
		sameFile(t, src, back)
		// It went into the home volume, owned by the workspace's user.
		st, err := os.Stat(filepath.Join(volumePath(t, agent, ws.ID), "blob"))
		if err != nil {
			t.Fatalf("the copied file is not in the home volume: %v", err)
		}
		if owner := int(st.Sys().(*syscall.Stat_t).Uid); owner != uid {
			t.Fatalf("the copied file is owned by uid %d, want %d", owner, uid)
		}
	})

	sshStopEndsDetached(t, admin, me, host, ws.ID)

	t.Run("the host key stays the same after a stop and a start", func(t *testing.T) {
		pinned := filepath.Join(me.home, ".config", "codehub", "known_hosts")
		before, err := os.ReadFile(pinned)
		if err != nil {
			t.Fatal(err)
		}
		admin.setDesired(ws.ID, "STANDBY")
		admin.settle(ws.ID, "STANDBY", time.Now())
		admin.setDesired(ws.ID, "RUNNING")
		admin.settle(ws.ID, "RUNNING", time.Now())
		// StrictHostKeyChecking is on: another key would be refused.
		if out := me.run(t, "ssh", host, "cat blob | wc -c"); strings.TrimSpace(out) != strconv.Itoa(3<<20+91) {
			t.Fatalf("after a restart the home holds %q bytes of the copied file", out)
		}
		after, err := os.ReadFile(pinned)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, after) {
			t.Fatalf("known_hosts changed across a restart:\n%s\n---\n%s", before, after)
		}
	})
}

// sshStopEndsDetached: a process started over SSH that left the session
// (nohup, in the background) ends when the workspace stops; it is found
// by its command line, which no other process shares.
func sshStopEndsDetached(t *testing.T, admin *apiClient, me *sshUser, host, id string) {
	t.Run("a detached process ends with the workspace", func(t *testing.T) {
		// GNU sleep takes a fraction: the digits mark this process.
		arg := fmt.Sprintf("1000.%d", time.Now().UnixNano())
		me.run(t, "ssh", host, "nohup sleep "+arg+" >/dev/null 2>&1 &")
		t.Cleanup(func() {
			for _, pid := range processesWithArgs("sleep", arg) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		waitFor(t, time.Minute, "the detached sleep runs", func() bool { return len(processesWithArgs("sleep", arg)) > 0 })
		admin.setDesired(id, "STANDBY")
		admin.settle(id, "STANDBY", time.Now())
		// The bound only keeps a broken build from hanging; the process
		// must be gone.
		deadline := time.Now().Add(30 * time.Second)
		for left := processesWithArgs("sleep", arg); len(left) > 0; left = processesWithArgs("sleep", arg) {
			if time.Now().After(deadline) {
				t.Fatalf("the workspace stopped, but the process started over SSH still runs: pids %v", left)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// processesWithArgs lists the processes whose command line is argv, the
// program named by its base name.
func processesWithArgs(argv ...string) []int {
	return testenv.PIDs(testenv.Processes(func(p testenv.Proc) bool {
		return len(p.Args) == len(argv) && filepath.Base(p.Args[0]) == argv[0] && slices.Equal(p.Args[1:], argv[1:])
	}))
}

// copyExecutable copies the program at src to dst, readable and
// executable by everyone.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
