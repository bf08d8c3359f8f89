// Command fakeworkspace stands in for code-server in tests: it serves
// /healthz on the given address, reports its HOME, environment and user,
// tries to read or write files it is asked to, and can
// start a grandchild in a session of its own (as code-server's terminals
// are), leave a daemon behind that is no longer its descendant (as tmux or
// a disowned job in a closed terminal is), or exit at once with a given code.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve")
	exitCode := flag.Int("exit", -1, "exit at once with this code")
	child := flag.Bool("child", false, "start a long-lived grandchild in its own session")
	daemon := flag.Bool("daemon", false, "start a long-lived process in its own session whose parent exits")
	flag.Parse()
	if *exitCode >= 0 {
		fmt.Println("fakeworkspace: exiting as asked")
		os.Exit(*exitCode)
	}
	if *child {
		cmd := exec.Command("sleep", "3600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Println("fakeworkspace:", err)
			os.Exit(1)
		}
		if err := os.WriteFile("child.pid", []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
			fmt.Println("fakeworkspace:", err)
			os.Exit(1)
		}
	}
	if *daemon {
		// The shell exits at once, so init adopts the sleep.
		script := `setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $! >daemon.pid`
		if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
			fmt.Println("fakeworkspace:", err, string(out))
			os.Exit(1)
		}
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `{"status":"alive"}`)
	})
	http.HandleFunc("/home", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, os.Getenv("HOME"))
	})
	http.HandleFunc("/env", func(w http.ResponseWriter, _ *http.Request) {
		for _, kv := range os.Environ() {
			fmt.Fprintln(w, kv)
		}
	})
	http.HandleFunc("/id", func(w http.ResponseWriter, _ *http.Request) {
		groups, _ := os.Getgroups()
		fmt.Fprintln(w, os.Getuid(), os.Getgid(), len(groups))
	})
	http.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("path"))
		if err != nil {
			fmt.Fprint(w, "error: ", err)
			return
		}
		w.Write(b)
	})
	http.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		if err := os.WriteFile(r.URL.Query().Get("path"), []byte("written"), 0o600); err != nil {
			fmt.Fprint(w, "error: ", err)
			return
		}
		fmt.Fprint(w, "ok")
	})
	fmt.Println("fakeworkspace: serving on", *listen)
	if err := http.ListenAndServe(*listen, nil); err != nil {
		fmt.Println("fakeworkspace:", err)
		os.Exit(1)
	}
}
