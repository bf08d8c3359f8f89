package api

import (
	"testing"

	"github.com/codehub-io/codehub/proxy"
)

func TestLoginNext(t *testing.T) {
	paths, err := proxy.NewSites("https://hub.example.com", "")
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := proxy.NewSites("https://hub.example.com", "ws.example.com")
	if err != nil {
		t.Fatal(err)
	}
	const id = "01hzzzzzzzzzzzzzzzzzzzzzzz"
	for _, tc := range []struct {
		sites  proxy.Sites
		next   string
		want   string
		wantID string
	}{
		{paths, "", "/", ""},
		{paths, "/", "/", ""},
		{paths, "/w/abc/?x=1", "/w/abc/?x=1", ""},
		{paths, "/cli-login?port=5555&state=s", "/cli-login?port=5555&state=s", ""},
		{paths, "/admin/users#top", "/admin/users#top", ""},
		{paths, "https://hub.example.com/w/abc/", "/w/abc/", ""},
		{paths, "HTTPS://HUB.EXAMPLE.COM/x", "/x", ""},
		{paths, "relative", "/relative", ""},
		{paths, "/login", "/", ""},
		{paths, "/login?next=/x", "/", ""},
		// Off-site, written every way a browser still reads as off-site.
		{paths, "/\t/evil.example", "/", ""},
		{paths, "/\n/evil.example", "/", ""},
		{paths, " //evil.example", "/", ""},
		{paths, "/\\evil.example", "/", ""},
		{paths, "\\\\evil.example", "/", ""},
		{paths, "//evil.example", "/", ""},
		{paths, "///evil.example", "/", ""},
		{paths, "https://evil.example/", "/", ""},
		{paths, "https://hub.example.com.evil.example/", "/", ""},
		{paths, "https://hub.example.com@evil.example/", "/", ""},
		{paths, "https://user@hub.example.com/", "/", ""},
		{paths, "http://hub.example.com/", "/", ""},
		{paths, "https://hub.example.com:8443/", "/", ""},
		{paths, "https://hub.example.com//evil.example", "/", ""},
		{paths, "https:evil.example", "/", ""},
		{paths, "javascript:alert(1)", "/", ""},
		{paths, "JavaScript:alert(1)", "/", ""},
		{paths, "data:text/html,x", "/", ""},
		// Encoded once more, the characters stay in the path on this site.
		{paths, "/%09/evil.example", "/%09/evil.example", ""},
		{paths, "/%2F/evil.example", "/%2F/evil.example", ""},
		{paths, "/%5Cevil.example", "/%5Cevil.example", ""},
		{paths, "%2F%2Fevil.example", "/%2F%2Fevil.example", ""},
		// A workspace host only in subdomain mode, and only a real one.
		{paths, "https://" + id + ".ws.example.com/", "/", ""},
		{hosts, "https://" + id + ".ws.example.com/?x=1", "https://" + id + ".ws.example.com/?x=1", id},
		{hosts, "http://" + id + ".ws.example.com/", "/", ""},
		{hosts, "https://" + id + ".ws.example.com.evil.example/", "/", ""},
		{hosts, "https://" + id + ".evil.example/", "/", ""},
		{hosts, "https://not-an-id.ws.example.com/", "/", ""},
		{hosts, "/w/abc/", "/w/abc/", ""},
	} {
		got, gotID := loginNext(tc.sites, tc.next)
		if got != tc.want || gotID != tc.wantID {
			t.Errorf("loginNext(%q) = %q, %q; want %q, %q", tc.next, got, gotID, tc.want, tc.wantID)
		}
	}
}
