// Package identity owns who a request is and when that ends: password
// logins and their backoff, password hashing, dashboard sessions and the
// sessions handed over to workspace hosts, personal API tokens, the CLI's
// browser login, the decision on a single sign-on login and the user it
// creates or updates, and the changes to users that end their credentials
// (disable, password reset and change, refusal at single sign-on). Every
// credential it hands out is checked against its user at each lookup, so
// a disabled user's credentials stop working everywhere within
// CacheTTL.
//
// It never writes the audit log (its callers record what it returns, such
// as the tokens a change revoked), never decodes requests or writes error
// envelopes (package api does), never talks to the OpenID Provider (api
// verifies its answers and passes on the claims), and never touches
// workspaces. It reads and
// sets only its own cookies.
package identity

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/store"
)

// Options configures the identity service.
type Options struct {
	// SessionTTL is how long a login lasts; 0 means 24 h.
	SessionTTL time.Duration
	// Secure marks the cookies Secure (the public URL is https).
	Secure bool
	// CookieDomain is the dashboard session cookie's Domain attribute;
	// empty means a host-only cookie.
	CookieDomain string
	// OIDC, when set, lets users sign in through an OpenID Provider.
	OIDC *OIDCOptions
}

// Service authenticates requests and manages the credentials of users.
// One runs in every replica; replicas share only the database.
type Service struct {
	logger   hclog.Logger
	pool     *pgxpool.Pool
	opts     Options
	sessions *credentialCache[store.Session]
	tokens   *credentialCache[store.TokenSession]

	mu  sync.Mutex
	key []byte
}

// New returns the identity service over the database.
func New(logger hclog.Logger, pool *pgxpool.Pool, opts Options) *Service {
	if opts.SessionTTL == 0 {
		opts.SessionTTL = 24 * time.Hour
	}
	return &Service{
		logger: logger, pool: pool, opts: opts,
		sessions: newCredentialCache[store.Session](),
		tokens:   newCredentialCache[store.TokenSession](),
	}
}

// FieldError is input the service refuses, naming the field at fault.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func invalidField(field, message string) error {
	return &FieldError{Field: field, Message: message}
}

// Errors of logins and credentials; callers check them with errors.Is.
var (
	// ErrWrongPassword is an unknown username or a wrong password: which
	// one is never told.
	ErrWrongPassword = errors.New("wrong username or password")
	// ErrDisabled is a login of a disabled user with the right password.
	ErrDisabled = errors.New("this account is disabled")
	// ErrUnknownCode is a CLI login code that is unknown, used, expired,
	// of a disabled user or sent without its verifier.
	ErrUnknownCode = errors.New("the code is unknown, used or expired")
)

// LockedError is a login refused by the backoff until Until.
type LockedError struct {
	Until time.Time
}

func (e *LockedError) Error() string { return "too many failed logins" }

// Revocation is what a change ended: every credential of the user, or
// their sessions only when KeepTokens was asked. The caller records each
// token with Reason.
type Revocation struct {
	UserID   string
	TokenIDs []string
	Reason   string
}

// Why a user's tokens were revoked, as the audit log records it.
const (
	ReasonDisabled        = "user disabled"
	ReasonPasswordReset   = "password reset"
	ReasonPasswordChanged = "password changed"
	ReasonSignInRefused   = "sign-in refused"
)

// forgetUser drops every cached credential of the user from this
// replica, once the database no longer holds them. Other replicas drop
// theirs within CacheTTL; their next lookup finds nothing, or a disabled
// user, and refuses.
func (s *Service) forgetUser(userID string) {
	s.sessions.deleteWhere(func(sess store.Session) bool { return sess.UserID == userID })
	s.tokens.deleteWhere(func(tok store.TokenSession) bool { return tok.UserID == userID })
}
