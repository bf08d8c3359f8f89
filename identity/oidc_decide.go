package identity

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/codehub-io/codehub/config"
)

// OIDCOptions are the rules a single sign-on login is judged by (config's
// auth.oidc): the provider whose subjects name users, the claims that hold
// the username and the groups, and the groups that may sign in or are
// administrators.
type OIDCOptions struct {
	Issuer        string
	UsernameClaim string
	GroupsClaim   string
	AllowedGroups []string
	AdminGroups   []string
}

// oidcIdentity is what the provider's verified claims make of the user.
type oidcIdentity struct {
	username string
	// admin is whether the user is in one of admin_groups; it decides the
	// admin flag only when adminFromGroups (admin_groups is configured).
	admin           bool
	adminFromGroups bool
	// groups are the user's groups from the groups claim, nil when the
	// token carries none; templates may be limited to groups.
	groups []string
}

// errNotAllowed refuses a user in none of allowed_groups.
var errNotAllowed = errors.New("You are not in a group allowed to use this server. Ask an administrator.")

// claimError refuses a login whose claim is missing or of the wrong kind,
// in the ID token and UserInfo alike; its text is the sentence the refusal
// page shows.
type claimError struct {
	claim   string
	problem string
}

func (e *claimError) Error() string {
	return fmt.Sprintf("The identity provider's claim %q %s. Ask an administrator to check the single sign-on settings.", e.claim, e.problem)
}

// decideOIDCLogin reads the username and groups from verified claims (the
// ID token's, completed from UserInfo) and applies allowed_groups and
// admin_groups. It is pure: the caller acts on
// the answer.
func decideOIDCLogin(opts OIDCOptions, claims map[string]any) (oidcIdentity, error) {
	var id oidcIdentity
	raw, ok := claims[opts.UsernameClaim]
	if !ok {
		return id, &claimError{opts.UsernameClaim, "is missing"}
	}
	name, ok := raw.(string)
	if !ok {
		return id, &claimError{opts.UsernameClaim, "is not text"}
	}
	id.username = strings.ToLower(name)
	if !config.ValidUsername(id.username) {
		return id, &claimError{opts.UsernameClaim, fmt.Sprintf("holds %q, which is not a valid username (1 to 63 of a-z, 0-9, '.', '_' and '-')", name)}
	}
	groups, err := groupsClaim(opts.GroupsClaim, claims)
	if len(opts.AllowedGroups) == 0 && len(opts.AdminGroups) == 0 {
		// Groups decide nothing here: a token without them is fine.
		if err == nil {
			id.groups = groups
		}
		return id, nil
	}
	if err != nil {
		return id, err
	}
	id.groups = groups
	member := func(of []string) bool {
		return slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(of, g) })
	}
	if len(opts.AllowedGroups) > 0 && !member(opts.AllowedGroups) {
		return id, errNotAllowed
	}
	id.adminFromGroups = len(opts.AdminGroups) > 0
	id.admin = member(opts.AdminGroups)
	return id, nil
}

// groupsClaim reads a list of group names; a provider that sends one group
// as a plain string is understood too.
func groupsClaim(claim string, claims map[string]any) ([]string, error) {
	raw, ok := claims[claim]
	if !ok {
		return nil, &claimError{claim, "is missing"}
	}
	switch v := raw.(type) {
	case string:
		return []string{v}, nil
	case []any:
		groups := make([]string, 0, len(v))
		for _, g := range v {
			s, ok := g.(string)
			if !ok {
				return nil, &claimError{claim, "holds something other than group names"}
			}
			groups = append(groups, s)
		}
		return groups, nil
	}
	return nil, &claimError{claim, "is not a list of groups"}
}

// errUserinfoSubject refuses a UserInfo answer about another user than the
// ID token's; its text is the sentence the refusal page shows.
var errUserinfoSubject = errors.New("The identity provider's UserInfo answer is about another user than its ID token. Ask an administrator to check the single sign-on settings.")

// needsUserinfo reports whether the ID token lacks the username or the
// groups claim (when one is configured). A provider that follows OpenID
// Connect Core 5.4 serves the profile scope's claims from its UserInfo
// endpoint once it issues an access token, and many serve the groups there
// too.
func needsUserinfo(opts OIDCOptions, claims map[string]any) bool {
	_, name := claims[opts.UsernameClaim]
	_, groups := claims[opts.GroupsClaim]
	return !name || (opts.GroupsClaim != "" && !groups)
}

// withUserinfo returns the ID token's claims with the username and groups
// claims it lacks taken from the UserInfo answer. The answer must be about
// the ID token's subject (Core 5.3.2): one without a sub, or about another
// user, is refused whatever it holds. It is pure and changes neither map.
func withUserinfo(opts OIDCOptions, idToken, userinfo map[string]any) (map[string]any, error) {
	want, _ := idToken["sub"].(string)
	got, ok := userinfo["sub"].(string)
	if !ok || got != want {
		return nil, fmt.Errorf("%w: UserInfo answered for subject %q, the ID token is for %q", errUserinfoSubject, userinfo["sub"], want)
	}
	merged := maps.Clone(idToken)
	for _, c := range []string{opts.UsernameClaim, opts.GroupsClaim} {
		if _, ok := merged[c]; ok || c == "" {
			continue
		}
		if v, ok := userinfo[c]; ok {
			merged[c] = v
		}
	}
	return merged, nil
}
