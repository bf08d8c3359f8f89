package api

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/identity"
)

// Logging out at the provider follows OpenID Connect RP-Initiated Logout
// 1.0: the browser is sent to the provider's end_session_endpoint with the
// login's ID token as id_token_hint, our client_id, a post-logout redirect
// URI the operator registers at the provider, and a fresh state.

// endSessionEndpoint is the provider's end_session_endpoint, "" when its
// discovery document publishes none.
func (o *oidcLogin) endSessionEndpoint() (string, error) {
	p, err := o.discover()
	if err != nil {
		return "", err
	}
	var meta struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err := p.Claims(&meta); err != nil {
		return "", fmt.Errorf("read discovery document: %w", err)
	}
	return meta.EndSession, nil
}

// endSessionURL is the address that asks the provider to end its session:
// endpoint with the parameters RP-Initiated Logout defines added to any it
// already has.
func endSessionURL(endpoint, idToken, clientID, postLogout, state string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("end_session_endpoint %q is not an http(s) URL", endpoint)
	}
	q := u.Query()
	q.Set("id_token_hint", idToken)
	q.Set("client_id", clientID)
	q.Set("post_logout_redirect_uri", postLogout)
	q.Set("state", state)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

type oidcLogoutView struct {
	// Offered is whether this session may end the provider's session too:
	// it began with a single sign-on login and the provider publishes an
	// end_session_endpoint.
	Offered bool   `json:"offered"`
	Label   string `json:"label"`
}

type oidcLoggedOutView struct {
	// EndSessionURL is where to send the browser to end the provider's
	// session, or "" when there is none to end.
	EndSessionURL string `json:"end_session_url"`
}

// providerLogout returns the end-session address for a session started
// with idToken at a single sign-on login, "" when the provider publishes
// no end_session_endpoint or cannot be reached now: it has no session to
// end from here, and the CodeHub logout goes on. state is "" to only ask
// whether there is one.
func (s *Server) providerLogout(idToken, state string) (string, error) {
	endpoint, err := s.oidc.endSessionEndpoint()
	if err != nil {
		s.oidc.logger.Warn("reach the identity provider for logout", "error", err)
		return "", nil
	}
	if endpoint == "" {
		return "", nil
	}
	return endSessionURL(endpoint, idToken, s.oidc.opts.ClientID, s.oidc.postLogoutURL, state)
}

// oidcLogoutOffer tells the logout page whether to offer ending the
// provider's session too.
func (s *Server) oidcLogoutOffer(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.requireUser(w, r); !ok {
		return
	}
	v := oidcLogoutView{}
	if s.oidc != nil {
		idToken, ok, err := s.identity.ProviderIDToken(r)
		if err != nil {
			s.fail(w, "look up oidc session", err)
			return
		}
		var end string
		if ok {
			if end, err = s.providerLogout(idToken, ""); err != nil {
				s.fail(w, "look up oidc session", err)
				return
			}
		}
		v = oidcLogoutView{Offered: end != "", Label: s.oidc.opts.Label}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, v)
}

// oidcLogout ends the request's session, as POST /logout does, and answers
// where to send the browser to end the provider's session too. The ID
// token leaves the server only in that answer, on its way to the provider.
func (s *Server) oidcLogout(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "single sign-on is not configured"))
		return
	}
	// The provider's end-session address is made while the session still
	// holds its ID token; a logout that cannot make it ends nothing.
	var end string
	idToken, ok, err := s.identity.ProviderIDToken(r)
	if err != nil {
		s.fail(w, "look up oidc session", err)
		return
	}
	if ok {
		state, _, err := identity.NewSecret()
		if err != nil {
			s.fail(w, "make logout state", err)
			return
		}
		if end, err = s.providerLogout(idToken, state); err != nil {
			s.fail(w, "look up oidc session", err)
			return
		}
	}
	out, err := s.identity.Logout(r.Context(), r)
	if err != nil {
		s.fail(w, "end session", err)
		return
	}
	if !out.Known {
		// A disabled user's session ends here, and no further.
		end = ""
	} else {
		e := audit.Event{Actor: s.actor(r, out.Session), Action: audit.ActionLogout, Outcome: audit.Success}
		if end != "" {
			e.Detail = "and at the identity provider"
		}
		s.audit.Record(r.Context(), e)
	}
	http.SetCookie(w, out.Cookie)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, oidcLoggedOutView{EndSessionURL: end})
}
