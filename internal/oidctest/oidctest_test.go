package oidctest

import (
	"bytes"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBuild()
	os.Exit(code)
}

// TestControlDemandsTheSecret: nothing but the test that started the
// provider changes its users. A request to the control port without the
// secret, or with another, is refused and adds no one; the issuer's port
// serves no control at all.
func TestControlDemandsTheSecret(t *testing.T) {
	c := Client{ID: "rp", Secret: "rp-secret", RedirectURI: "http://127.0.0.1:1/callback"}
	p := Start(t, c)
	mallory := User{Subject: "m1", Username: "mallory", Password: "pw-mallory"}
	body := `{"Subject":"m1","Username":"mallory","Password":"pw-mallory"}`
	for _, tc := range []struct{ name, url, auth string }{
		{"no secret", p.control + ControlUsers, ""},
		{"another secret", p.control + ControlUsers, "Bearer " + strings.Repeat("0", len(p.secret))},
		{"the issuer's port", p.Issuer + ControlUsers, "Bearer " + p.secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, tc.url, bytes.NewReader([]byte(body)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode < 400 {
				t.Fatalf("status %d, want a refusal", res.StatusCode)
			}
		})
	}
	if status := loginFormStatus(t, p, c, mallory); status != http.StatusUnauthorized {
		t.Fatalf("login of a user added without the secret: status %d, want %d", status, http.StatusUnauthorized)
	}
	p.AddUser(mallory)
	if status := loginFormStatus(t, p, c, mallory); status != http.StatusFound {
		t.Fatalf("login of a user added with the secret: status %d, want %d", status, http.StatusFound)
	}
}

// loginFormStatus starts an authorization request of c and answers the
// provider's login form as u.
func loginFormStatus(t *testing.T, p *Provider, c Client, u User) int {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	authorize := p.Issuer + "/authorize?" + url.Values{
		"client_id": {c.ID}, "redirect_uri": {c.RedirectURI}, "response_type": {"code"},
		"scope": {"openid"}, "state": {"s"}, "code_challenge": {"E9Melhoe2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"},
		"code_challenge_method": {"S256"},
	}.Encode()
	form := p.redirectOf(t, client, authorize)
	res, err := client.PostForm(p.Issuer+LoginFormPath, url.Values{
		"authRequestID": {form.Query().Get("authRequestID")}, "username": {u.Username}, "password": {u.Password},
	})
	if err != nil {
		t.Fatalf("post login form: %v", err)
	}
	res.Body.Close()
	return res.StatusCode
}
