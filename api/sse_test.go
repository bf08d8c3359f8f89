package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/workspace"
)

type sseEvent struct {
	ID   string
	Name string
	Data string
}

// sseStream reads events of one connection into a channel.
type sseStream struct {
	events chan sseEvent
	cancel context.CancelFunc
	done   chan struct{}
}

func openStream(t testing.TB, c *http.Client, baseURL, lastEventID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", baseURL+"/api/v1/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	res, err := c.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("open event stream: %v", err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("event stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	s := &sseStream{events: make(chan sseEvent, 256), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Name != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() {
	s.cancel()
	<-s.done
}

// next returns the next event other than a heartbeat.
func (s *sseStream) next(t testing.TB) sseEvent {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-s.events:
			if ev.Name != "heartbeat" {
				return ev
			}
		case <-timeout:
			t.Fatal("no event within 30 s")
		}
	}
}

// until returns the first event that satisfies ok, skipping others.
func (s *sseStream) until(t *testing.T, ok func(sseEvent, wsJSON) bool) (sseEvent, wsJSON) {
	t.Helper()
	for {
		ev := s.next(t)
		var w wsJSON
		_ = json.Unmarshal([]byte(ev.Data), &w)
		if ok(ev, w) {
			return ev, w
		}
	}
}

func TestEventsAcrossReplicas(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	w1 := env.CreateWorkspace(alice, "one")
	w2 := env.CreateWorkspace(alice, "two")
	bobs := env.CreateWorkspace(bob, "bobs")
	env.StartListener()

	// Replica B serves the streams; changes go through replica A (env.URL).
	replica := env.NewReplica(apitest.Config{HeartbeatInterval: 20 * time.Millisecond})
	env.RunServer(replica)
	b := httptest.NewServer(replica)
	t.Cleanup(b.Close)

	ac := env.Login(alice)
	stream := openStream(t, ac, b.URL, "")
	initial := map[string]string{}
	for range 2 {
		ev, w := stream.until(t, func(ev sseEvent, _ wsJSON) bool { return ev.Name == "workspace_updated" })
		initial[w.ID] = ev.ID
		if w.OwnerID != alice.ID {
			t.Fatalf("alice's stream shows %s of %s", w.ID, w.OwnerID)
		}
	}
	if initial[w1.ID] != w1.ID+":1" || initial[w2.ID] != w2.ID+":1" {
		t.Fatalf("initial event ids %v", initial)
	}
	bobStream := openStream(t, env.Login(bob), b.URL, "")
	if _, w := bobStream.until(t, func(ev sseEvent, _ wsJSON) bool { return ev.Name == "workspace_updated" }); w.ID != bobs.ID {
		t.Fatalf("bob's initial state is %s", w.ID)
	}
	// A heartbeat arrives on an idle stream.
	for ev := range stream.events {
		if ev.Name == "heartbeat" {
			if ev.Data != "{}" {
				t.Fatalf("heartbeat data %q", ev.Data)
			}
			break
		}
	}

	res := env.Do(ac, "PATCH", "/api/v1/workspaces/"+w1.ID, map[string]string{"desired_state": "STANDBY"})
	var patched wsJSON
	res.Decode(t, &patched)
	ev, got := stream.until(t, func(ev sseEvent, w wsJSON) bool { return w.ID == w1.ID })
	if ev.Name != "workspace_updated" || got.DesiredState != "STANDBY" || ev.ID != w1.ID+":"+itoa(patched.Version) {
		t.Fatalf("update event %s %s: %+v", ev.Name, ev.ID, got)
	}
	// A controller write (phase) shows too.
	env.SetPhase(w2.ID, workspace.PhaseStandby, workspace.OpStarting)
	_, got = stream.until(t, func(ev sseEvent, w wsJSON) bool { return w.ID == w2.ID })
	if got.Phase != "STARTING" {
		t.Fatalf("phase change event shows %+v", got)
	}
	// Bob's stream saw none of it: his next event is his own change.
	if _, err := env.Service.SetDesired(context.Background(), bobs.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	if ev := bobStream.next(t); !strings.HasPrefix(ev.ID, bobs.ID+":") {
		t.Fatalf("bob's stream got %s %s", ev.Name, ev.ID)
	}

	if res := env.Do(ac, "DELETE", "/api/v1/workspaces/"+w1.ID, nil); res.StatusCode != 204 {
		t.Fatalf("delete: %d", res.StatusCode)
	}
	ev, _ = stream.until(t, func(ev sseEvent, _ wsJSON) bool { return strings.HasPrefix(ev.ID, w1.ID+":") })
	if ev.Name != "workspace_deleted" || ev.Data != `{"id":"`+w1.ID+`"}` {
		t.Fatalf("delete event %s %s", ev.Name, ev.Data)
	}
	lastID := ev.ID

	// Disconnected, the client misses changes; reconnecting (to the other
	// replica) converges to the current state first.
	stream.close()
	if _, err := env.Service.Update(context.Background(), w2.ID, workspace.UpdateRequest{Name: ptr("renamed")}); err != nil {
		t.Fatal(err)
	}
	w3 := env.CreateWorkspace(alice, "three")
	current := map[string]int64{w2.ID: env.Workspace(w2.ID).Version, w3.ID: w3.Version}
	again := openStream(t, ac, env.URL, lastID)
	seen := map[string]int64{}
	for range 2 {
		ev := again.next(t)
		var w wsJSON
		_ = json.Unmarshal([]byte(ev.Data), &w)
		if ev.Name != "workspace_updated" || ev.ID != w.ID+":"+itoa(w.Version) {
			t.Fatalf("after reconnect: %s %s", ev.Name, ev.ID)
		}
		seen[w.ID] = w.Version
	}
	if seen[w2.ID] != current[w2.ID] || seen[w3.ID] != current[w3.ID] || len(seen) != 2 {
		t.Fatalf("reconnect state %v, want %v", seen, current)
	}
}

func TestEventsNeedSession(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	res := env.Do(env.Client(), "GET", "/api/v1/events", nil)
	if res.StatusCode != 401 || res.ErrorCode() != "UNAUTHENTICATED" {
		t.Fatalf("anonymous event stream: %d %s", res.StatusCode, res.Body)
	}
}

func ptr[T any](v T) *T { return &v }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A stream belongs to its session: after a logout it carries no more of the
// user's workspaces and closes.
func TestEventsEndWithSession(t *testing.T) {
	env := apitest.New(t, apitest.Config{HeartbeatInterval: 50 * time.Millisecond})
	alice := env.CreateUser("alice", false)
	w := env.CreateWorkspace(alice, "one")
	env.StartListener()
	c := env.Login(alice)
	stream := openStream(t, c, env.URL, "")
	if ev := stream.next(t); ev.ID != w.ID+":1" {
		t.Fatalf("initial event %s %s", ev.Name, ev.ID)
	}
	if res := env.Do(c, "POST", "/api/v1/logout", nil); res.StatusCode != 204 {
		t.Fatalf("logout: %d", res.StatusCode)
	}
	if _, err := env.Service.Update(context.Background(), w.ID, workspace.UpdateRequest{Name: ptr("after-logout")}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-stream.events:
			if ev.Name != "heartbeat" {
				t.Fatalf("stream of an ended session sent %s %s: %s", ev.Name, ev.ID, ev.Data)
			}
		case <-stream.done:
			return
		case <-timeout:
			t.Fatal("stream of an ended session still open after 10 s")
		}
	}
}

// A user without workspaces has nothing to send at first; the stream must
// still open at once rather than at the first heartbeat.
func TestEventsOpenWithoutWorkspaces(t *testing.T) {
	env := apitest.New(t, apitest.Config{HeartbeatInterval: time.Minute})
	c := env.Login(env.CreateUser("alice", false))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", env.URL+"/api/v1/events", nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("event stream did not open within 5 s: %v", err)
	}
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "retry: 2000\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
}

// HEAD of the event stream answers with the headers and ends: the client
// reuses the connection for its next request.
func TestEventsHead(t *testing.T) {
	env := apitest.New(t, apitest.Config{HeartbeatInterval: time.Minute})
	c := env.Login(env.CreateUser("alice", false))
	c.Timeout = 5 * time.Second
	res, err := c.Head(env.URL + "/api/v1/events")
	if err != nil {
		t.Fatalf("HEAD: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HEAD: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	res, err = c.Get(env.URL + "/api/v1/session")
	if err != nil {
		t.Fatalf("request after HEAD: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("session after HEAD: %d", res.StatusCode)
	}
}

// A client that opens an event stream and stops reading must not hold the
// stream (its goroutine, its hub registration) forever: once the socket's
// buffers are full, a write blocks, and the stream's write timeout ends it.
func TestEventStreamDropsAStalledReader(t *testing.T) {
	env := apitest.New(t, apitest.Config{HeartbeatInterval: time.Millisecond, StreamWriteTimeout: 200 * time.Millisecond, SendBuffer: 4096})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	u, _ := url.Parse(env.URL)
	var cookie string
	for _, ck := range c.Jar.Cookies(u) {
		cookie += ck.Name + "=" + ck.Value + "; "
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive window fills fast; the client then reads nothing.
	if err := conn.(*net.TCPConn).SetReadBuffer(1024); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET /api/v1/events HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nAccept: text/event-stream\r\n\r\n", u.Host, cookie); err != nil {
		t.Fatal(err)
	}
	streams := func() string {
		res := env.Do(env.Client(), "GET", "/metrics", nil, "Authorization", "Bearer "+apitest.MetricsToken)
		for _, line := range strings.Split(string(res.Body), "\n") {
			if strings.HasPrefix(line, "codehub_sse_clients ") {
				return strings.TrimPrefix(line, "codehub_sse_clients ")
			}
		}
		return ""
	}
	deadline := time.Now().Add(time.Minute)
	for streams() != "1" {
		if time.Now().After(deadline) {
			t.Fatal("the stream never opened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for streams() != "0" {
		if time.Now().After(deadline) {
			t.Fatal("a stream whose client stopped reading is still open")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
