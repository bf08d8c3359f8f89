package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

type fakeResolver struct {
	asked []string
	err   error
}

func (f *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	f.asked = append(f.asked, host)
	if f.err != nil {
		return nil, f.err
	}
	return []string{"192.0.2.10"}, nil
}

// A subdomain base whose names do not resolve here gets a warning saying
// what to set and how to check; one that resolves, and *.localhost (which
// browsers resolve themselves), get none.
func TestCheckWildcard(t *testing.T) {
	for _, c := range []struct {
		name, base string
		err        error
		warn, ask  bool
	}{
		{"resolves", "codehub.example.com", nil, false, true},
		{"no record", "codehub.example.com", errors.New("no such host"), true, true},
		{"localhost", "localhost", errors.New("no such host"), false, false},
		{"under localhost", "dev.localhost", errors.New("no such host"), false, false},
	} {
		var out bytes.Buffer
		logger := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
		r := &fakeResolver{err: c.err}
		checkWildcard(context.Background(), logger, r, c.base)
		if warned := strings.Contains(out.String(), "[WARN]"); warned != c.warn {
			t.Errorf("%s: warned %v, want %v:\n%s", c.name, warned, c.warn, out.String())
		}
		if asked := len(r.asked) == 1; asked != c.ask {
			t.Errorf("%s: asked %v, want %v", c.name, r.asked, c.ask)
		}
		if c.ask && !strings.HasSuffix(r.asked[0], "."+c.base) {
			t.Errorf("%s: asked %q, not a name under %s", c.name, r.asked[0], c.base)
		}
		if c.warn && !strings.Contains(out.String(), "getent hosts codehub-check-") {
			t.Errorf("%s: the warning does not say how to check:\n%s", c.name, out.String())
		}
	}
}
