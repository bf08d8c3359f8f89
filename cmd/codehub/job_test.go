package main

import (
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/internal/testenv"
)

func setJobEnv(t *testing.T, s3 testenv.S3, url string) {
	t.Setenv("ARCHIVE_URL", url)
	t.Setenv("S3_ENDPOINT", s3.Endpoint)
	t.Setenv("S3_ACCESS_KEY", s3.AccessKey)
	t.Setenv("S3_SECRET_KEY", s3.SecretKey)
	t.Setenv("S3_REGION", s3.Region)
	t.Setenv("S3_USE_SSL", "false")
}

// runJobLines runs the job and returns its exit code and stdout lines.
func runJobLines(t *testing.T, args ...string) (int, []string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := runJob(args, &stdout, &stderr)
	t.Logf("codehub job %v -> %d\nstdout:\n%sstderr:\n%s", args, code, stdout.String(), stderr.String())
	return code, strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
}

func lastLine(lines []string) string { return lines[len(lines)-1] }

// result is the RESULT field of a job's last line, without the fields
// after it (the archive it names).
func result(lines []string) string { return strings.Fields(lastLine(lines))[0] }

func TestJobArchiveAndRestore(t *testing.T) {
	s3 := testenv.NewS3(t)
	key := archive.Key("01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x8a0000000000000000aa")
	url := "s3://" + s3.Bucket + "/" + key
	setJobEnv(t, s3, url)
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "project"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "project", "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	code, lines := runJobLines(t, "archive", "--src", src)
	if code != 0 || lines[0] != "CODEHUB_JOB=archive ARCHIVE_URL="+url || lastLine(lines) != "RESULT=OK ARCHIVE_URL="+url {
		t.Fatalf("archive: exit %d, lines %q", code, lines)
	}
	code, lines = runJobLines(t, "archive", "--src", src)
	if code != 0 || lines[1] != "STEP=check RESULT=EXISTS" || lastLine(lines) != "RESULT=OK ARCHIVE_URL="+url {
		t.Fatalf("second archive: exit %d, lines %q", code, lines)
	}

	dst := t.TempDir()
	code, lines = runJobLines(t, "restore", "--dst", dst)
	if code != 0 || lines[0] != "CODEHUB_JOB=restore ARCHIVE_URL="+url || lastLine(lines) != "RESULT=OK ARCHIVE_URL="+url {
		t.Fatalf("restore: exit %d, lines %q", code, lines)
	}
	got, err := os.ReadFile(filepath.Join(dst, "project", "main.go"))
	if err != nil || string(got) != "package main\n" {
		t.Fatalf("restored main.go = %q, %v", got, err)
	}
}

// An archive names its parent by flag or, for a jobspec's variable, by
// CODEHUB_ARCHIVE_PARENT; the restore needs neither, the meta names the
// chain.
func TestJobArchiveWithParent(t *testing.T) {
	s3 := testenv.NewS3(t)
	ws := "01jb3x7k9q2m5n8p4r6s0t1v2w"
	keys := []string{archive.Key(ws, "01jb3x8a0000000000000000a1"), archive.Key(ws, "01jb3x8a0000000000000000a2"), archive.Key(ws, "01jb3x8a0000000000000000a3")}
	src := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("big.txt", strings.Repeat("unchanged ", 10000))
	setJobEnv(t, s3, "s3://"+s3.Bucket+"/"+keys[0])
	if code, lines := runJobLines(t, "archive", "--src", src); code != 0 {
		t.Fatalf("first archive: exit %d, lines %q", code, lines)
	}

	write("a.txt", "by flag\n")
	setJobEnv(t, s3, "s3://"+s3.Bucket+"/"+keys[1])
	code, lines := runJobLines(t, "archive", "--parent", keys[0], "--src", src)
	if code != 0 || !slices.Contains(lines, "STEP=parent PARENT="+keys[0]+" RESULT=OK DEPTH=1") {
		t.Fatalf("archive with --parent: exit %d, lines %q", code, lines)
	}

	write("b.txt", "by variable\n")
	setJobEnv(t, s3, "s3://"+s3.Bucket+"/"+keys[2])
	t.Setenv("CODEHUB_ARCHIVE_PARENT", keys[1])
	code, lines = runJobLines(t, "archive", "--src", src)
	if code != 0 || !slices.Contains(lines, "STEP=parent PARENT="+keys[1]+" RESULT=OK DEPTH=2") {
		t.Fatalf("archive with CODEHUB_ARCHIVE_PARENT: exit %d, lines %q", code, lines)
	}

	dst := t.TempDir()
	if code, lines := runJobLines(t, "restore", "--dst", dst); code != 0 || result(lines) != "RESULT=OK" {
		t.Fatalf("restore: exit %d, lines %q", code, lines)
	}
	for name, want := range map[string]string{"big.txt": strings.Repeat("unchanged ", 10000), "a.txt": "by flag\n", "b.txt": "by variable\n"} {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(got) != want {
			t.Errorf("restored %s = %.20q, %v", name, got, err)
		}
	}
}

func TestJobFailures(t *testing.T) {
	s3 := testenv.NewS3(t)
	missing := "s3://" + s3.Bucket + "/" + archive.Key("01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x8a0000000000000000zz")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"missing archive", map[string]string{"ARCHIVE_URL": missing}, []string{"restore", "--dst", "DIR"}, "ARCHIVE_NOT_FOUND"},
		{"wrong credentials", map[string]string{"ARCHIVE_URL": missing, "S3_SECRET_KEY": "wrong"}, []string{"restore", "--dst", "DIR"}, "S3_ACCESS_ERROR"},
		{"wrong credentials archive", map[string]string{"ARCHIVE_URL": missing, "S3_SECRET_KEY": "wrong"}, []string{"archive", "--src", "DIR"}, "S3_ACCESS_ERROR"},
		{"bad url", map[string]string{"ARCHIVE_URL": "https://x/y"}, []string{"archive", "--src", "DIR"}, "UNKNOWN"},
		{"no url", map[string]string{"ARCHIVE_URL": ""}, []string{"archive", "--src", "DIR"}, "UNKNOWN"},
		{"bad ssl flag", map[string]string{"ARCHIVE_URL": missing, "S3_USE_SSL": "maybe"}, []string{"archive", "--src", "DIR"}, "UNKNOWN"},
		{"no dir", map[string]string{"ARCHIVE_URL": missing}, []string{"archive"}, "UNKNOWN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setJobEnv(t, s3, missing)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			dir := t.TempDir()
			args := append([]string(nil), tt.args...)
			for i := range args {
				if args[i] == "DIR" {
					args[i] = dir
				}
			}
			code, lines := runJobLines(t, args...)
			prefix := "RESULT=FAIL CODEHUB_ERROR=" + tt.want + " DETAIL="
			if code != 1 || !strings.HasPrefix(lastLine(lines), prefix) {
				t.Fatalf("exit %d, last line %q; want 1 and %s…", code, lastLine(lines), prefix)
			}
		})
	}
}

func TestJobUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"unpack"}, {"archive", "--bogus"}} {
		var stdout, stderr strings.Builder
		if code := runJob(args, &stdout, &stderr); code != 1 || stderr.Len() == 0 {
			t.Errorf("runJob(%q) = %d, stderr %q; want 1 and a usage message", args, code, stderr.String())
		}
	}
}

// TestJobArchiveOnStopKeepsTrying: a stop archive that fails (S3 away)
// exits 1, so Nomad runs it again, until codehub gives it up with SIGUSR1:
// then its failure is its result and it exits 0.
func TestJobArchiveOnStopKeepsTrying(t *testing.T) {
	s3 := testenv.NewS3(t)
	// A port nothing listens on: S3 is away.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	away := l.Addr().String()
	l.Close()
	// Caught here too, so that a signal never takes the default action
	// of ending the test binary.
	held := make(chan os.Signal, 1)
	signal.Notify(held, syscall.SIGUSR1)
	defer signal.Stop(held)
	src := t.TempDir()
	const run = "01jb3x8a0000000000000000r1"
	for _, tc := range []struct {
		name   string
		giveUp bool
		want   int
	}{
		{"not given up", false, 1},
		{"given up", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setJobEnv(t, s3, "s3://"+s3.Bucket+"/"+archive.Key("01jb3x7k9q2m5n8p4r6s0t1v2w", run))
			t.Setenv("S3_ENDPOINT", away)
			t.Setenv("CODEHUB_RUN_ID", run)
			t.Setenv("CODEHUB_STOP_ARCHIVE_RUN", run)
			if tc.giveUp {
				timer := time.AfterFunc(500*time.Millisecond, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGUSR1) })
				defer timer.Stop()
			}
			code, lines := runJobLines(t, "archive", "--on-stop", "--src", src)
			if code != tc.want || result(lines) != "RESULT=FAIL" {
				t.Fatalf("exit %d, lines %q; want exit %d and RESULT=FAIL", code, lines, tc.want)
			}
		})
	}
}

// TestJobArchiveOnStop: a workspace's stop-archive task archives only when
// its variable names its own run; otherwise (codehub stopped the workspace
// itself and removed the variable, or a newer run replaced the program) it
// reports SKIPPED, writes nothing and exits 0, so the allocation ends
// without a failure.
func TestJobArchiveOnStop(t *testing.T) {
	s3 := testenv.NewS3(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "notes.txt"), []byte("unsaved elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, run, asked, want string
	}{
		{"variable removed", "01jb3x8a0000000000000000r1", "", "RESULT=SKIPPED"},
		{"an older run's program", "01jb3x8a0000000000000000r1", "01jb3x8a0000000000000000r2", "RESULT=SKIPPED"},
		{"asked", "01jb3x8a0000000000000000r1", "01jb3x8a0000000000000000r1", "RESULT=OK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := archive.Key("01jb3x7k9q2m5n8p4r6s0t1v2w", tc.run)
			setJobEnv(t, s3, "s3://"+s3.Bucket+"/"+key)
			if tc.asked == "" {
				// The template renders nothing without the variable.
				t.Setenv("S3_ACCESS_KEY", "")
				t.Setenv("S3_SECRET_KEY", "")
			}
			t.Setenv("CODEHUB_RUN_ID", tc.run)
			t.Setenv("CODEHUB_STOP_ARCHIVE_RUN", tc.asked)
			code, lines := runJobLines(t, "archive", "--on-stop", "--src", src)
			if code != 0 || result(lines) != tc.want {
				t.Fatalf("exit %d, lines %q; want exit 0 and %s", code, lines, tc.want)
			}
			_, err := archive.NewStore(hclog.NewNullLogger(), s3.Client, s3.Bucket).Stat(t.Context(), key)
			if made := err == nil; made != (tc.want == "RESULT=OK") {
				t.Errorf("archive made = %v (%v), want %v", made, err, tc.want == "RESULT=OK")
			}
		})
	}
}

// A prebuild's archive is written under the key its build's commit
// completes, which its result line names; a build that wrote no commit
// fails as a build, archiving nothing.
func TestJobArchivePrebuild(t *testing.T) {
	s3 := testenv.NewS3(t)
	prefix := archive.PrebuildPrefix("01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x8a0000000000000000aa", "node", "0a1b2c3d")
	setJobEnv(t, s3, "s3://"+s3.Bucket+"/"+prefix)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "built"), []byte("yes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commitFile := filepath.Join(t.TempDir(), "commit")
	for _, bad := range []string{"", "main\n"} {
		if bad != "" {
			if err := os.WriteFile(commitFile, []byte(bad), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		code, lines := runJobLines(t, "archive", "--commit-file", commitFile, "--src", src)
		out, err := archive.LastResult(strings.NewReader(strings.Join(lines, "\n")), archive.ResultTail)
		if code != 1 || err != nil || out.Code != archive.CodeBuildFailed {
			t.Fatalf("commit file %q: exit %d, result %+v, %v", bad, code, out, err)
		}
	}
	commit := "0123456789abcdef0123456789abcdef01234567"
	if err := os.WriteFile(commitFile, []byte(commit+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, lines := runJobLines(t, "archive", "--commit-file", commitFile, "--src", src)
	url := "s3://" + s3.Bucket + "/" + archive.PrebuildKey(prefix, commit)
	if code != 0 || lastLine(lines) != "RESULT=OK ARCHIVE_URL="+url+" COMMIT="+commit {
		t.Fatalf("archive: exit %d, lines %q", code, lines)
	}
	setJobEnv(t, s3, url)
	dst := t.TempDir()
	if code, lines := runJobLines(t, "restore", "--dst", dst); code != 0 {
		t.Fatalf("restore of the prebuilt home: exit %d, lines %q", code, lines)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "built")); err != nil || string(got) != "yes\n" {
		t.Fatalf("restored file = %q, %v", got, err)
	}
}
