// Command wsserver is the workspace program of the Nomad end-to-end tests:
// it answers /healthz and serves the files of its home directory, so a test
// can tell that a restored home holds what was archived. It writes a marker
// file first, so a home it cannot write to fails the start.
package main

import (
	"flag"
	"log"
	"net/http"
	"os"
	"path/filepath"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	home := flag.String("home", ".", "home directory to serve under /files/")
	flag.Parse()
	if err := os.WriteFile(filepath.Join(*home, ".wsserver-started"), []byte("ok\n"), 0o600); err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/files/", http.StripPrefix("/files/", http.FileServer(http.Dir(*home))))
	log.Fatal(http.ListenAndServe(*listen, mux))
}
