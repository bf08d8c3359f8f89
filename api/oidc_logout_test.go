package api

import (
	"net/url"
	"testing"
)

func TestEndSessionURL(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		want     url.Values // nil: refused
	}{
		{"https://idp.example.com/logout", url.Values{}},
		// Parameters the provider put in its endpoint stay.
		{"https://idp.example.com/oidc/logout?tenant=acme", url.Values{"tenant": {"acme"}}},
		{"ftp://idp.example.com/logout", nil},
		{"/logout", nil},
		{"javascript:alert(1)", nil},
	} {
		got, err := endSessionURL(tc.endpoint, "id.token.raw", "codehub", "https://hub.example.com/", "st")
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s: %s, want refused", tc.endpoint, got)
			}
			continue
		}
		u, perr := url.Parse(got)
		if err != nil || perr != nil {
			t.Fatalf("%s: %q, %v", tc.endpoint, got, err)
		}
		want := url.Values{"id_token_hint": {"id.token.raw"}, "client_id": {"codehub"},
			"post_logout_redirect_uri": {"https://hub.example.com/"}, "state": {"st"}}
		for k, v := range tc.want {
			want[k] = v
		}
		if q := u.Query(); q.Encode() != want.Encode() {
			t.Errorf("%s: parameters %v, want %v", tc.endpoint, q, want)
		}
	}
}
