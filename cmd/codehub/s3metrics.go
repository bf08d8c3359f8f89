package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codehub-io/codehub/internal/httpresult"
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
	for _, result := range httpresult.All {
		r.requests.WithLabelValues(result)
	}
	return r
}

// wrap counts the requests next carries.
func (r *s3Requests) wrap(next http.RoundTripper) http.RoundTripper {
	return httpresult.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if result := httpresult.Of(req, resp, err); result != "" {
			r.requests.WithLabelValues(result).Inc()
		}
		return resp, err
	})
}
