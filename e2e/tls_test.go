package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/codehub-io/codehub/internal/testenv"
)

// TestNginxTLSFront puts nginx, configured by deploy/nginx/codehub.conf as
// written (only its names, addresses and paths replaced), in front of a
// codehub server in subdomain mode, with a wildcard certificate from a
// test CA: a client that trusts that CA and resolves codehub.test and
// *.codehub.test to the front logs in over HTTPS, creates a workspace,
// opens it on its own host through the session handoff and gets
// code-server's workbench, holds a WebSocket to the editor, and receives a
// live event the moment it happens. Plain HTTP is redirected to HTTPS.
func TestNginxTLSFront(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("no nginx on PATH: the TLS front test needs one (Debian's nginx)")
	}
	const domain = "codehub.test"
	dir := t.TempDir()
	ca := writeWildcardCert(t, dir, domain)
	httpsPort, httpPort := testenv.FreePort(t), testenv.FreePort(t)
	front := fmt.Sprintf("https://%s:%d", domain, httpsPort)

	cfg := localConfig(t)
	cfg.subdomainBase = domain
	cfg.publicURL = front
	cfg.proxyExtra = "  trusted_proxies = [\"127.0.0.1\"]\n"
	srv := startServer(t, cfg)
	upstream := strings.TrimPrefix(srv.url, "http://")

	conf, err := os.ReadFile(filepath.Join("..", "deploy", "nginx", "codehub.conf"))
	if err != nil {
		t.Fatal(err)
	}
	site := string(conf)
	for _, r := range []struct{ old, new string }{
		{"    server 10.0.0.11:8080 max_fails=1 fail_timeout=5s; # replica\n", "    server " + upstream + " max_fails=1 fail_timeout=5s;\n"},
		{"    server 10.0.0.12:8080 max_fails=1 fail_timeout=5s; # replica\n", ""},
		{"listen 80;", fmt.Sprintf("listen 127.0.0.1:%d;", httpPort)},
		{"listen 443 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", httpsPort)},
		{"/etc/ssl/codehub/fullchain.pem", filepath.Join(dir, "fullchain.pem")},
		{"/etc/ssl/codehub/privkey.pem", filepath.Join(dir, "privkey.pem")},
		{"codehub.example.com", domain},
	} {
		if !strings.Contains(site, r.old) {
			t.Fatalf("deploy/nginx/codehub.conf no longer holds %q", r.old)
		}
		site = strings.ReplaceAll(site, r.old, r.new)
	}
	startNginx(t, nginx, dir, site, fmt.Sprintf("127.0.0.1:%d", httpsPort))

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	// Every name of the domain is the front, as its DNS would say.
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return dialer.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		},
	}
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: transport}
	c := &apiClient{tb: t, base: front, http: client}

	// Plain HTTP goes to HTTPS, path and all.
	plain := *client
	plain.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := plain.Get(fmt.Sprintf("http://%s:%d/login", domain, httpPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// To the default port, where the front listens in production.
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusPermanentRedirect || loc != "https://"+domain+"/login" {
		t.Fatalf("plain HTTP: %d to %q, want 308 to https://%s/login", resp.StatusCode, loc, domain)
	}

	if code := c.do("POST", "/api/v1/login", map[string]string{"username": "admin", "password": adminPassword}, nil); code != http.StatusOK {
		t.Fatalf("login through the front: %d", code)
	}
	var ws createdWorkspace
	if code := c.do("POST", "/api/v1/workspaces", map[string]string{"name": "front"}, &ws); code != http.StatusCreated {
		t.Fatalf("create through the front: %d", code)
	}
	if want := fmt.Sprintf("https://%s.%s:%d/", ws.ID, domain, httpsPort); ws.URL != want {
		t.Fatalf("workspace url %q, want %q", ws.URL, want)
	}
	events := openEvents(t, client, front)
	c.settle(ws.ID, "RUNNING", time.Now())

	// A browser's navigation to the workspace's own host: the session
	// handoff through the dashboard's host, then code-server's redirect
	// to its folder, then the workbench.
	req, err := http.NewRequest("GET", ws.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	req.Header.Set("Sec-Fetch-Dest", "document")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "workbench") || resp.Request.URL.Host != fmt.Sprintf("%s.%s:%d", ws.ID, domain, httpsPort) {
		t.Fatalf("workspace through the front: %d at %s\n%.300s", resp.StatusCode, resp.Request.URL, body)
	}

	// The editor's WebSocket, upgraded through nginx with the workspace
	// host's session cookie.
	wsURL := "wss://" + resp.Request.URL.Host + "/?reconnectionToken=" + strconv.FormatInt(time.Now().UnixNano(), 36) + "&reconnection=false&skipWebSocketFrames=false"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, upgrade, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		status := 0
		if upgrade != nil {
			status = upgrade.StatusCode
		}
		t.Fatalf("editor WebSocket through the front: %v (status %d)", err, status)
	}
	conn.CloseNow()

	// A change shows on the live event stream at once: nginx holds
	// nothing back.
	changed := time.Now()
	c.setDesired(ws.ID, "STANDBY")
	select {
	case <-events.standby(ws.ID):
		t.Logf("the event of the stop arrived through the front %s after the request", time.Since(changed).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("no live event of the stop through the front within 20 s")
	}
}

// eventStream reads a live event stream in the background.
type eventStream struct {
	lines chan string
}

func openEvents(t *testing.T, client *http.Client, base string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	stream := *client
	stream.Timeout = 0
	resp, err := stream.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET /api/v1/events: %d", resp.StatusCode)
	}
	e := &eventStream{lines: make(chan string, 1024)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			select {
			case e.lines <- sc.Text():
			default:
			}
		}
	}()
	return e
}

// standby is closed once an update of workspace id wanting STANDBY comes.
func (e *eventStream) standby(id string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for line := range e.lines {
			if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"id":"`+id+`"`) && strings.Contains(line, `"desired_state":"STANDBY"`) {
				close(done)
				return
			}
		}
	}()
	return done
}

// writeWildcardCert writes, in dir, a certificate for domain and
// *.domain (fullchain.pem, privkey.pem) signed by a new CA, and returns
// the CA.
func writeWildcardCert(t *testing.T, dir, domain string) *x509.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "codehub test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: domain},
		DNSNames:  []string{domain, "*." + domain},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	if err := os.WriteFile(filepath.Join(dir, "fullchain.pem"), chain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "privkey.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// startNginx runs nginx in the foreground with site as its only server
// configuration, everything it writes under dir, until the test ends, and
// waits until it listens on addr.
func startNginx(t *testing.T, nginx, dir, site, addr string) {
	t.Helper()
	root := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	main := fmt.Sprintf(`daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events {}
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  include %[1]s/codehub.conf;
}
`, root)
	if err := os.WriteFile(filepath.Join(root, "nginx.conf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "codehub.conf"), []byte(site), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(nginx, "-t", "-p", root, "-c", filepath.Join(root, "nginx.conf")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	// Its output goes to its error log, and a worker never holds a pipe of
	// ours open.
	cmd := exec.Command(nginx, "-p", root, "-c", filepath.Join(root, "nginx.conf"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGTERM: the master stops its workers, then itself.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(root, "error.log"))
			t.Logf("nginx error log:\n%s", log)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
