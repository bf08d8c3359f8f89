package proxy_test

import (
	"net/http"
	"testing"

	"github.com/codehub-io/codehub/api/apitest"
)

// TestProxyAPITokens: an API token opens no workspace, in path or
// subdomain mode, and a workspace never receives one, even alongside a
// session that does open it.
func TestProxyAPITokens(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  apitest.Config
	}{
		{"path mode", apitest.Config{}},
		{"subdomain mode", apitest.Config{SubdomainBase: "ws.test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := apitest.New(t, tc.cfg)
			alice := env.CreateUser("alice", false)
			w := runningWorkspace(t, env, alice, "web", startUpstream(t))
			secret := env.Token(alice, map[string]any{"name": "all", "scope": "read-write"})
			target, host := env.URL+"/w/"+w.ID+"/echo", []string{}
			if tc.cfg.SubdomainBase != "" {
				target, host = env.URL+"/echo", []string{"Host", w.ID + ".ws.test"}
			}
			anon := env.Client()
			if res := get(t, anon, target, append(host, "Authorization", "Bearer "+secret)...); res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("token alone: %d %s", res.StatusCode, res.Body)
			}
			if res := get(t, anon, target, append(host, append([]string{"Authorization", "Bearer " + secret}, pageLoad...)...)...); res.StatusCode != http.StatusFound {
				t.Fatalf("token alone, page load: %d %s", res.StatusCode, res.Body)
			}
			c := env.Login(alice)
			res := get(t, c, target, append(host, append([]string{"Authorization", "Bearer " + secret}, cookieHeader(c, env.URL)...)...)...)
			var e echo
			res.Decode(t, &e)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("session and token: %d %s", res.StatusCode, res.Body)
			}
			if v := http.Header(e.Headers).Values("Authorization"); len(v) > 0 {
				t.Fatalf("the workspace received Authorization %q", v)
			}
		})
	}
}
