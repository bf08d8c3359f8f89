package api

import (
	"net/http"
	"strings"
	"testing"
)

func TestTokenAllows(t *testing.T) {
	for _, tc := range []struct {
		scope, method string
		want          bool
	}{
		{ScopeRead, http.MethodGet, true},
		{ScopeRead, http.MethodHead, true},
		{ScopeRead, http.MethodPost, false},
		{ScopeRead, http.MethodPatch, false},
		{ScopeRead, http.MethodDelete, false},
		{ScopeReadWrite, http.MethodDelete, true},
		{"", http.MethodPost, false},
	} {
		if got := tokenAllows(tc.scope, tc.method); got != tc.want {
			t.Errorf("tokenAllows(%q, %s) = %v", tc.scope, tc.method, got)
		}
	}
}

func TestCheckTokenRequest(t *testing.T) {
	days := func(n int) *int { return &n }
	for _, tc := range []struct {
		req   tokenRequest
		field string
		days  int
	}{
		{tokenRequest{Name: "ci", Scope: ScopeRead}, "", defaultTokenDays},
		{tokenRequest{Name: "ci", Scope: ScopeReadWrite, ExpiresInDays: days(maxTokenDays)}, "", maxTokenDays},
		{tokenRequest{Name: "ci", Scope: ScopeRead, ExpiresInDays: days(maxTokenDays + 1)}, "expires_in_days", 0},
		{tokenRequest{Name: "ci", Scope: ScopeRead, ExpiresInDays: days(-1)}, "expires_in_days", 0},
		{tokenRequest{Name: "ci", Scope: "admin"}, "scope", 0},
		{tokenRequest{Name: "", Scope: ScopeRead}, "name", 0},
		{tokenRequest{Name: "tab\there", Scope: ScopeRead}, "name", 0},
		{tokenRequest{Name: strings.Repeat("é", 100), Scope: ScopeRead}, "", defaultTokenDays},
	} {
		spec, e := checkTokenRequest(tc.req)
		switch {
		case tc.field == "" && (e != nil || spec.Days != tc.days):
			t.Errorf("%+v: %v, days %d", tc.req, e, spec.Days)
		case tc.field != "" && (e == nil || e.Field != tc.field):
			t.Errorf("%+v: %v, want an error on %s", tc.req, e, tc.field)
		}
	}
}
