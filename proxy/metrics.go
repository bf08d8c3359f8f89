package proxy

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests   *requestCounters
	duration   prometheus.Histogram
	websockets prometheus.Gauge
	wakes      *prometheus.CounterVec
	// upstreamErrors counts requests a workspace did not answer.
	upstreamErrors prometheus.Counter
	// taken counts connections the proxy took over from net/http, and
	// handedBack those it gave back.
	taken, handedBack prometheus.Counter
	// revoked counts long-lived connections the proxy ended because
	// their session ended or their user lost the workspace, by reason.
	revoked *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: &requestCounters{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_proxy_requests_total",
			Help: "Requests to /w/{id}/ by response status code.",
		}, []string{"code"})},
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "codehub_proxy_request_duration_seconds",
			Help:    "Time to the end of a proxied response (WebSocket sessions excluded).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}),
		websockets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "codehub_proxy_websocket_connections",
			Help: "WebSocket connections currently proxied.",
		}),
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_proxy_wakes_total",
			Help: "Auto-wake attempts by result (started, limit, conflict, error).",
		}, []string{"result"}),
		upstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_proxy_upstream_errors_total",
			Help: "Proxied requests the workspace did not answer (connection refused or reset, bad response).",
		}),
		taken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_proxy_connections_taken_total",
			Help: "Client connections the proxy took over to serve their plain requests itself.",
		}),
		handedBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_proxy_connections_handed_back_total",
			Help: "Taken connections given back to the HTTP server for a request the proxy does not serve itself.",
		}),
		revoked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_proxy_connections_revoked_total",
			Help: "Long-lived connections (WebSockets, taken connections, streaming answers) ended because their session ended (session) or their user no longer owns the workspace (owner, deleted).",
		}, []string{"reason"}),
	}
	// Every result exists from the start, so a rate over it does too.
	for _, result := range []string{"started", "limit", "conflict", "error"} {
		m.wakes.WithLabelValues(result)
	}
	for _, c := range []prometheus.Collector{m.requests.vec, m.duration, m.websockets, m.wakes, m.upstreamErrors, m.taken, m.handedBack, m.revoked} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// requestCounters hands out the request counter of each status code,
// looked up once: a lookup by label value hashes the value and, for a code
// above 99, allocates its string, which on every request adds up.
type requestCounters struct {
	vec    *prometheus.CounterVec
	byCode [600]atomic.Pointer[prometheus.Counter]
}

func (c *requestCounters) inc(code int) {
	if code < 0 || code >= len(c.byCode) {
		c.vec.WithLabelValues(strconv.Itoa(code)).Inc()
		return
	}
	counter := c.byCode[code].Load()
	if counter == nil {
		found := c.vec.WithLabelValues(strconv.Itoa(code))
		counter = &found
		c.byCode[code].Store(counter)
	}
	(*counter).Inc()
}
