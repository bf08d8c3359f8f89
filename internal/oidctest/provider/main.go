// Command provider is the OpenID Provider that oidctest starts for a test:
// zitadel/oidc's op package, with its example in-memory storage, serving on
// 127.0.0.1 with a plain login form. It reads its set-up, the control
// secret and the clients, as one JSON value on stdin, prints its issuer URL
// and then its control URL on stdout, one a line, and exits when stdin
// closes, so it never outlives the test binary that started it.
//
// Every response of the protocol comes from the op package. The control
// listener, a second loopback port that answers only requests bearing the
// secret, is the test's hand on the provider's storage: it adds users and
// changes their groups and UserInfo answers there, and nowhere else.
package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"

	"github.com/codehub-io/codehub/internal/oidctest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "oidctest provider:", err)
		os.Exit(1)
	}
}

func run() error {
	in := json.NewDecoder(os.Stdin)
	var setup oidctest.Setup
	if err := in.Decode(&setup); err != nil {
		return fmt.Errorf("read set-up: %w", err)
	}
	if setup.Secret == "" {
		return errors.New("set-up has no control secret")
	}
	protocol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	control, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for control: %w", err)
	}
	issuer := "http://" + protocol.Addr().String()
	us := &users{byID: map[string]*oidctest.User{}, userinfoAs: map[string]string{}}
	handler, err := newProvider(issuer, setup.Clients, us)
	if err != nil {
		return err
	}
	errs := make(chan error, 3)
	go func() { errs <- http.Serve(protocol, handler) }()
	go func() { errs <- http.Serve(control, us.control(setup.Secret)) }()
	go func() {
		// The test binary holds stdin open while it runs; its end, however
		// it ends, closes it.
		_, _ = io.Copy(io.Discard, in.Buffered())
		_, _ = io.Copy(io.Discard, os.Stdin)
		errs <- nil
	}()
	fmt.Printf("%s\nhttp://%s\n", issuer, control.Addr())
	return <-errs
}

// newProvider is the op package's provider for issuer with clients
// registered, and the login form.
func newProvider(issuer string, clients []oidctest.Client, us *users) (http.Handler, error) {
	examples := map[string]*storage.Client{}
	ours := map[string]*registered{}
	for _, c := range clients {
		examples[c.ID] = storage.WebClient(c.ID, c.Secret, c.RedirectURI)
		r := &registered{Client: examples[c.ID], claims: c.Claims}
		if c.PostLogoutRedirectURI != "" {
			r.postLogout = []string{c.PostLogoutRedirectURI}
		}
		ours[c.ID] = r
	}
	st := &groupStorage{Storage: storage.NewStorageWithClients(us, examples), users: us, clients: ours}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:          [32]byte{1},
		CodeMethodS256:     true,
		AuthMethodPost:     true,
		SupportedUILocales: []language.Tag{language.English},
	}, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		return nil, fmt.Errorf("new provider: %w", err)
	}
	mux := http.NewServeMux()
	login := &loginForm{storage: st.Storage, callback: op.AuthCallbackURL(provider)}
	mux.Handle(oidctest.LoginFormPath, op.NewIssuerInterceptor(provider.IssuerFromRequest).Handler(login))
	mux.Handle("/", provider)
	return mux, nil
}

// registered is a client as the provider's storage hands it to the op
// package: the example client, with the settings oidctest.Client chose.
type registered struct {
	*storage.Client
	claims     oidctest.Claims
	postLogout []string
}

func (c *registered) IDTokenUserinfoClaimsAssertion() bool {
	return c.claims != oidctest.ClaimsInUserinfo
}

func (c *registered) PostLogoutRedirectURIs() []string { return c.postLogout }

// users is the provider's user store.
type users struct {
	mu   sync.Mutex
	byID map[string]*oidctest.User
	// userinfoAs maps a subject to the one whose claims UserInfo answers
	// with instead.
	userinfoAs map[string]string
}

// control serves the test's changes to the store, to requests that bear
// secret.
func (us *users) control(secret string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+oidctest.ControlUsers, func(w http.ResponseWriter, r *http.Request) {
		var u oidctest.User
		if !decode(w, r, &u) {
			return
		}
		us.mu.Lock()
		defer us.mu.Unlock()
		us.byID[u.Subject] = &u
	})
	mux.HandleFunc("POST "+oidctest.ControlGroups, func(w http.ResponseWriter, r *http.Request) {
		var g oidctest.GroupsChange
		if !decode(w, r, &g) {
			return
		}
		us.mu.Lock()
		defer us.mu.Unlock()
		u, ok := us.byID[g.Subject]
		if !ok {
			http.Error(w, "no user "+g.Subject, http.StatusNotFound)
			return
		}
		u.Groups = g.Groups
	})
	mux.HandleFunc("POST "+oidctest.ControlUserinfoAs, func(w http.ResponseWriter, r *http.Request) {
		var a oidctest.UserinfoChange
		if !decode(w, r, &a) {
			return
		}
		us.mu.Lock()
		defer us.mu.Unlock()
		if a.Other == "" {
			delete(us.userinfoAs, a.Subject)
			return
		}
		us.userinfoAs[a.Subject] = a.Other
	})
	want := []byte("Bearer " + secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "wrong control secret", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (us *users) exampleUser(u *oidctest.User) *storage.User {
	return &storage.User{ID: u.Subject, Username: u.Username, Password: u.Password, PreferredLanguage: language.English}
}

func (us *users) GetUserByID(id string) *storage.User {
	us.mu.Lock()
	defer us.mu.Unlock()
	if u, ok := us.byID[id]; ok {
		return us.exampleUser(u)
	}
	return nil
}

func (us *users) GetUserByUsername(name string) *storage.User {
	us.mu.Lock()
	defer us.mu.Unlock()
	for _, u := range us.byID {
		if u.Username == name {
			return us.exampleUser(u)
		}
	}
	return nil
}

func (us *users) ExampleClientID() string { return storage.ServiceUserID }

func (us *users) groups(id string) ([]string, bool) {
	us.mu.Lock()
	defer us.mu.Unlock()
	u, ok := us.byID[id]
	if !ok {
		return nil, false
	}
	return append([]string(nil), u.Groups...), true
}

// answeredAs is the user whose claims UserInfo answers with for subject.
func (us *users) answeredAs(subject string) (oidctest.User, bool) {
	us.mu.Lock()
	defer us.mu.Unlock()
	other, ok := us.userinfoAs[subject]
	if !ok {
		return oidctest.User{}, false
	}
	u, ok := us.byID[other]
	if !ok {
		return oidctest.User{}, false
	}
	return *u, true
}

// groupStorage is the example storage with a groups claim, put where each
// client's Claims says. The op package itself leaves the profile scope's
// claims (preferred_username) out of the ID token of a client that does
// not assert them.
type groupStorage struct {
	*storage.Storage
	users   *users
	clients map[string]*registered
}

func (s *groupStorage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, fmt.Errorf("client %s not found", id)
	}
	return c, nil
}

// SetUserinfoFromRequest fills the claims of an ID token.
func (s *groupStorage) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, token, scopes); err != nil {
		return err
	}
	if c, ok := s.clients[token.GetClientID()]; ok && c.claims != oidctest.ClaimsInIDToken {
		return nil
	}
	return s.addGroups(info, token.GetSubject())
}

// SetUserinfoFromToken fills the UserInfo answer: the profile scope's
// claims from the example storage, and the groups.
func (s *groupStorage) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	if other, ok := s.users.answeredAs(subject); ok {
		info.Subject = other.Subject
		info.PreferredUsername = other.Username
		subject = other.Subject
	}
	return s.addGroups(info, subject)
}

func (s *groupStorage) addGroups(info *oidc.UserInfo, subject string) error {
	groups, ok := s.users.groups(subject)
	if !ok {
		return fmt.Errorf("no user %s", subject)
	}
	if groups != nil {
		info.AppendClaims("groups", groups)
	}
	return nil
}

var formPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Test provider login</title></head>
<body><form method="post" action="/login/username">
<input type="hidden" name="authRequestID" value="{{.ID}}">
<label>Username <input id="idp-username" name="username"></label>
<label>Password <input id="idp-password" name="password" type="password"></label>
<button id="idp-submit" type="submit">Sign in</button>
{{if .Error}}<p id="idp-error">{{.Error}}</p>{{end}}
</form></body></html>
`))

// loginForm is the provider's login UI: a username and password form
// that completes the auth request.
type loginForm struct {
	storage  *storage.Storage
	callback func(context.Context, string) string
}

func (l *loginForm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.Form.Get("authRequestID")
	if r.Method == http.MethodPost {
		err := l.storage.CheckUsernamePassword(r.Form.Get("username"), r.Form.Get("password"), id)
		if err == nil {
			http.Redirect(w, r, l.callback(r.Context(), id), http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		_ = formPage.Execute(w, map[string]string{"ID": id, "Error": err.Error()})
		return
	}
	_ = formPage.Execute(w, map[string]string{"ID": id})
}
