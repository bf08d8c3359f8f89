package nomad

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// aclsEnforced judges what the api client makes of each answer Nomad can
// give to a tokenless variable read.
func TestACLsEnforcedJudgesTheAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		enforced bool
		unknown  bool
	}{
		{"refused", http.StatusForbidden, "Permission denied", true, false},
		{"unauthorized", http.StatusUnauthorized, "", true, false},
		{"not found", http.StatusNotFound, "variable not found", false, false},
		{"found", http.StatusOK, `{"Path":"nomad/jobs/ws-codehub-acl-probe","Items":{"token":"x"}}`, false, false},
		{"server error", http.StatusInternalServerError, "no leader", false, true},
		{"bad request", http.StatusBadRequest, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Nomad-Token") != "" {
					t.Errorf("the probe sent a token")
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := api.NewClient(&api.Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			_, _, readErr := c.Variables().Peek(aclProbePath, nil)
			enforced, err := aclsEnforced(readErr)
			if enforced != tc.enforced || errors.Is(err, errACLsUnknown) != tc.unknown {
				t.Errorf("aclsEnforced(%v) = %v, %v; want enforced %v, unknown %v", readErr, enforced, err, tc.enforced, tc.unknown)
			}
		})
	}
	if _, err := aclsEnforced(errors.New("connection refused")); !errors.Is(err, errACLsUnknown) {
		t.Errorf("a transport error: %v, want errACLsUnknown", err)
	}
}
