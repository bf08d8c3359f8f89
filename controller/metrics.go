package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codehub-io/codehub/workspace"
)

// Operation results of codehub_operations_total.
const (
	resultStarted   = "started"
	resultSucceeded = "succeeded"
	resultFailed    = "failed"
	resultTimeout   = "timeout"
)

// TTL expiry kinds of codehub_ttl_expiries_total.
const (
	expiryStandby = "standby"
	expiryArchive = "archive"
)

// Metrics records what the engine commits: phase transitions, operations
// and their durations, TTL expiries, controller passes and GC deletions.
// Only the leader's loops record, so on a follower the counters stay put.
// A nil *Metrics records nothing.
type Metrics struct {
	transitions *prometheus.CounterVec
	operations  *prometheus.CounterVec
	opDuration  *prometheus.HistogramVec
	ttlExpiries *prometheus.CounterVec
	passes      prometheus.Histogram
	gcDeleted   prometheus.Counter
	gcAborted   prometheus.Counter
	orphans     prometheus.Gauge
	snapshots   *prometheus.CounterVec
	snapBytes   prometheus.Counter
}

// NewMetrics registers the engine's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_workspace_transitions_total",
			Help: "Workspace phase changes committed by the controller.",
		}, []string{"from", "to"}),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_operations_total",
			Help: "Operations by result (started, succeeded, failed, timeout); a retry starts a new operation.",
		}, []string{"operation", "result"}),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "codehub_operation_duration_seconds",
			Help: "Time from the start of an operation to its success or failure.",
			// Operations take from a second (stop) to tens of minutes
			// (archiving a large home).
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 13),
		}, []string{"operation"}),
		ttlExpiries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_ttl_expiries_total",
			Help: "Idle workspaces the TTL runner stepped down, by kind (standby, archive).",
		}, []string{"kind"}),
		passes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "codehub_controller_pass_duration_seconds",
			Help:    "Duration of completed controller passes over all workspaces.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		gcDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_gc_archives_deleted_total",
			Help: "Archives deleted by the archive GC.",
		}),
		gcAborted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_gc_uploads_aborted_total",
			Help: "Unfinished multipart uploads of killed archive attempts aborted by the archive GC.",
		}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codehub_snapshots_total",
			Help: "Snapshots of running homes by result (stored, unchanged, failed, superseded: the workspace moved on before the commit).",
		}, []string{"result"}),
		snapBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_snapshot_bytes_total",
			Help: "Bytes of the snapshot objects written to S3 (compressed).",
		}),
		orphans: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "codehub_orphaned_workspaces",
			Help: "Workspace ids the backend holds volumes or jobs of that are no unfinished workspace in the database (reported, never removed).",
		}),
	}
	// Known label values start at zero, so rates exist before the first event.
	for _, kind := range []string{expiryStandby, expiryArchive} {
		m.ttlExpiries.WithLabelValues(kind)
	}
	for _, result := range []string{snapshotStored, snapshotUnchanged, snapshotFailed, snapshotSuperseded} {
		m.snapshots.WithLabelValues(result)
	}
	for _, c := range []prometheus.Collector{m.transitions, m.operations, m.opDuration, m.ttlExpiries, m.passes, m.gcDeleted, m.gcAborted, m.orphans, m.snapshots, m.snapBytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// committed records what a committed controller write changed: the phase,
// and an operation that started or ended (at now, the controller's clock,
// the same one op_started_at was set from).
func (m *Metrics) committed(prev, next workspace.Workspace, now time.Time) {
	if m == nil {
		return
	}
	if prev.Phase != next.Phase {
		m.transitions.WithLabelValues(string(prev.Phase), string(next.Phase)).Inc()
	}
	if prev.Operation == next.Operation {
		return
	}
	if prev.Operation != workspace.OpNone {
		op := string(prev.Operation)
		m.operations.WithLabelValues(op, operationResult(next)).Inc()
		if prev.OpStartedAt != nil {
			m.opDuration.WithLabelValues(op).Observe(now.Sub(*prev.OpStartedAt).Seconds())
		}
	}
	if next.Operation != workspace.OpNone {
		m.operations.WithLabelValues(string(next.Operation), resultStarted).Inc()
	}
}

// operationResult tells how an operation ended from the row that ends it:
// success clears the error fields, a failure sets them.
func operationResult(next workspace.Workspace) string {
	switch {
	case next.ErrorReason == nil:
		return resultSucceeded
	case *next.ErrorReason == workspace.ReasonTimeout:
		return resultTimeout
	}
	return resultFailed
}

func (m *Metrics) pass(d time.Duration) {
	if m != nil {
		m.passes.Observe(d.Seconds())
	}
}

func (m *Metrics) ttlExpired(desired workspace.DesiredState) {
	if m == nil {
		return
	}
	kind := expiryArchive
	if desired == workspace.DesiredStandby {
		kind = expiryStandby
	}
	m.ttlExpiries.WithLabelValues(kind).Inc()
}

func (m *Metrics) gcDeletedArchive() {
	if m != nil {
		m.gcDeleted.Inc()
	}
}

func (m *Metrics) snapshot(result string, bytes int64) {
	if m != nil {
		m.snapshots.WithLabelValues(result).Inc()
		m.snapBytes.Add(float64(bytes))
	}
}

func (m *Metrics) setOrphans(n int) {
	if m != nil {
		m.orphans.Set(float64(n))
	}
}

func (m *Metrics) gcAbortedUpload() {
	if m != nil {
		m.gcAborted.Inc()
	}
}
