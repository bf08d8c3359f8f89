package api

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/codehub-io/codehub/config"
)

// oidcIdentity is what a verified ID token makes of its user.
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

// claimError refuses an ID token whose claim is missing or of the wrong
// kind; its text is the sentence the refusal page shows.
type claimError struct {
	claim   string
	problem string
}

func (e *claimError) Error() string {
	return fmt.Sprintf("The ID token's claim %q %s. Ask an administrator to check the single sign-on settings.", e.claim, e.problem)
}

// decideOIDCLogin reads the username and groups from verified claims and
// applies allowed_groups and admin_groups. It is pure: the caller acts on
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
