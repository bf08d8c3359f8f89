package web

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	tests := []struct {
		method, path string
		status       int
		contentType  string
		contains     string
	}{
		{"GET", "/", 200, "text/html", `<script src="/assets/app.js"`},
		{"GET", "/login", 200, "text/html", `id="login-form"`},
		{"GET", "/login?next=/w/x/", 200, "text/html", `id="login-form"`},
		{"GET", "/logout", 200, "text/html", `id="signout-confirm"`},
		{"GET", "/cli-login?port=1&state=s&name=n", 200, "text/html", `id="cli-allow"`},
		{"GET", "/admin/users", 200, "text/html", `id="users-body"`},
		{"GET", "/admin/workspaces", 200, "text/html", `id="all-ws-body"`},
		{"GET", "/admin/nodes", 200, "text/html", `id="nodes-body"`},
		{"GET", "/admin/audit", 200, "text/html", `id="audit-body"`},
		{"GET", "/admin/other", 404, "text/html", "Page not found"},
		{"GET", "/assets/admin.js", 200, "text/javascript", "adminPages"},
		{"HEAD", "/", 200, "text/html", ""},
		{"GET", "/assets/app.js", 200, "text/javascript", "EventSource"},
		{"GET", "/assets/app.css", 200, "text/css", ".card"},
		{"GET", "/assets/favicon.svg", 200, "image/svg+xml", "<svg"},
		{"GET", "/assets/missing.js", 404, "", ""},
		{"GET", "/index.html", 404, "text/html", "Page not found"},
		{"GET", "/404.html", 404, "text/html", "Page not found"},
		{"GET", "/nope", 404, "text/html", `<link rel="stylesheet" href="/assets/app.css">`},
		{"GET", "/nope/deeper?x=1", 404, "text/html", `href="/">Back to your workspaces</a>`},
		{"HEAD", "/nope", 404, "text/html", ""},
		{"POST", "/", 405, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", res.StatusCode, tt.status)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, tt.contentType) {
				t.Fatalf("Content-Type = %q, want %q", ct, tt.contentType)
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Fatalf("body does not contain %q", tt.contains)
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Fatalf("Content-Security-Policy = %q", csp)
			}
		})
	}
}

func TestFaviconRedirect(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/favicon.ico", nil))
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/assets/favicon.svg" {
		t.Fatalf("favicon: %d %q", rec.Code, rec.Header().Get("Location"))
	}
}

// topLevelName matches a name a dashboard script declares at its top level.
var topLevelName = regexp.MustCompile(`(?m)^(?:async\s+)?(?:function\*?|const|let|var|class)\s+([A-Za-z_$][\w$]*)`)

// TestScriptsShareNoNames: the dashboard's scripts are classic scripts in
// one global scope, where a later declaration of a name silently replaces
// an earlier one (an admin page's helper once replaced the dashboard's
// Start button handler).
func TestScriptsShareNoNames(t *testing.T) {
	scripts, err := fs.Glob(static, "static/assets/*.js")
	if err != nil || len(scripts) < 2 {
		t.Fatalf("scripts %v: %v", scripts, err)
	}
	declared := map[string]string{}
	for _, name := range scripts {
		src, err := fs.ReadFile(static, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range topLevelName.FindAllSubmatch(src, -1) {
			id := string(m[1])
			if other, ok := declared[id]; ok && other != name {
				t.Errorf("%s and %s both declare %q", other, name, id)
			}
			declared[id] = name
		}
	}
}
