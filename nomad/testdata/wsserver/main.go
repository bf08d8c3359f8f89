// Command wsserver is the workspace program of the Nomad end-to-end tests:
// it answers /healthz and serves the files of its home directory, so a test
// can tell that a restored home holds what was archived. It writes a marker
// file first, so a home it cannot write to fails the start, and the
// template parameters it got (CODEHUB_PARAM_*, NUL-separated) next to it,
// so a test can compare them byte for byte. With
// HASHED_PASSWORD set it guards everything but /healthz the way code-server
// with --auth password does: the session cookie must equal that value.
package main

import (
	"crypto/subtle"
	"flag"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// sessionCookie is the cookie code-server reads its session from.
const sessionCookie = "code-server-session"

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	home := flag.String("home", ".", "home directory to serve under /files/")
	// Stands in for code-server, so it takes the flag codehub gives
	// code-server with upstream_auth = "code-server".
	flag.Bool("ignore-last-opened", false, "accepted and ignored, like code-server's")
	// Stands in for a program that takes a while to boot.
	listenDelay := flag.Duration("listen-delay", 0, "wait this long before listening")
	flag.Parse()
	if err := os.WriteFile(filepath.Join(*home, ".wsserver-started"), []byte("ok\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	var params []byte
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CODEHUB_PARAM_") {
			params = append(append(params, kv...), 0)
		}
	}
	if err := os.WriteFile(filepath.Join(*home, ".wsserver-params"), params, 0o600); err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/files/", http.StripPrefix("/files/", http.FileServer(http.Dir(*home))))

	var handler http.Handler = mux
	if token, ok := os.LookupEnv("HASHED_PASSWORD"); ok {
		// An empty secret would let an empty cookie in: refuse to start.
		if token == "" {
			log.Fatal("HASHED_PASSWORD is set but empty")
		}
		handler = requireSession(token, mux)
	}
	time.Sleep(*listenDelay)
	log.Fatal(http.ListenAndServe(*listen, handler))
}

// requireSession answers 401 to every request but /healthz whose session
// cookie is not token.
func requireSession(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && !hasSession(r, token) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func hasSession(r *http.Request, token string) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(c.Value), []byte(token)) == 1
}
