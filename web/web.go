// Package web is the dashboard: static HTML, CSS and JavaScript embedded in
// the binary and served for every path the API and the workspace proxy do
// not claim. It talks to CodeHub only through the public REST API and its
// event stream; it holds no server-side state and never sees a password
// beyond posting it to the login endpoint.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// FS holds the dashboard's files: index.html and the assets it loads.
func FS() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		// The embedded tree is fixed at build time; a missing root is a
		// build defect, not a runtime condition.
		panic(err)
	}
	return sub
}

// Pages the single-page app answers itself; everything else is an asset or
// not found.
var pages = map[string]bool{
	"/": true, "/login": true, "/logout": true, "/cli-login": true,
	"/admin/users": true, "/admin/workspaces": true, "/admin/nodes": true, "/admin/templates": true, "/admin/audit": true,
}

// securityHeaders lock the dashboard to its own origin: no inline scripts,
// no framing, no third-party requests.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
}

// Handler serves the dashboard: index.html for its pages, files under
// /assets/, and the not-found page, with status 404, for anything else.
func Handler() http.Handler {
	files := FS()
	assets := http.FileServerFS(files)
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic(err)
	}
	notFound, err := fs.ReadFile(files, "404.html")
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p := path.Clean(r.URL.Path)
		switch {
		case pages[p]:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = w.Write(index)
		case strings.HasPrefix(p, "/assets/"):
			// Asset names carry no version, so browsers revalidate them.
			w.Header().Set("Cache-Control", "no-cache")
			assets.ServeHTTP(w, r)
		case p == "/favicon.ico":
			http.Redirect(w, r, "/assets/favicon.svg", http.StatusMovedPermanently)
		default:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusNotFound)
			if r.Method != http.MethodHead {
				_, _ = w.Write(notFound)
			}
		}
	})
}
