package nomad

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codehub-io/codehub/internal/httpresult"
)

// Requests counts and times the server's requests to Nomad's HTTP API by
// call, so an operator sees what a controller pass costs Nomad and which
// reads grow with the number of workspaces.
type Requests struct {
	total   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

// NewRequests returns the request metrics, to be registered (Collectors)
// and to wrap the client's transport (Wrap).
func NewRequests() *Requests {
	return &Requests{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_nomad_requests_total",
			Help: "The server's requests to Nomad's HTTP API by call (method and path, ids replaced by :id) and result (ok, client_error, server_error, unreachable); a request its caller cancelled is not counted.",
		}, []string{"call", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "codehub_nomad_request_duration_seconds",
			Help:    "Time until Nomad's answer began, by call; the event stream counts until it connected.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"call"}),
	}
}

// Collectors are the metrics to register.
func (r *Requests) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.total, r.seconds}
}

// Wrap counts and times the requests next carries.
func (r *Requests) Wrap(next http.RoundTripper) http.RoundTripper {
	return httpresult.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(req)
		res := httpresult.Of(req, resp, err)
		if res == "" {
			return resp, err
		}
		c := call(req.Method, req.URL.Path)
		r.total.WithLabelValues(c, res).Inc()
		r.seconds.WithLabelValues(c).Observe(time.Since(start).Seconds())
		return resp, err
	})
}

// call names a request by its method and the path's pattern: the segments
// that name one object (a job, an allocation, a variable's path) become
// :id, so the label takes a bounded set of values.
func call(method, path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if len(seg) < 2 || seg[0] != "v1" {
		return method + " other"
	}
	out := seg[:2]
	rest := seg[2:]
	switch seg[1] {
	case "job", "allocation", "node", "evaluation", "deployment", "service", "namespace":
		// /v1/job/:id[/allocations]; /v1/job/parse and such have no id.
		if len(rest) > 0 && !(seg[1] == "job" && len(rest) == 1 && rest[0] == "parse") {
			out = append(out, ":id")
			rest = rest[1:]
		}
	case "var":
		// A variable's path has any number of segments.
		if len(rest) > 0 {
			out, rest = append(out, ":id"), nil
		}
	case "volume":
		// /v1/volume/host/:id[/delete]; create and register are actions.
		if len(rest) > 0 {
			out, rest = append(out, rest[0]), rest[1:]
		}
		if len(rest) > 0 && rest[0] != "create" && rest[0] != "register" {
			out, rest = append(out, ":id"), rest[1:]
		}
	case "client":
		// /v1/client/allocation/:id/checks, /v1/client/fs/logs/:id.
		if len(rest) >= 2 && rest[0] == "allocation" {
			out, rest = append(out, rest[0], ":id"), rest[2:]
		} else if len(rest) >= 2 && rest[0] == "fs" {
			out, rest = append(out, rest[0], rest[1], ":id"), nil
		}
	}
	for _, s := range rest {
		if !staticSegment(s) {
			s = ":id"
		}
		out = append(out, s)
	}
	return method + " /" + strings.Join(out, "/")
}

// staticSegment reports a path segment that names a kind of answer
// (allocations, evaluations, checks) rather than one object.
func staticSegment(s string) bool {
	if s == "" || len(s) > 24 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}
