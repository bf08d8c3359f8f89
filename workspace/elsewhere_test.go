package workspace

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestElsewhereAllowed(t *testing.T) {
	const op = "01jb3x7k9q2m5n8p4r6s0t1v20"
	key := "archives/01jb3x7k9q2m5n8p4r6s0t1v2w/" + op + "/home.tar.zst"
	away := func(reason string) Workspace {
		w := Workspace{Operation: OpNone, ArchiveKey: &key, RestoreMarker: &key, Conditions: Conditions{
			CondVolumeReady: {Status: ConditionFalse, Reason: reason, Node: "node-a"},
		}}
		return w
	}
	for _, tc := range []struct {
		name    string
		w       func() Workspace
		confirm string
		want    error
	}{
		{"confirmed, node down", func() Workspace { return away(ReasonNodeDown) }, key, nil},
		{"confirmed, node gone", func() Workspace { return away(ReasonNodeGone) }, key, nil},
		{"unconfirmed", func() Workspace { return away(ReasonNodeDown) }, "", &LossError{}},
		{"another archive", func() Workspace { return away(ReasonNodeDown) }, "archives/x/y/home.tar.zst", &LossError{}},
		{"never archived", func() Workspace {
			w := away(ReasonNodeDown)
			w.ArchiveKey, w.RestoreMarker = nil, nil
			return w
		}, key, ErrInvalidState},
		{"node serves it", func() Workspace { return away(ReasonVolumeCreating) }, key, ErrInvalidState},
		{"drained node", func() Workspace { return away(ReasonNodeIneligible) }, key, ErrInvalidState},
		{"operation running", func() Workspace {
			w := away(ReasonNodeDown)
			w.Operation = OpRestoring
			return w
		}, key, ErrInvalidState},
		{"archive is the home already", func() Workspace {
			w := away(ReasonNodeDown)
			w.RestoreMarker = nil
			return w
		}, key, ErrInvalidState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := elsewhereAllowed(tc.w(), tc.confirm)
			var loss *LossError
			switch want := tc.want.(type) {
			case nil:
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case *LossError:
				if !errors.As(err, &loss) || loss.ArchiveKey != key || loss.Node != "node-a" {
					t.Fatalf("err = %v, want what would be lost", err)
				}
				if !strings.Contains(err.Error(), "node-a") || !strings.Contains(err.Error(), loss.ArchivedAt.Format(time.RFC3339)) || loss.ArchivedAt.IsZero() {
					t.Errorf("the message does not say what is lost: %v", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("err = %v, want %v", err, want)
				}
			}
		})
	}
}
