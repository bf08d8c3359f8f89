package proxy

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/workspace"
)

func TestPortLabel(t *testing.T) {
	const id = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	if got := PortLabel(id, 8000); got != "8000--"+id {
		t.Errorf("PortLabel = %q", got)
	}
	cases := []struct {
		label string
		port  int
		ok    bool
	}{
		{"8000--" + id, 8000, true},
		{"1--" + id, 1, true},
		{"65535--" + id, 65535, true},
		{"65536--" + id, 0, false},
		{"0--" + id, 0, false},
		{"08000--" + id, 0, false},
		{"123456--" + id, 0, false},
		{"--" + id, 0, false},
		{"80a--" + id, 0, false},
		{"-80--" + id, 0, false},
		{"8000-" + id, 0, false},
		{"8000---" + id, 0, false},
		{"8000--" + id + "x", 0, false},
		{"8000--01JB3X7K9Q2M5N8P4R6S0T1V2W", 0, false},
		{id, 0, false},
		{id + "--8000", 0, false},
		{"", 0, false},
	}
	for _, c := range cases {
		gotID, port, ok := ParsePortLabel(c.label)
		if ok != c.ok || port != c.port || (ok && gotID != id) {
			t.Errorf("ParsePortLabel(%q) = %q, %d, %v; want port %d, %v", c.label, gotID, port, ok, c.port, c.ok)
		}
	}
}

func TestPortSites(t *testing.T) {
	const id = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	path, err := NewSites("https://code.example.com/", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := path.PortURL(id, 8000); got != "https://code.example.com/w/8000--"+id+"/" {
		t.Errorf("path mode port url %q", got)
	}
	if _, _, ok := path.PortFromHost("8000--" + id + ".ws.example.com"); ok {
		t.Error("path mode resolved a port subdomain")
	}
	sub, err := NewSites("http://localhost:8080", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if got := sub.PortURL(id, 3000); got != "http://3000--"+id+".localhost:8080/" {
		t.Errorf("subdomain port url %q", got)
	}
	hosts := []struct {
		host string
		port int
		ok   bool
	}{
		{"3000--" + id + ".localhost:8080", 3000, true},
		{"3000--" + id + ".LOCALHOST", 3000, true},
		{"3000--" + id + ".x.localhost", 0, false},
		{id + ".localhost", 0, false},
		{"localhost:8080", 0, false},
		{"3000--" + id + ".localhost.evil", 0, false},
	}
	for _, c := range hosts {
		gotID, port, ok := sub.PortFromHost(c.host)
		if ok != c.ok || port != c.port || (ok && gotID != id) {
			t.Errorf("PortFromHost(%q) = %q, %d, %v", c.host, gotID, port, ok)
		}
	}
	// A port host is never taken for a workspace's own host.
	if _, ok := sub.WorkspaceFromHost("3000--" + id + ".localhost"); ok {
		t.Error("a port host was taken for a workspace host")
	}
}

// TestWherePort: where tells a port's address from its workspace's, in
// both modes, and the dashboard's host hands a port's path over to its
// own host in subdomain mode.
func TestWherePort(t *testing.T) {
	const id = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	pathSites, _ := NewSites("http://code.test", "")
	subSites, _ := NewSites("http://code.test", "ws.test")
	cases := []struct {
		name   string
		sites  Sites
		host   string
		target string
		want   placement
		port   int
		path   string
		prefix string
	}{
		{"path mode port", pathSites, "code.test", "/w/8000--" + id + "/api?x=1", placed, 8000, "/api", "/w/8000--" + id},
		{"path mode port root", pathSites, "code.test", "/w/8000--" + id, slashless, 8000, "", ""},
		{"path mode workspace", pathSites, "code.test", "/w/" + id + "/", placed, 0, "/", "/w/" + id},
		{"path mode bad label", pathSites, "code.test", "/w/99999--" + id + "/", unplaced, 0, "", ""},
		{"subdomain port host", subSites, "8000--" + id + ".ws.test", "/api", placed, 8000, "/api", ""},
		{"subdomain workspace host", subSites, id + ".ws.test", "/x", placed, 0, "/x", ""},
		{"subdomain port path on the dashboard", subSites, "code.test", "/w/8000--" + id + "/a", elsewhere, 8000, "/a", ""},
	}
	for _, c := range cases {
		p := &Proxy{opts: Options{Sites: c.sites}}
		r := httptest.NewRequest("GET", "http://"+c.host+c.target, nil)
		got, pl := p.where(r)
		if pl != c.want || got.port != c.port || (pl != unplaced && got.id != id) || got.path != c.path || got.prefix != c.prefix {
			t.Errorf("%s: where = %+v, %d; want placement %d port %d path %q prefix %q", c.name, got, pl, c.want, c.port, c.path, c.prefix)
		}
	}
}

func TestEndForPort(t *testing.T) {
	down := errors.New("database unreachable")
	missing := fmt.Errorf("get workspace: %w", workspace.ErrNotFound)
	owner := ownerCheck{owner: "o"}
	cases := []struct {
		name  string
		user  string
		s     sessionCheck
		o     ownerCheck
		l     shareCheck
		limit ports.Level
		want  endReason
	}{
		{"owner on an owner port", "o", sessionCheck{user: "o", ok: true}, owner, shareCheck{level: ports.Owner}, ports.Public, 0},
		{"user on an authenticated port", "u", sessionCheck{user: "u", ok: true}, owner, shareCheck{level: ports.Authenticated}, ports.Public, 0},
		{"user after lowering to owner", "u", sessionCheck{user: "u", ok: true}, owner, shareCheck{level: ports.Owner}, ports.Public, endShare},
		{"visitor on a public port", "", sessionCheck{}, owner, shareCheck{level: ports.Public}, ports.Public, 0},
		{"visitor after lowering to authenticated", "", sessionCheck{}, owner, shareCheck{level: ports.Authenticated}, ports.Public, endShare},
		{"visitor after the cap went down", "", sessionCheck{}, owner, shareCheck{level: ports.Public}, ports.Authenticated, endShare},
		{"user whose session ended, authenticated port", "u", sessionCheck{}, owner, shareCheck{level: ports.Authenticated}, ports.Public, endSession},
		{"user whose session ended, public port", "u", sessionCheck{}, owner, shareCheck{level: ports.Public}, ports.Public, 0},
		{"owner whose workspace changed hands", "o", sessionCheck{user: "o", ok: true}, ownerCheck{owner: "p"}, shareCheck{level: ports.Owner}, ports.Public, endShare},
		{"workspace deleted", "u", sessionCheck{user: "u", ok: true}, ownerCheck{err: missing}, shareCheck{level: ports.Public}, ports.Public, endDeleted},
		{"session check failed", "u", sessionCheck{err: down}, owner, shareCheck{level: ports.Owner}, ports.Public, 0},
		{"share check failed", "u", sessionCheck{user: "u", ok: true}, owner, shareCheck{err: down}, ports.Public, 0},
		{"owner check failed", "u", sessionCheck{user: "u", ok: true}, ownerCheck{err: down}, shareCheck{level: ports.Owner}, ports.Public, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, end := endForPort(tc.user, tc.s, tc.o, tc.l, tc.limit)
			if got != tc.want || end != (tc.want != 0) {
				t.Fatalf("endForPort = %d, %v; want %d", got, end, tc.want)
			}
		})
	}
}

// TestOthersVerdict: someone other than the owner reaches the port of a
// running workspace and gets a plain 503 otherwise; nothing wakes it.
func TestOthersVerdict(t *testing.T) {
	cases := map[verdict]verdict{
		verdictProxy:        verdictProxy,
		verdictWakeAndProxy: verdictProxy,
		verdictWake:         verdictDown,
		verdictStarting:     verdictDown,
		verdictArchived:     verdictDown,
		verdictNotStarted:   verdictDown,
		verdictError:        verdictDown,
		verdictGone:         verdictGone,
	}
	for in, want := range cases {
		if got := othersVerdict(in); got != want {
			t.Errorf("othersVerdict(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestPortShareCap(t *testing.T) {
	path, _ := NewSites("http://code.test", "")
	sub, _ := NewSites("http://code.test", "ws.test")
	cases := []struct {
		sites      Sites
		configured ports.Level
		want       ports.Level
	}{
		{sub, "", ports.Owner},
		{sub, ports.Authenticated, ports.Authenticated},
		{sub, ports.Public, ports.Public},
		// Path mode serves a port on the dashboard's origin.
		{path, ports.Public, ports.Owner},
		{path, ports.Authenticated, ports.Owner},
	}
	for _, c := range cases {
		if got := PortShareCap(c.sites, c.configured); got != c.want {
			t.Errorf("PortShareCap(subdomain %v, %q) = %q, want %q", c.sites.SubdomainMode(), c.configured, got, c.want)
		}
	}
}
