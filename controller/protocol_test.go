package controller

import (
	"errors"
	"reflect"
	"testing"

	"github.com/codehub-io/codehub/archive"
)

func TestNames(t *testing.T) {
	const id = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	for _, kind := range []JobKind{JobWorkspace, JobArchive, JobRestore} {
		ws, k, ok := ParseJobName(JobName(id, kind))
		if !ok || ws != id || k != kind {
			t.Errorf("ParseJobName(JobName(%q)) = %q, %q, %v", kind, ws, k, ok)
		}
	}
	if ws, ok := ParseVolumeName(VolumeName(id)); !ok || ws != id {
		t.Errorf("ParseVolumeName(VolumeName) = %q, %v", ws, ok)
	}
	for _, name := range []string{
		"ws-" + id + "-other", "ws-" + id + "-home", "ws-short", "web", ".new-123",
		"ws-01JB3X7K9Q2M5N8P4R6S0T1V2W", "ws-01jb3x7k9q2m5n8p4r6s0t1v2u", "ws-../../etc/passwd/aaaaaaaaaaaa",
	} {
		if ws, kind, ok := ParseJobName(name); ok {
			t.Errorf("ParseJobName(%q) = %q, %q; want no job", name, ws, kind)
		}
	}
	for _, name := range []string{"ws-" + id, "ws-" + id + "-archive", "ws-short-home", "ws-01jb3x7k9q2m5n8p4r6s0t1v2u-home"} {
		if ws, ok := ParseVolumeName(name); ok {
			t.Errorf("ParseVolumeName(%q) = %q; want no volume", name, ws)
		}
	}
}

func TestJobRunResult(t *testing.T) {
	spec := JobSpec{WorkspaceID: "w", OpID: "op", ArchiveKey: "archives/k", Attempt: 3}
	tests := []struct {
		name string
		run  JobRun
		want JobResult
	}{
		{"pending, with why", JobRun{State: RunPending, Message: "no node can run it"},
			JobResult{Status: JobPending, Message: "no node can run it"}},
		{"running", JobRun{State: RunLive}, JobResult{Status: JobRunning}},
		{"exited 0", JobRun{State: RunExited}, JobResult{Status: JobSucceeded}},
		{"exited with the mover's code", JobRun{State: RunExited, ExitCode: 1, Code: archive.CodeDiskFull, Output: "RESULT=FAIL\n"},
			JobResult{Status: JobFailed, ExitCode: 1, ErrorCode: archive.CodeDiskFull, Message: "job exited with code 1, its output ending:\nRESULT=FAIL"}},
		{"exited without a code", JobRun{State: RunExited, ExitCode: 2, Message: "task archive exited with code 2"},
			JobResult{Status: JobFailed, ExitCode: 2, ErrorCode: archive.CodeUnknown, Message: "task archive exited with code 2"}},
		// A job stopped while it ran may exit 0 or not: it did not finish.
		{"stopped", JobRun{State: RunEnded, ExitCode: 0},
			JobResult{Status: JobFailed, ExitCode: -1, ErrorCode: archive.CodeUnknown, Message: "job ended before it finished (stopped, killed or lost)"}},
		{"lost, with why", JobRun{State: RunEnded, Message: "node down"},
			JobResult{Status: JobFailed, ExitCode: -1, ErrorCode: archive.CodeUnknown, Message: "node down"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.OpID, tt.want.ArchiveKey, tt.want.Attempt = spec.OpID, spec.ArchiveKey, spec.Attempt
			if got := tt.run.Result(spec); !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("Result =\n%+v\nwant\n%+v", *got, tt.want)
			}
		})
	}
}

func TestRefusePurge(t *testing.T) {
	if err := RefusePurge("ws-x-archive"); err != nil {
		t.Fatalf("RefusePurge with nothing live = %v", err)
	}
	err := RefusePurge("ws-x-archive", "allocation a is running")
	if !errors.Is(err, ErrJobLive) {
		t.Fatalf("RefusePurge with a live allocation = %v, want ErrJobLive", err)
	}
}
