package main

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of codehub_s3_requests_total.
const (
	s3OK          = "ok"
	s3ClientError = "client_error" // 4xx, a missing object among them
	s3ServerError = "server_error" // 5xx
	s3Unreachable = "unreachable"  // no answer: refused, reset, timed out
)

// s3Requests counts the server's own requests to S3 by result; the data
// mover's, which run in jobs, show as their jobs' failures.
type s3Requests struct {
	requests *prometheus.CounterVec
}

func newS3Requests() *s3Requests {
	r := &s3Requests{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "codehub_s3_requests_total",
		Help: "The server's requests to S3 by result (ok, client_error, server_error, unreachable); a request its caller cancelled is not counted.",
	}, []string{"result"})}
	for _, result := range []string{s3OK, s3ClientError, s3ServerError, s3Unreachable} {
		r.requests.WithLabelValues(result)
	}
	return r
}

// wrap counts the requests next carries.
func (r *s3Requests) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if result := s3Result(req, resp, err); result != "" {
			r.requests.WithLabelValues(result).Inc()
		}
		return resp, err
	})
}

func s3Result(req *http.Request, resp *http.Response, err error) string {
	switch {
	case err != nil && (errors.Is(err, context.Canceled) || req.Context().Err() != nil):
		return ""
	case err != nil:
		return s3Unreachable
	case resp.StatusCode >= 500:
		return s3ServerError
	case resp.StatusCode >= 400:
		return s3ClientError
	}
	return s3OK
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
