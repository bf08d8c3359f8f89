// Command upstream is the workspace stand-in the proxy tests run as a
// separate process: it echoes requests as JSON, streams a response in two
// parts (plainly and as server-sent events), sets cookies, reads uploads
// and echoes WebSocket messages. It prints its address on stdout and
// listens on 127.0.0.1 only.
//
// It also stands in for code-server as the program of a workspace of the
// single-machine backend (its code_server setting), which is how the peer
// benchmark puts it behind a real `codehub server`: it then listens where
// code-server's --bind-addr says and ignores code-server's other
// arguments. It does not check the upstream token; the proxy's tests
// check that the token is sent.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/coder/websocket"
)

func main() {
	ln, err := net.Listen("tcp", bindAddr(os.Args[1:]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	release := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "first")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintln(w, "second")
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: second\n\n")
	})
	mux.HandleFunc("/release", func(w http.ResponseWriter, r *http.Request) {
		release <- struct{}{}
	})
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 0 || n > 64<<20 {
			http.Error(w, "want /bytes/{n} with 0 <= n <= 64 MiB", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := make([]byte, min(n, 64<<10))
		for n > 0 {
			m, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				return
			}
			n -= m
		}
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		// Reading the body makes the server send "100 Continue" first when
		// the request expects it.
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "size": n})
	})
	mux.HandleFunc("/duplex", func(w http.ResponseWriter, r *http.Request) {
		// Answers before it reads the body, as a dev server reporting an
		// upload's progress does.
		rc := http.NewResponseController(w)
		if err := rc.EnableFullDuplex(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "started")
		_ = rc.Flush()
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			fmt.Fprintln(w, "read:", err)
			return
		}
		fmt.Fprintln(w, "size", n)
	})
	mux.HandleFunc("/set-cookie", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "codehub_session=planted; Path=/")
		w.Header().Add("Set-Cookie", "code-server-session=planted; Path=/")
		// Without "=" a browser stores a cookie with an empty name and sends
		// just its value, which servers read as a cookie of that name.
		w.Header().Add("Set-Cookie", "codehub_session; Path=/w/")
		w.Header().Add("Set-Cookie", "code-server-session; Path=/")
		w.Header().Add("Set-Cookie", "theirs=1; Path=/")
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		ctx := context.Background()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.Path, "raw_path": r.URL.RawPath, "query": r.URL.RawQuery,
			"host": r.Host, "headers": r.Header,
		})
	})
	srv := &http.Server{Handler: mux}
	_ = srv.Serve(ln)
}

// bindAddr is the address code-server's --bind-addr names, or a free
// loopback port without one.
func bindAddr(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--bind-addr="); ok {
			return v
		}
		if a == "--bind-addr" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return "127.0.0.1:0"
}
