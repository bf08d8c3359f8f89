// Package httpresult names how an outgoing HTTP request ended, for the
// metrics of the server's requests to the services it depends on (S3,
// Nomad).
package httpresult

import (
	"context"
	"errors"
	"net/http"
)

// Results of a request.
const (
	OK          = "ok"
	ClientError = "client_error" // 4xx, a missing object among them
	ServerError = "server_error" // 5xx
	Unreachable = "unreachable"  // no answer: refused, reset, timed out
)

// All are every result, for metrics that start each at zero.
var All = []string{OK, ClientError, ServerError, Unreachable}

// Of is how req ended with resp and err; "" for a request its caller
// cancelled, which says nothing of the service.
func Of(req *http.Request, resp *http.Response, err error) string {
	switch {
	case err != nil && (errors.Is(err, context.Canceled) || req.Context().Err() != nil):
		return ""
	case err != nil:
		return Unreachable
	case resp.StatusCode >= 500:
		return ServerError
	case resp.StatusCode >= 400:
		return ClientError
	}
	return OK
}

// RoundTripFunc is a function that carries requests.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
