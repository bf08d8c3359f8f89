package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Exit statuses of the user commands (login, ws), documented in their help
// and in docs/api.md: scripts tell a missing workspace from a refused
// request from a failure.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitNotFound = 3
	exitRefused  = 4
)

const exitStatusHelp = `Exit status:

  0  success
  1  failed: the server could not be reached, or it failed
  2  usage error: the command line is wrong
  3  not found: no such workspace
  4  refused: the server refused the request (not logged in, an expired
     or read-only token, another user's workspace, a state that does not
     allow it, a running limit, invalid input)
`

// apiError is an error answer of the API: its status and envelope.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the server answered %d", e.Status)
	}
	return e.Message + " (" + e.Code + ")"
}

// errNotFound reports something the user named that does not exist.
var errNotFound = errors.New("not found")

// errNotLoggedIn reports that no credentials are stored.
var errNotLoggedIn = errors.New(`not logged in; run "codehub login URL" first`)

// exitStatus maps an error of a user command to its exit status.
func exitStatus(err error) int {
	var ae *apiError
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, errNotFound):
		return exitNotFound
	case errors.Is(err, errNotLoggedIn):
		return exitRefused
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		return exitNotFound
	case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
		return exitRefused
	}
	return exitFailed
}

// credentials are what "codehub login" stores: the server and a token.
type credentials struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// credentialsPath is where the token is kept: the user's configuration
// directory (XDG_CONFIG_HOME or ~/.config on Linux).
func credentialsPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the configuration directory: %w", err)
	}
	return filepath.Join(dir, "codehub", "credentials.json"), nil
}

// saveCredentials writes c readable by the user alone, replacing the file
// whole so a crash never leaves half a token.
func saveCredentials(c credentials) (string, error) {
	path, err := credentialsPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials-*")
	if err != nil {
		return "", fmt.Errorf("store credentials: %w", err)
	}
	// CreateTemp makes the file 0600 before anything is written to it.
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return "", fmt.Errorf("store credentials: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("store credentials: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("store credentials: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("store credentials: %w", err)
	}
	return path, nil
}

// loadCredentials returns the server and token to use: CODEHUB_URL and
// CODEHUB_TOKEN when the token is set (for automation), otherwise what
// "codehub login" stored.
func loadCredentials() (credentials, error) {
	if tok := os.Getenv("CODEHUB_TOKEN"); tok != "" {
		u := os.Getenv("CODEHUB_URL")
		if u == "" {
			return credentials{}, errors.New("CODEHUB_TOKEN is set but CODEHUB_URL is not")
		}
		return credentials{URL: strings.TrimRight(u, "/"), Token: tok}, nil
	}
	c, _, err := storedCredentials()
	return c, err
}

// storedCredentials returns what "codehub login" stored, and where.
func storedCredentials() (credentials, string, error) {
	path, err := credentialsPath()
	if err != nil {
		return credentials{}, "", err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return credentials{}, path, errNotLoggedIn
	}
	if err != nil {
		return credentials{}, path, fmt.Errorf("read credentials: %w", err)
	}
	var c credentials
	if err := json.Unmarshal(b, &c); err != nil || c.URL == "" || c.Token == "" {
		return credentials{}, path, fmt.Errorf("%s is damaged; run \"codehub login URL\" again", path)
	}
	return c, path, nil
}

// serverURL checks the URL given to login and returns it without a
// trailing slash.
func serverURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not a server address like https://codehub.example.com", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// client talks to the REST API with a token.
type client struct {
	base  string
	token string
	http  *http.Client
}

func newClient(c credentials) *client {
	return &client{base: c.URL, token: c.Token, http: &http.Client{Timeout: time.Minute}}
}

// response is an answer of the API that succeeded.
type response struct {
	header http.Header
	body   []byte
}

// do sends a request with an optional JSON body; an answer outside 2xx is
// an *apiError.
func (c *client) do(ctx context.Context, method, path string, body any) (response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Accept", "application/json")
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return response{}, fmt.Errorf("read the answer to %s %s: %w", method, path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return response{}, answerError(res.StatusCode, raw)
	}
	return response{header: res.Header, body: raw}, nil
}

// answerError reads the API's error envelope; an answer without one (a
// proxy in front of the server, the wrong address) keeps its status.
func answerError(status int, body []byte) *apiError {
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &apiError{Status: status}
	if json.Unmarshal(body, &env) == nil {
		e.Code, e.Message = env.Error.Code, env.Error.Message
	}
	return e
}

// get decodes the answer to a GET into out.
func (c *client) get(ctx context.Context, path string, out any) error {
	res, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return decodeAnswer(res.body, out)
}

func decodeAnswer(body []byte, out any) error {
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the server's answer is not what CodeHub sends: %w", err)
	}
	return nil
}
