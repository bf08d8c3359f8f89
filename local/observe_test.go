package local

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

func TestAssemble(t *testing.T) {
	const a, b = "01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x7k9q2m5n8p4r6s0t1v2x"
	rec := jobRecord{OpID: "op1", ArchiveKey: "archives/k", Attempt: 2, Process: identity{PID: 10}}
	tests := []struct {
		name string
		l    listing
		want map[string]controller.Observed
	}{
		{
			name: "volume only",
			l:    listing{volumes: map[string]bool{a: true}},
			want: map[string]controller.Observed{a: {VolumeExists: true, VolumeReady: true}},
		},
		{
			name: "live and healthy",
			l: listing{
				volumes:    map[string]bool{a: true},
				workspaces: map[string]seenWorkspace{a: {live: true, ready: true}},
			},
			want: map[string]controller.Observed{a: {VolumeExists: true, VolumeReady: true, ContainerLive: true, UpstreamReady: true}},
		},
		{
			name: "live but not answering yet",
			l:    listing{workspaces: map[string]seenWorkspace{a: {live: true}}},
			want: map[string]controller.Observed{a: {ContainerLive: true}},
		},
		{
			name: "stopping: still live, never ready",
			l:    listing{workspaces: map[string]seenWorkspace{a: {live: true, ready: true, state: workspaceState{Stopped: true}}}},
			want: map[string]controller.Observed{a: {ContainerLive: true}},
		},
		{
			name: "stopped and gone",
			l:    listing{workspaces: map[string]seenWorkspace{a: {state: workspaceState{Stopped: true}, exited: true, exitCode: 137}}},
			want: map[string]controller.Observed{a: {}},
		},
		{
			name: "exited on its own",
			l: listing{workspaces: map[string]seenWorkspace{a: {exited: true, exitCode: 1,
				output: "Error: Cannot find module './cli'\nNode.js v20.20.2"}}},
			want: map[string]controller.Observed{a: {Failure: &controller.Failure{
				Reason:  workspace.ReasonStartFailed,
				Message: "workspace process exited with code 1, its output ending:\nError: Cannot find module './cli'\nNode.js v20.20.2",
			}}},
		},
		{
			name: "vanished without exit status",
			l:    listing{workspaces: map[string]seenWorkspace{a: {}}},
			want: map[string]controller.Observed{a: {Failure: &controller.Failure{
				Reason: workspace.ReasonStartFailed, Message: "workspace process ended without recording its exit status",
			}}},
		},
		{
			name: "jobs of two workspaces",
			l: listing{
				archives: map[string]seenJob{a: {record: rec, live: true}},
				restores: map[string]seenJob{b: {record: rec, exited: true, exitCode: 1, code: "ARCHIVE_NOT_FOUND", output: "RESULT=FAIL"}},
			},
			want: map[string]controller.Observed{
				a: {Archive: &controller.JobResult{OpID: "op1", ArchiveKey: "archives/k", Attempt: 2, Status: controller.JobRunning}},
				b: {Restore: &controller.JobResult{OpID: "op1", ArchiveKey: "archives/k", Attempt: 2, Status: controller.JobFailed,
					ExitCode: 1, ErrorCode: "ARCHIVE_NOT_FOUND", Message: "job exited with code 1, its output ending:\nRESULT=FAIL"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := assemble(tt.l).Workspaces
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("assemble =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestJobResult(t *testing.T) {
	rec := jobRecord{OpID: "op", ArchiveKey: "k", Attempt: 1, Process: identity{PID: 42}}
	tests := []struct {
		name string
		j    seenJob
		want controller.JobResult
	}{
		{"running", seenJob{record: rec, live: true}, controller.JobResult{Status: controller.JobRunning}},
		{"succeeded", seenJob{record: rec, exited: true}, controller.JobResult{Status: controller.JobSucceeded}},
		{"failed with code", seenJob{record: rec, exited: true, exitCode: 1, code: "DISK_FULL"},
			controller.JobResult{Status: controller.JobFailed, ExitCode: 1, ErrorCode: "DISK_FULL", Message: "job exited with code 1"}},
		{"recorded, never started", seenJob{record: jobRecord{OpID: "op", ArchiveKey: "k", Attempt: 1}},
			controller.JobResult{Status: controller.JobPending}},
		{"killed before recording", seenJob{record: rec},
			controller.JobResult{Status: controller.JobFailed, ExitCode: -1, ErrorCode: archive.CodeUnknown,
				Message: "job process ended without recording its exit status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.OpID, tt.want.ArchiveKey, tt.want.Attempt = tt.j.record.OpID, tt.j.record.ArchiveKey, tt.j.record.Attempt
			if got := jobResult(tt.j); !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("jobResult = %+v, want %+v", *got, tt.want)
			}
		})
	}
}

// The result line is the last a job prints, after any amount of output.
func TestReadJobFindsTheLastResultLine(t *testing.T) {
	b := newTestBackend(t, t.TempDir())
	dir := b.batchDir(testID, controller.JobArchive)
	noise := strings.Repeat("STEP=upload BYTES=1\n", 2*archive.ResultTail/20)
	files := map[string]string{
		jobFile:  `{"op_id":"op","archive_key":"k","attempt":1}`,
		exitFile: "1\n",
		logFile:  "RESULT=FAIL CODEHUB_ERROR=S3_ACCESS_ERROR\n" + noise + "RESULT=FAIL CODEHUB_ERROR=DISK_FULL DETAIL=\"no space\"\n",
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	j, found, err := b.readJob(testID, controller.JobArchive)
	if err != nil || !found {
		t.Fatalf("readJob = %v, %v", found, err)
	}
	if j.code != archive.CodeDiskFull || !strings.HasSuffix(j.output, "DETAIL=\"no space\"\n") {
		t.Fatalf("readJob code = %q, output ending %q", j.code, j.output[max(0, len(j.output)-60):])
	}
}

func TestParseStat(t *testing.T) {
	// The command name holds spaces and a ')' of its own.
	raw := "4242 (we ird) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615\n"
	got, err := parseStat([]byte(raw))
	if err != nil {
		t.Fatalf("parseStat: %v", err)
	}
	want := procStat{state: 'S', ppid: 1, pgid: 4240, startTicks: 987654}
	if got != want {
		t.Fatalf("parseStat = %+v, want %+v", got, want)
	}
	if _, err := parseStat([]byte("4242 (short) S 1")); err == nil {
		t.Fatal("parseStat accepted a truncated line")
	}
}

func TestCollectTree(t *testing.T) {
	children := map[int][]int{1: {10, 20}, 10: {11, 12}, 12: {13}, 20: {21}, 99: {100}}
	got := collectTree(children, 10)
	want := []int{11, 12, 13}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("collectTree = %v, want %v", got, want)
	}
}
