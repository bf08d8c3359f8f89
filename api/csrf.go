package api

import (
	"net/http"
	"strings"
)

// safeMethod reports methods that must not change state, so they need no
// cross-origin defence.
func safeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// crossOrigin decides whether a state-changing request comes from a page of
// another origin. Browsers send Sec-Fetch-Site and Origin on such requests;
// clients that send neither (curl, scripts) carry no ambient browser
// credentials to abuse and are let through. allowed is the set of origins
// ("scheme://host[:port]") the dashboard is served from.
func crossOrigin(h http.Header, allowed []string) bool {
	switch h.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return true
	}
	origin := h.Get("Origin")
	if origin == "" {
		return false
	}
	for _, a := range allowed {
		if strings.EqualFold(origin, a) {
			return false
		}
	}
	return true
}
