package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/codehub-io/codehub/store"
)

type metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	loginFailures prometheus.Counter
	sseClients    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, logger hclog.Logger, pool *pgxpool.Pool) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_http_requests_total",
			Help: "API requests by route and response status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "codehub_http_request_duration_seconds",
			Help:    "API request latency by route (event streams excluded).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		loginFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_login_failures_total",
			Help: "Failed login attempts (wrong username or password).",
		}),
		sseClients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "codehub_sse_clients",
			Help: "Event streams currently connected to this replica.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.loginFailures, m.sseClients, &phaseCollector{logger: logger, pool: pool}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// instrument counts and times an API route; pattern is the route's
// ServeMux pattern, so ids never become label values.
func (m *metrics) instrument(pattern string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		m.requests.WithLabelValues(pattern, strconv.Itoa(sw.status)).Inc()
		if pattern != routeEvents && pattern != routeSSHTunnel {
			m.duration.WithLabelValues(pattern).Observe(time.Since(start).Seconds())
		}
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// phaseCollector counts live workspaces by phase when scraped, so every
// replica reports the same truth. The count is kept for phaseCountTTL:
// scrapes, however frequent, cost the database one GROUP BY that long.
type phaseCollector struct {
	logger hclog.Logger
	pool   *pgxpool.Pool

	mu      sync.Mutex
	counts  map[string]int
	counted time.Time
}

const phaseCountTTL = 10 * time.Second

func (c *phaseCollector) count() (map[string]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts != nil && time.Since(c.counted) < phaseCountTTL {
		return c.counts, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := store.CountWorkspacesByPhase(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	c.counts, c.counted = counts, time.Now()
	return counts, nil
}

var phaseDesc = prometheus.NewDesc("codehub_workspaces", "Live workspaces by stored phase.", []string{"phase"}, nil)

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- phaseDesc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.count()
	if err != nil {
		c.logger.Warn("count workspaces for metrics", "error", err)
		return
	}
	for phase, n := range counts {
		ch <- prometheus.MustNewConstMetric(phaseDesc, prometheus.GaugeValue, float64(n), phase)
	}
}

// requireBearer serves h only to requests carrying token as their bearer
// token; others get 401 in the error envelope. The comparison takes the
// same time whatever the guess.
func requireBearer(token string, h http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="codehub metrics"`)
			WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "metrics need the configured bearer token"))
			return
		}
		h.ServeHTTP(w, r)
	})
}
