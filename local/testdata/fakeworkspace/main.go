// Command fakeworkspace stands in for code-server in tests: it serves
// /healthz on the given address, reports its HOME, and can start a
// grandchild in a session of its own (as code-server's terminals are) or
// exit at once with a given code.
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
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `{"status":"alive"}`)
	})
	http.HandleFunc("/home", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, os.Getenv("HOME"))
	})
	fmt.Println("fakeworkspace: serving on", *listen)
	if err := http.ListenAndServe(*listen, nil); err != nil {
		fmt.Println("fakeworkspace:", err)
		os.Exit(1)
	}
}
