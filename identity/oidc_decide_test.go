package identity

import (
	"errors"
	"reflect"
	"testing"
)

func TestDecideOIDCLogin(t *testing.T) {
	groups := OIDCOptions{UsernameClaim: "preferred_username", GroupsClaim: "groups", AllowedGroups: []string{"dev", "ops"}, AdminGroups: []string{"ops"}}
	open := OIDCOptions{UsernameClaim: "preferred_username", GroupsClaim: "groups"}
	list := func(gs ...any) []any { return gs }
	for _, tc := range []struct {
		name    string
		opts    OIDCOptions
		claims  map[string]any
		want    oidcIdentity
		wantErr bool
		claim   bool // the refusal is a claimError
		refused error
	}{
		{"member", groups, map[string]any{"preferred_username": "Ann", "groups": list("dev")}, oidcIdentity{username: "ann", adminFromGroups: true, groups: []string{"dev"}}, false, false, nil},
		{"admin", groups, map[string]any{"preferred_username": "ann", "groups": list("dev", "ops")}, oidcIdentity{username: "ann", admin: true, adminFromGroups: true, groups: []string{"dev", "ops"}}, false, false, nil},
		{"one group as text", groups, map[string]any{"preferred_username": "ann", "groups": "ops"}, oidcIdentity{username: "ann", admin: true, adminFromGroups: true, groups: []string{"ops"}}, false, false, nil},
		{"no groups needed", open, map[string]any{"preferred_username": "ann"}, oidcIdentity{username: "ann"}, false, false, nil},
		// Groups decide nothing at login here, but are kept for templates.
		{"groups kept", open, map[string]any{"preferred_username": "ann", "groups": list("data")}, oidcIdentity{username: "ann", groups: []string{"data"}}, false, false, nil},
		{"groups not names, not needed", open, map[string]any{"preferred_username": "ann", "groups": list(7.0)}, oidcIdentity{username: "ann"}, false, false, nil},
		{"not allowed", groups, map[string]any{"preferred_username": "ann", "groups": list("sales")}, oidcIdentity{username: "ann", groups: []string{"sales"}}, true, false, errNotAllowed},
		{"no groups claim", groups, map[string]any{"preferred_username": "ann"}, oidcIdentity{username: "ann"}, true, true, nil},
		{"groups not names", groups, map[string]any{"preferred_username": "ann", "groups": list("dev", 7.0)}, oidcIdentity{username: "ann"}, true, true, nil},
		{"groups an object", groups, map[string]any{"preferred_username": "ann", "groups": map[string]any{"dev": true}}, oidcIdentity{username: "ann"}, true, true, nil},
		{"no username claim", open, map[string]any{"sub": "x"}, oidcIdentity{}, true, true, nil},
		{"username not text", open, map[string]any{"preferred_username": 12.0}, oidcIdentity{}, true, true, nil},
		{"username invalid here", open, map[string]any{"preferred_username": "ann@example.com"}, oidcIdentity{username: "ann@example.com"}, true, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideOIDCLogin(tc.opts, tc.claims)
			if !reflect.DeepEqual(got, tc.want) || (err != nil) != tc.wantErr {
				t.Fatalf("decide = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.wantErr)
			}
			var ce *claimError
			if errors.As(err, &ce) != tc.claim {
				t.Errorf("error %v: claim error %v, want %v", err, !tc.claim, tc.claim)
			}
			if tc.refused != nil && !errors.Is(err, tc.refused) {
				t.Errorf("error %v, want %v", err, tc.refused)
			}
		})
	}
}

func TestOIDCClaimsWithUserinfo(t *testing.T) {
	opts := OIDCOptions{UsernameClaim: "preferred_username", GroupsClaim: "groups"}
	list := func(gs ...any) []any { return gs }
	for _, tc := range []struct {
		name     string
		idToken  map[string]any
		userinfo map[string]any
		want     map[string]any
		refused  bool
	}{
		{"both claims in the ID token win",
			map[string]any{"sub": "s1", "preferred_username": "ann", "groups": list("dev")},
			map[string]any{"sub": "s1", "preferred_username": "other", "groups": list("ops")},
			map[string]any{"sub": "s1", "preferred_username": "ann", "groups": list("dev")}, false},
		{"both from UserInfo",
			map[string]any{"sub": "s1"},
			map[string]any{"sub": "s1", "preferred_username": "ann", "groups": list("dev"), "email": "ann@example.com"},
			map[string]any{"sub": "s1", "preferred_username": "ann", "groups": list("dev")}, false},
		{"groups from UserInfo",
			map[string]any{"sub": "s1", "preferred_username": "ann"},
			map[string]any{"sub": "s1", "preferred_username": "bob", "groups": list("dev")},
			map[string]any{"sub": "s1", "preferred_username": "ann", "groups": list("dev")}, false},
		{"missing from both stays missing",
			map[string]any{"sub": "s1"},
			map[string]any{"sub": "s1", "groups": list("dev")},
			map[string]any{"sub": "s1", "groups": list("dev")}, false},
		{"another subject", map[string]any{"sub": "s1"}, map[string]any{"sub": "s2", "preferred_username": "ann"}, nil, true},
		{"another subject, nothing needed from it",
			map[string]any{"sub": "s1", "preferred_username": "ann", "groups": list("dev")}, map[string]any{"sub": "s2"}, nil, true},
		{"no subject", map[string]any{"sub": "s1"}, map[string]any{"preferred_username": "ann"}, nil, true},
		{"subject not text", map[string]any{"sub": "1"}, map[string]any{"sub": 1.0, "preferred_username": "ann"}, nil, true},
		{"subject differs in case", map[string]any{"sub": "abc"}, map[string]any{"sub": "ABC", "preferred_username": "ann"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withUserinfo(opts, tc.idToken, tc.userinfo)
			if tc.refused {
				if !errors.Is(err, errUserinfoSubject) {
					t.Fatalf("withUserinfo = %v, %v; want refused for its subject", got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("withUserinfo = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestOIDCNeedsUserinfo(t *testing.T) {
	opts := OIDCOptions{UsernameClaim: "preferred_username", GroupsClaim: "groups"}
	for _, tc := range []struct {
		claims map[string]any
		want   bool
	}{
		{map[string]any{"sub": "s", "preferred_username": "ann", "groups": []any{}}, false},
		{map[string]any{"sub": "s", "preferred_username": "ann"}, true},
		{map[string]any{"sub": "s", "groups": []any{"dev"}}, true},
		{map[string]any{"sub": "s"}, true},
	} {
		if got := needsUserinfo(opts, tc.claims); got != tc.want {
			t.Errorf("needsUserinfo(%v) = %v, want %v", tc.claims, got, tc.want)
		}
	}
	// Without groups_claim there are no groups to look for.
	noGroups := OIDCOptions{UsernameClaim: "preferred_username"}
	if needsUserinfo(noGroups, map[string]any{"sub": "s", "preferred_username": "ann"}) {
		t.Error("UserInfo asked for a groups claim that is not configured")
	}
	if !needsUserinfo(noGroups, map[string]any{"sub": "s"}) {
		t.Error("UserInfo not asked for the missing username")
	}
}
