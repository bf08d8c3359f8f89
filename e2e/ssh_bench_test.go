package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/testenv"
)

// BenchmarkSSH measures SSH through CodeHub (single-machine backend,
// OpenSSH client, `codehub ssh --stdio` as ProxyCommand) against OpenSSH's
// own sshd on loopback in the same run: connect-to-command time, scp of
// 1 GiB and the round trip of one keystroke through `cat`.
func BenchmarkSSH(b *testing.B) {
	sshd := program(b, "CODEHUB_TEST_SSHD", "/usr/sbin/sshd", "OpenSSH's sshd", "apt-get install openssh-server")
	cfg := localConfig(b)
	srv := startServer(b, cfg)
	admin := login(b, srv)
	createRunning(b, admin, "bench")
	me := newSSHUser(b, srv, admin)
	if out, err := me.codehub("config-ssh"); err != nil {
		b.Fatalf("config-ssh: %v %s", err, out)
	}
	direct := startSSHD(b, me, sshd)
	codehub := []string{"-F", me.config, "-o", "BatchMode=yes", "codehub.bench"}

	for _, target := range []struct {
		name string
		args []string
	}{{"codehub", codehub}, {"sshd", direct}} {
		connect := durations(b, 20, func() {
			if out, err := sshCmd(me, target.args, "true").CombinedOutput(); err != nil {
				b.Fatalf("%s: ssh true: %v %s", target.name, err, out)
			}
		})
		b.Logf("%s: ssh to a command (ssh host true), 20 runs: p50 %s p90 %s", target.name, pct(connect, 50), pct(connect, 90))
		b.ReportMetric(float64(pct(connect, 50).Microseconds())/1000, target.name+"-connect-p50-ms")

		rtt := keystrokes(b, me, target.args, 500)
		b.Logf("%s: keystroke round trip through cat, 500 keys: p50 %s p90 %s p99 %s", target.name, pct(rtt, 50), pct(rtt, 90), pct(rtt, 99))
		b.ReportMetric(float64(pct(rtt, 50).Microseconds()), target.name+"-key-p50-us")
	}

	// scp of 1 GiB, in three rounds that alternate the two, since the
	// machine's load swings: each round's ratio compares neighbours.
	big := filepath.Join(b.TempDir(), "big")
	writeBig(b, big, 1<<30)
	scp := func(name string, args []string) float64 {
		start := time.Now()
		cmd := exec.Command(filepath.Join(me.bin, "scp"), args...)
		cmd.Env = me.env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: scp: %v %s", name, err, out)
		}
		return 1024 / time.Since(start).Seconds()
	}
	var ratios []float64
	for round := 1; round <= 3; round++ {
		ch := scp("codehub", []string{"-F", me.config, "-o", "BatchMode=yes", big, "codehub.bench:big"})
		sd := scp("sshd", append(scpArgs(direct[:len(direct)-1]), big, direct[len(direct)-1]+":"+filepath.Join(b.TempDir(), "big")))
		b.Logf("scp 1 GiB, round %d: codehub %.0f MiB/s, sshd %.0f MiB/s, ratio %.2f", round, ch, sd, ch/sd)
		ratios = append(ratios, ch/sd)
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[1], "scp-ratio-median")
}

// scpArgs is ssh's options as scp takes them: the port is -P.
func scpArgs(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "-p" {
			out[i] = "-P"
		}
	}
	return out
}

func sshCmd(me *sshUser, args []string, command ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(me.bin, "ssh"), append(slices.Clone(args), command...)...)
	cmd.Env = me.env
	return cmd
}

func durations(b *testing.B, n int, f func()) []time.Duration {
	var out []time.Duration
	for range n {
		start := time.Now()
		f()
		out = append(out, time.Since(start))
	}
	return out
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// keystrokes sends n single bytes through `cat` on the far side and times
// each echo.
func keystrokes(b *testing.B, me *sshUser, args []string, n int) []time.Duration {
	cmd := sshCmd(me, append([]string{"-T"}, args...), "cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	buf := make([]byte, 1)
	// The first echo also waits for the connection.
	if _, err := in.Write([]byte("x")); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(out, buf); err != nil {
		b.Fatal(err)
	}
	return durations(b, n, func() {
		if _, err := in.Write([]byte("k")); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(out, buf); err != nil {
			b.Fatal(err)
		}
	})
}

func writeBig(b *testing.B, path string, size int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := 0; i < size; i += len(chunk) {
		for k := range chunk {
			chunk[k] = byte(i + k*7)
		}
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// startSSHD runs OpenSSH's sshd on a loopback port for the user's key and
// returns the ssh arguments that reach it, the destination last.
func startSSHD(b *testing.B, me *sshUser, sshd string) []string {
	dir := b.TempDir()
	key := filepath.Join(dir, "id")
	for _, k := range []string{filepath.Join(dir, "host"), key} {
		if out, err := exec.Command(filepath.Join(me.bin, "ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", k).CombinedOutput(); err != nil {
			b.Fatalf("ssh-keygen: %v %s", err, out)
		}
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		b.Fatal(err)
	}
	port := testenv.FreePort(b)
	conf := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host
AuthorizedKeysFile %s/authorized_keys
PidFile %s/pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
Subsystem sftp internal-sftp
`, port, dir, dir, dir)
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	_ = os.MkdirAll("/run/sshd", 0o755)
	cmd := exec.Command(sshd, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	logs, _ := os.Create(filepath.Join(dir, "sshd.log"))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logs.Close() })
	args := []string{"-F", "/dev/null", "-i", key, "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR", "-p", strconv.Itoa(port), "root@127.0.0.1"}
	for deadline := time.Now().Add(time.Minute); sshCmd(me, args, "true").Run() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("sshd does not answer")
		}
	}
	return args
}
