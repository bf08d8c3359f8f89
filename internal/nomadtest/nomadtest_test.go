package nomadtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestRemoveDirEndsLeftovers: what a killed agent leaves running under
// its directory (a task working there, a helper writing its log there)
// is ended, and a process elsewhere is not.
func TestRemoveDirEndsLeftovers(t *testing.T) {
	dir, err := os.MkdirTemp("", "codehub-nomad-leftovers-")
	if err != nil {
		t.Fatal(err)
	}
	task := exec.Command("sleep", "300")
	task.Dir = dir
	log, err := os.Create(filepath.Join(dir, "helper.log"))
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command("sleep", "300")
	helper.Stdout = log
	outside := exec.Command("sleep", "300")
	for _, c := range []*exec.Cmd{task, helper, outside} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	_ = log.Close()
	t.Cleanup(func() {
		_ = outside.Process.Kill()
		_ = outside.Wait()
	})

	RemoveDir(t, dir)

	for name, c := range map[string]*exec.Cmd{"the task": task, "the helper": helper} {
		if !ended(c.Process.Pid) {
			t.Errorf("%s still runs", name)
			_ = c.Process.Kill()
		}
		_ = c.Wait()
	}
	if ended(outside.Process.Pid) {
		t.Error("a process outside the directory was ended")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the directory is still there: %v", err)
	}
}
