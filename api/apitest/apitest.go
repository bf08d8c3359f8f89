// Package apitest starts a complete CodeHub HTTP surface for tests: a fresh
// PostgreSQL database with the schema, a private Redis database, the real
// workspace service layer and api.Server on a 127.0.0.1 listener. It plays
// the controller's part where a test needs a phase by writing the row.
package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/api"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/events"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// Password is the password of every user a test creates.
const Password = "correct horse battery staple"

// MetricsToken is the bearer token the test servers serve /metrics to.
const MetricsToken = "test-metrics-token"

// Config tunes an Env.
type Config struct {
	// PublicURL of a replica built by NewReplica; empty means the Env's URL.
	PublicURL         string
	MaxRunningPerUser int
	MaxRunningGlobal  int
	SubdomainBase     string
	TrustedProxies    []netip.Prefix
	HeartbeatInterval time.Duration
	// StreamWriteTimeout bounds each event stream write (0: the default).
	StreamWriteTimeout time.Duration
	// BodyReadTimeout bounds reading a request body (0: the default).
	BodyReadTimeout time.Duration
	// SendBuffer, when set, is the socket send buffer of every connection
	// the server accepts: small, a client that stops reading fills it fast.
	SendBuffer    int
	RouteTTL      time.Duration
	UpstreamToken func(workspaceID, runID string) string
	// Archives is where the service lists archives from; nil for none.
	Archives workspace.ArchiveStore
	// Progress reads the progress of archive and restore jobs; nil for
	// none.
	Progress api.ProgressReader
	// OIDC, when set, gives each replica's single sign-on settings from its
	// public URL (which the provider needs as the redirect URI).
	OIDC func(publicURL string) *api.OIDCOptions
	// NoPasswordLogin turns the password login off.
	NoPasswordLogin bool
	// Fleet answers the admin node endpoints; nil for none.
	Fleet controller.Fleet
	// Templates are the service's templates; nil offers the default only.
	Templates workspace.Templates
	// MaxPortShare is the widest port share level (empty: owner).
	MaxPortShare ports.Level
}

// Env is one running CodeHub HTTP surface with its databases.
type Env struct {
	t         testing.TB
	DBURL     string
	Pool      *pgxpool.Pool
	Redis     *redis.Client
	Service   *workspace.Service
	Upstreams *Upstreams
	// Ports connects the proxy to workspace ports a test registers.
	Ports  *Ports
	Server *api.Server
	HTTP   *httptest.Server
	// URL is the public URL (http://127.0.0.1:port).
	URL string
	// StopServer stops Server's background loops and waits for them, which
	// flushes the activity marks to Redis.
	StopServer func()
}

// Images are the images the service allows in tests.
var Images = []string{"codehub/test:1", "codehub/test:2"}

// New starts an Env; everything stops when the test ends.
func New(t testing.TB, cfg Config) *Env {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.PostgresURL(t)
	redisURL := testenv.RedisURL(t)
	pool, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatalf("open database: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool, hclog.NewNullLogger()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	ropts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("parse redis url: %v", err)
	}
	rdb := redis.NewClient(ropts)
	t.Cleanup(func() { _ = rdb.Close() })
	if cfg.MaxRunningPerUser == 0 {
		cfg.MaxRunningPerUser = 2
	}
	if cfg.MaxRunningGlobal == 0 {
		cfg.MaxRunningGlobal = 100
	}
	svc := workspace.NewService(hclog.NewNullLogger(), pool, workspace.Options{
		MaxRunningPerUser: cfg.MaxRunningPerUser, MaxRunningGlobal: cfg.MaxRunningGlobal,
		DefaultImage: Images[0], AllowedImages: Images, Policy: Policy, Archives: cfg.Archives,
		Templates: cfg.Templates,
	})
	e := &Env{t: t, DBURL: dbURL, Pool: pool, Redis: rdb, Service: svc, Upstreams: &Upstreams{addrs: map[string]string{}},
		Ports: &Ports{addrs: map[string]string{}}}
	// The listener exists before the server so the public URL is known.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	e.URL = "http://" + ln.Addr().String()
	if cfg.SendBuffer > 0 {
		ln = sendBufferListener{ln, cfg.SendBuffer}
	}
	e.Server = e.NewReplica(cfg)
	// As codehub server does, the proxy may take plain connections over.
	e.HTTP = &httptest.Server{
		Listener: e.Server.Listen(ln, 30*time.Second, 10*time.Second),
		Config:   &http.Server{Handler: e.Server, IdleTimeout: 30 * time.Second, ReadHeaderTimeout: 10 * time.Second},
	}
	e.HTTP.Start()
	t.Cleanup(e.HTTP.Close)
	e.StopServer = e.RunServer(e.Server)
	return e
}

// sendBufferListener sets the send buffer of each accepted connection.
type sendBufferListener struct {
	net.Listener
	size int
}

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.SetWriteBuffer(l.size); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, err
}

// NewReplica builds another api.Server over the same databases, as a
// second replica would be.
func (e *Env) NewReplica(cfg Config) *api.Server {
	e.t.Helper()
	publicURL := e.URL
	if cfg.PublicURL != "" {
		publicURL = cfg.PublicURL
	}
	opts := api.Options{
		PublicURL: publicURL, SubdomainBase: cfg.SubdomainBase, TrustedProxies: cfg.TrustedProxies,
		HeartbeatInterval: cfg.HeartbeatInterval, StreamWriteTimeout: cfg.StreamWriteTimeout, BodyReadTimeout: cfg.BodyReadTimeout, RouteTTL: cfg.RouteTTL, UpstreamToken: cfg.UpstreamToken, Registry: prometheus.NewRegistry(),
		MetricsToken: MetricsToken, NoPasswordLogin: cfg.NoPasswordLogin, MaxPortShare: cfg.MaxPortShare,
	}
	if cfg.OIDC != nil {
		opts.OIDC = cfg.OIDC(publicURL)
	}
	srv, err := api.New(hclog.NewNullLogger(), opts, api.Deps{Pool: e.Pool, Redis: e.Redis, Workspaces: e.Service, Upstreams: e.Upstreams, Progress: cfg.Progress, Fleet: cfg.Fleet, Ports: e.Ports})
	if err != nil {
		e.t.Fatalf("api.New: %v", err)
	}
	return srv
}

// RunServer runs srv's background loops until the test ends and returns
// a function that stops them and waits (running the final activity flush).
func (e *Env) RunServer(srv *api.Server) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	e.t.Cleanup(stop)
	return stop
}

// User is a user created by a test.
type User struct {
	ID       string
	Username string
}

// CreateUser adds a user with Password.
func (e *Env) CreateUser(username string, admin bool) User {
	e.t.Helper()
	hash, err := identity.HashPassword(Password)
	if err != nil {
		e.t.Fatalf("hash password: %v", err)
	}
	u, err := store.CreateUser(context.Background(), e.Pool, workspace.NewID(), username, hash, admin)
	if err != nil {
		e.t.Fatalf("create user %s: %v", username, err)
	}
	return User{ID: u.ID, Username: u.Username}
}

// Client is an HTTP client with a cookie jar, not following redirects.
func (e *Env) Client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Login returns a client holding a session of the user.
func (e *Env) Login(u User) *http.Client {
	e.t.Helper()
	c := e.Client()
	res := e.Do(c, http.MethodPost, "/api/v1/login", map[string]string{"username": u.Username, "password": Password})
	if res.StatusCode != http.StatusOK {
		e.t.Fatalf("login %s: status %d: %s", u.Username, res.StatusCode, res.Body)
	}
	return c
}

// Response is a read response.
type Response struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

// Decode unmarshals the body into v.
func (r Response) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// ErrorCode is the code of an error envelope, or "".
func (r Response) ErrorCode() string {
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &env)
	return env.Error.Code
}

// Do sends a JSON request (body nil for none) to the public URL.
func (e *Env) Do(c *http.Client, method, path string, body any, headers ...string) Response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = strings.NewReader(string(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatalf("encode body: %v", err)
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("read %s %s: %v", method, path, err)
	}
	return Response{StatusCode: res.StatusCode, Header: res.Header, Body: raw}
}

// SetPhase writes what the controller would: the observed phase and the
// operation in flight.
func (e *Env) SetPhase(id string, phase workspace.Phase, op workspace.Operation) {
	e.t.Helper()
	e.Exec(`UPDATE workspaces SET phase = $2, operation = $3 WHERE id = $1`, id, string(phase), string(op))
}

// Exec runs SQL against the test database.
func (e *Env) Exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("exec %q: %v", sql, err)
	}
}

// Workspace reads a workspace row, deleted or not.
func (e *Env) Workspace(id string) workspace.Workspace {
	e.t.Helper()
	rows, err := e.Pool.Query(context.Background(), `SELECT `+store.WorkspaceColumns+` FROM workspaces WHERE id = $1`, id)
	if err != nil {
		e.t.Fatalf("read workspace: %v", err)
	}
	w, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[workspace.Workspace])
	if err != nil {
		e.t.Fatalf("read workspace %s: %v", id, err)
	}
	return w
}

// CreateWorkspace creates a workspace for the user through the service.
func (e *Env) CreateWorkspace(u User, name string) workspace.Workspace {
	e.t.Helper()
	w, err := e.Service.Create(context.Background(), workspace.CreateRequest{OwnerID: u.ID, Name: name})
	if err != nil {
		e.t.Fatalf("create workspace %s: %v", name, err)
	}
	return w.Workspace
}

// Policy is the idle policy of every test server: the defaults of a
// configuration file that sets none.
var Policy = workspace.Policy{
	StandbyTTL: 10 * time.Minute, ArchiveTTL: 30 * time.Minute,
	MaxStandbyTTL: 8 * time.Hour, MaxArchiveTTL: 7 * 24 * time.Hour, MaxExtend: 8 * time.Hour,
}

// Upstreams resolves workspaces to addresses a test registers.
type Upstreams struct {
	mu    sync.Mutex
	addrs map[string]string
}

var _ controller.Upstreams = (*Upstreams)(nil)

// Set makes workspace id resolve to hostport.
func (u *Upstreams) Set(id, hostport string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.addrs[id] = hostport
}

// Resolve implements controller.Upstreams.
func (u *Upstreams) Resolve(_ context.Context, id string) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	a, ok := u.addrs[id]
	if !ok {
		return "", fmt.Errorf("workspace %s: %w", id, controller.ErrNoUpstream)
	}
	return a, nil
}

// Ports stands in for the workspace agent's port connections: it dials,
// over real TCP, the address a test registers for a workspace's port, and
// refuses every other port as the agent refuses a port of another
// workspace.
type Ports struct {
	mu    sync.Mutex
	addrs map[string]string
}

var _ proxy.PortDialer = (*Ports)(nil)

// Set makes port port of workspace id reach hostport.
func (p *Ports) Set(id string, port int, hostport string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addrs[proxy.PortLabel(id, port)] = hostport
}

// DialPort implements proxy.PortDialer.
func (p *Ports) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	p.mu.Lock()
	a, ok := p.addrs[proxy.PortLabel(id, port)]
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("workspace %s listens on no port %d: %w", id, port, agent.ErrRefused)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", a)
}

// HostOf returns host:port of a URL.
func HostOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse %s: %v", raw, err)
	}
	return u.Host
}

// Token makes a personal API token of u through the API and returns its
// secret; body is the request (name, scope, expires_in_days, admin).
func (e *Env) Token(u User, body map[string]any) string {
	e.t.Helper()
	res := e.Do(e.Login(u), http.MethodPost, "/api/v1/tokens", body)
	if res.StatusCode != http.StatusCreated {
		e.t.Fatalf("create token of %s: status %d: %s", u.Username, res.StatusCode, res.Body)
	}
	var created struct {
		Secret string `json:"secret"`
	}
	res.Decode(e.t, &created)
	return created.Secret
}

// StartListener runs the EventListener (the leader's part) and waits until
// it republishes notifications, so no notification of the test is missed:
// it sends probe notifications until one arrives on Redis.
func (e *Env) StartListener() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := events.NewListener(hclog.NewNullLogger(), e.DBURL, e.Redis, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = l.Run(ctx)
	}()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	probe := events.Notice{ID: "probe", OwnerID: "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36), Version: 1, Kind: events.KindUpdated}
	payload, _ := json.Marshal(probe)
	sub := e.Redis.Subscribe(ctx, events.Channel(probe.OwnerID))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		e.t.Fatalf("subscribe to the probe channel: %v", err)
	}
	received := sub.Channel()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if _, err := e.Pool.Exec(ctx, `SELECT pg_notify($1, $2)`, events.PGChannel, string(payload)); err != nil {
			e.t.Fatal(err)
		}
		select {
		case <-received:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	e.t.Fatal("listener did not republish a notification within 30 s")
}
