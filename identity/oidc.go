package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// ProviderClaims are what the OpenID Provider vouched for at a login: the
// subject and claims of its ID token, verified by the caller, and its
// UserInfo answer when the caller asked for one (NeedsUserinfo).
type ProviderClaims struct {
	Subject string
	IDToken map[string]any
	// UserInfo is nil when the provider was not asked.
	UserInfo map[string]any
}

// ProviderSignIn is what a single sign-on login did, as far as it went:
// it comes with a refusal or a failure too, so that the caller can record
// every change it made.
type ProviderSignIn struct {
	// User is who signs in, and on a refusal the user refused when
	// CodeHub knows them.
	User store.User
	// Username is the username the claims name, when they name one.
	Username string
	// Created is set when the login created User.
	Created bool
	// AdminAction is audit.ActionUserAdminGrant or ActionUserAdminRevoke
	// when admin_groups changed User's admin flag at this login.
	AdminAction string
	// Revocation is every credential a refusal by allowed_groups ended.
	Revocation *Revocation
}

// RefusedError is a single sign-on login refused for what the claims say
// or what CodeHub holds of the user. Message is the sentence the user is
// shown; the error itself is the detail for the log and the audit record,
// and wraps store.ErrUsernameTaken when the username is another user's.
type RefusedError struct {
	Message string
	Err     error
}

func (e *RefusedError) Error() string { return e.Err.Error() }

func (e *RefusedError) Unwrap() error { return e.Err }

// NeedsUserinfo reports whether a login's ID token claims lack what the
// provider's UserInfo endpoint may complete.
func (s *Service) NeedsUserinfo(idToken map[string]any) bool {
	return s.opts.OIDC != nil && needsUserinfo(*s.opts.OIDC, idToken)
}

// SignInWithProvider judges a single sign-on login by auth.oidc's rules
// and returns its user: known by (issuer, subject), created at the first
// login, with the admin flag from admin_groups and the groups from the
// groups claim set at every login. A login the rules or the user's
// account refuse is a *RefusedError; one refused by allowed_groups ends
// every credential of the user, so a user taken out of the groups is out
// everywhere once refused.
func (s *Service) SignInWithProvider(ctx context.Context, c ProviderClaims) (ProviderSignIn, error) {
	if s.opts.OIDC == nil {
		return ProviderSignIn{}, errors.New("single sign-on is not configured")
	}
	opts := *s.opts.OIDC
	claims := c.IDToken
	if c.UserInfo != nil {
		merged, err := withUserinfo(opts, c.IDToken, c.UserInfo)
		if err != nil {
			return ProviderSignIn{}, &RefusedError{Message: errUserinfoSubject.Error(), Err: err}
		}
		claims = merged
	}
	id, err := decideOIDCLogin(opts, claims)
	res := ProviderSignIn{Username: id.username}
	if err != nil {
		if errors.Is(err, errNotAllowed) {
			res.User, res.Revocation = s.endProviderAccess(ctx, c.Subject)
		}
		return res, &RefusedError{Message: err.Error(), Err: fmt.Errorf("subject %s: %w", c.Subject, err)}
	}
	return s.providerUser(ctx, c.Subject, id, res)
}

// endProviderAccess ends every credential of the user with that subject,
// if known, and returns the user and what ended.
func (s *Service) endProviderAccess(ctx context.Context, subject string) (store.User, *Revocation) {
	u, err := store.UserByOIDC(ctx, s.pool, s.opts.OIDC.Issuer, subject)
	if errors.Is(err, store.ErrNotFound) {
		return store.User{}, nil
	}
	var rev Revocation
	if err == nil {
		if rev, err = s.EndAccess(ctx, u.ID, ReasonSignInRefused); err == nil {
			return u, &rev
		}
	}
	s.logger.Error("end sessions of a refused user", "subject", subject, "error", err)
	return u, nil
}

// providerUser finds or creates the user of an allowed login and brings
// its admin flag and groups up to the provider's word.
func (s *Service) providerUser(ctx context.Context, subject string, id oidcIdentity, res ProviderSignIn) (ProviderSignIn, error) {
	issuer := s.opts.OIDC.Issuer
	u, err := store.UserByOIDC(ctx, s.pool, issuer, subject)
	if errors.Is(err, store.ErrNotFound) {
		u, err = store.CreateOIDCUser(ctx, s.pool, workspace.NewID(), id.username, issuer, subject, id.admin)
		if errors.Is(err, store.ErrUsernameTaken) {
			return res, &RefusedError{
				Message: fmt.Sprintf("The username %q is already used by another account. Ask an administrator.", id.username),
				Err:     fmt.Errorf("username %s taken: %w", id.username, err),
			}
		}
		res.Created = err == nil
	}
	if err != nil {
		return res, err
	}
	res.User = u
	if u.Disabled {
		return res, &RefusedError{Message: "This account is disabled.", Err: errAccountDisabled}
	}
	if id.adminFromGroups && id.admin != u.IsAdmin {
		if err := store.SetAdmin(ctx, s.pool, u.ID, id.admin); err != nil {
			return res, err
		}
		res.AdminAction = audit.ActionUserAdminRevoke
		if id.admin {
			res.AdminAction = audit.ActionUserAdminGrant
		}
		res.User.IsAdmin = id.admin
	}
	// The provider's groups, as of this login, decide which templates the
	// user may use.
	return res, store.SetGroups(ctx, s.pool, u.ID, id.groups)
}

// errAccountDisabled is a disabled user's single sign-on login.
var errAccountDisabled = errors.New("account disabled")

// StartProviderSession starts a dashboard session for a user a single
// sign-on login let in and keeps the login's raw ID token with it, on the
// server only, for logging out at the provider; the token goes when the
// session does.
func (s *Service) StartProviderSession(ctx context.Context, userID, idToken string) (*http.Cookie, error) {
	cookie, _, err := s.StartSession(ctx, userID)
	if err != nil {
		return nil, err
	}
	hash := HashSecret(cookie.Value)
	if err := store.SetOIDCSession(ctx, s.pool, hash[:], idToken); err != nil {
		return nil, fmt.Errorf("keep the id token: %w", err)
	}
	return cookie, nil
}

// ProviderIDToken returns the ID token the request's session was started
// with; ok is false for a session that did not start at a single sign-on
// login, or no session.
func (s *Service) ProviderIDToken(r *http.Request) (string, bool, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return "", false, nil
	}
	hash := HashSecret(c.Value)
	idToken, err := store.OIDCSessionIDToken(r.Context(), s.pool, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return idToken, true, nil
}
