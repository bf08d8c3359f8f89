package api_test

import (
	"net/http"
	"testing"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/ports"
)

// TestPortSharesDocumented: the port endpoints answer as the OpenAPI
// document says, in subdomain mode and in path mode, where nothing is
// shared wider than its owner whatever the configured cap.
func TestPortSharesDocumented(t *testing.T) {
	for _, mode := range []struct {
		name, base      string
		configured, max ports.Level
	}{
		{"subdomain", "ws.test", ports.Authenticated, ports.Authenticated},
		{"path", "", ports.Public, ports.Owner},
	} {
		t.Run(mode.name, func(t *testing.T) {
			env := apitest.New(t, apitest.Config{SubdomainBase: mode.base, MaxPortShare: mode.configured})
			alice := env.CreateUser("alice", false)
			bob := env.CreateUser("bob", false)
			w := env.CreateWorkspace(alice, "web")
			c := env.Login(alice)
			v := validate(t, c)
			validate(t, env.Login(bob))
			path := "/api/v1/workspaces/" + w.ID + "/ports"
			if res := env.Do(c, http.MethodPut, path+"/8000", map[string]string{"share": string(mode.max)}); res.StatusCode != http.StatusOK {
				t.Fatalf("share %s: %d %s", mode.max, res.StatusCode, res.Body)
			}
			if res := env.Do(c, http.MethodPut, path+"/8000", map[string]string{"share": "public"}); res.StatusCode != http.StatusBadRequest || res.ErrorCode() != "SHARE_ABOVE_CAP" {
				t.Fatalf("share above the cap: %d %s", res.StatusCode, res.Body)
			}
			var list struct {
				MaxShare string `json:"max_share"`
			}
			res := env.Do(c, http.MethodGet, path, nil)
			res.Decode(t, &list)
			if res.StatusCode != http.StatusOK || list.MaxShare != string(mode.max) {
				t.Fatalf("list: %d %s, want max_share %s", res.StatusCode, res.Body, mode.max)
			}
			if v.seen[http.StatusOK] == 0 || v.seen[http.StatusBadRequest] == 0 {
				t.Fatalf("validated responses: %v", v.seen)
			}
		})
	}
}
