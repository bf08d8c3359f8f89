package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// userCLI is what the user commands (login, ws) work with; tests give it
// their own input, output and browser.
type userCLI struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// openURL shows an address in the user's browser.
	openURL func(string) error
}

func newUserCLI(stdin io.Reader, stdout, stderr io.Writer) (*userCLI, context.CancelFunc) {
	ctx, stop := signalContext()
	return &userCLI{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, openURL: openBrowser}, stop
}

func runLogin(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	u, stop := newUserCLI(stdin, stdout, stderr)
	defer stop()
	return u.login(args)
}

var loginCommand = userCommand{
	usage: "codehub login [options] URL",
	about: `
Log in to the CodeHub server at URL and keep a token for the "codehub ws"
commands.

By default the server's approval page opens in your browser; log in there
if asked and approve. The server then gives this command a read-write token
that lasts 90 days, named after this computer. With -token-stdin, paste a
token made in the dashboard (API tokens) instead, for example a read-only
one; that is also the way on a machine without a browser, since the
approval returns to this computer's loopback address.

The token is stored in your configuration directory
(~/.config/codehub/credentials.json on Linux), readable by you alone. The
environment variables CODEHUB_URL and CODEHUB_TOKEN, when set, are used
instead of it.`,
	extra: `Examples:

  $ codehub login https://codehub.example.com
  $ codehub login -token-stdin https://codehub.example.com < token.txt

` + exitStatusHelp,
}

// loginWait bounds how long the browser login waits for the approval.
const loginWait = 5 * time.Minute

// errLoginDenied reports a browser login the user refused.
var errLoginDenied = errors.New("the login was refused in the browser")

func (u *userCLI) login(args []string) int {
	fs := loginCommand.flagSet("login", u.stdout, u.stderr)
	fromStdin := fs.Bool("token-stdin", false, "Read a token from the first line of standard input instead of opening the browser.")
	name := fs.String("name", defaultTokenName(), "The `name` of the token the browser login makes, as the dashboard lists it.")
	noBrowser := fs.Bool("no-browser", false, "Print the approval address instead of opening a browser.")
	pos, help, err := parseArgs(fs, args)
	switch {
	case help:
		return exitOK
	case err != nil:
		return exitUsage
	case len(pos) != 1:
		fmt.Fprintln(u.stderr, `codehub login: give the server's URL, e.g. "codehub login https://codehub.example.com"`)
		return exitUsage
	}
	base, err := serverURL(pos[0])
	if err != nil {
		fmt.Fprintf(u.stderr, "codehub login: %v\n", err)
		return exitUsage
	}
	var token string
	if *fromStdin {
		if token, err = readToken(u.stdin); err != nil {
			fmt.Fprintf(u.stderr, "codehub login: %v\n", err)
			return exitUsage
		}
	} else if token, err = u.browserLogin(base, *name, *noBrowser); err != nil {
		fmt.Fprintf(u.stderr, "codehub login: %v\n", err)
		return loginExit(err)
	}
	// A token is stored only once the server accepted it.
	var sess struct {
		User struct {
			Username string `json:"username"`
		} `json:"user"`
	}
	if err := newClient(credentials{URL: base, Token: token}).get(u.ctx, "/api/v1/session", &sess); err != nil {
		fmt.Fprintf(u.stderr, "codehub login: %s did not accept the token: %v\n", base, err)
		return exitStatus(err)
	}
	path, err := saveCredentials(credentials{URL: base, Token: token})
	if err != nil {
		fmt.Fprintf(u.stderr, "codehub login: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(u.stdout, "Logged in to %s as %s. The token is stored in %s.\n", base, sess.User.Username, path)
	return exitOK
}

func loginExit(err error) int {
	if errors.Is(err, errLoginDenied) {
		return exitRefused
	}
	return exitStatus(err)
}

func defaultTokenName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "codehub CLI"
	}
	return "codehub CLI on " + host
}

// readToken takes the first line of r.
func readToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the token: %w", err)
	}
	token := strings.TrimSpace(line)
	if token == "" {
		return "", errors.New("no token on standard input")
	}
	return token, nil
}

// loginResult is how the browser's answer ended: a token, or why not.
type loginResult struct {
	token string
	err   error
}

// browserLogin has the user approve the login in the dashboard, which
// sends the browser back to a listener on 127.0.0.1 with a one-time code,
// and redeems the code, with the verifier of the challenge sent along, for
// a token. The state value ties the answer to this run: a page elsewhere
// cannot feed this command a code of its own.
func (u *userCLI) browserLogin(base, name string, noBrowser bool) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen for the browser: %w", err)
	}
	state, err := randomState()
	if err != nil {
		ln.Close()
		return "", err
	}
	verifier, challenge, err := newVerifier()
	if err != nil {
		ln.Close()
		return "", err
	}
	redeem := func(code string) (string, error) {
		res, err := newClient(credentials{URL: base}).do(u.ctx, http.MethodPost, "/api/v1/token-grants/redeem", map[string]string{"code": code, "code_verifier": verifier})
		if err != nil {
			return "", fmt.Errorf("redeem the approval: %w", err)
		}
		var created struct {
			Secret string `json:"secret"`
		}
		if err := decodeAnswer(res.body, &created); err != nil {
			return "", err
		}
		return created.Secret, nil
	}
	results := make(chan loginResult, 1)
	srv := &http.Server{Handler: callbackHandler(state, redeem, results), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Serve(ln)
	}()
	defer func() {
		// Shutdown, not Close: the browser's page saying how the login
		// ended is still being written when the result arrives.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		wg.Wait()
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	approve := base + "/cli-login?" + url.Values{"port": {strconv.Itoa(port)}, "state": {state}, "name": {name}, "challenge": {challenge}}.Encode()
	if noBrowser {
		fmt.Fprintf(u.stderr, "Open this address in a browser on this computer and approve the login:\n\n  %s\n\n", approve)
	} else {
		fmt.Fprintf(u.stderr, "Opening %s in your browser to approve the login.\n", approve)
		if err := u.openURL(approve); err != nil {
			fmt.Fprintf(u.stderr, "Could not open a browser (%v); open the address yourself.\n", err)
		}
	}
	fmt.Fprintln(u.stderr, "Waiting for the approval...")
	ctx, cancel := context.WithTimeout(u.ctx, loginWait)
	defer cancel()
	select {
	case r := <-results:
		return r.token, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("no approval arrived: %w", ctx.Err())
	}
}

// newVerifier returns a random verifier, which never leaves this process
// but in the redemption, and its S256 challenge, which travels through the
// browser to the server with the approval. The code the browser brings
// back is worth nothing without the verifier, so a code read from the
// browser's history or a log cannot be redeemed.
func newVerifier() (verifier, challenge string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("make the login verifier: %w", err)
	}
	verifier = base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

func randomState() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make the login state: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// callbackHandler takes the browser's return to the loopback address.
// The first answer with the right state is redeemed there and then, so
// the page tells the user how the login really ended; the result goes to
// results.
func callbackHandler(state string, redeem func(code string) (string, error), results chan<- loginResult) http.Handler {
	var answered sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("GET /callback", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1 {
			http.Error(w, "This login was not started by this codehub command; run codehub login again.", http.StatusBadRequest)
			return
		}
		code, denied := q.Get("code"), q.Get("error") != ""
		if !denied && code == "" {
			http.Error(w, "The approval carries no code.", http.StatusBadRequest)
			return
		}
		first := false
		answered.Do(func() { first = true })
		if !first {
			http.Error(w, "This login was already answered. Go back to the terminal.", http.StatusConflict)
			return
		}
		var res loginResult
		status, msg := http.StatusOK, "Login approved. You can close this tab and go back to the terminal."
		switch {
		case denied:
			res.err = errLoginDenied
			msg = "Login refused. You can close this tab."
		default:
			res.token, res.err = redeem(code)
			if res.err != nil {
				status, msg = http.StatusBadGateway, "The login did not complete: "+res.err.Error()+". Run codehub login again."
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		fmt.Fprintf(w, "<!doctype html><title>CodeHub</title><p>%s</p>\n", html.EscapeString(msg))
		// The page is written before the command goes on and ends.
		results <- res
	})
	return mux
}

// openBrowser asks the desktop to show address. The opener is left to
// run: some start the browser in their own process and end with it.
func openBrowser(address string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", address)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", address)
	default:
		cmd = exec.Command("xdg-open", address)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}
