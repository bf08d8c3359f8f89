package archive

import (
	"strings"
	"testing"
	"time"
)

func TestScratchHelper(t *testing.T) {
	_, s3 := newTestStore(t)
	cmd := helperCmd(s3, "archive", "/tmp/bt/src", "")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatal(err, out.String())
	}
	t.Logf("wall %v, cpu user %v sys %v\n%s", time.Since(start), cmd.ProcessState.UserTime(), cmd.ProcessState.SystemTime(), out.String())
}
