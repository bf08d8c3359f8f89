package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codehub-io/codehub/store"
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
// and their durations, TTL expiries, controller passes and GC deletions,
// and what the leader's last pass saw: workspaces by phase, the oldest
// operation of each kind. Only the leader's loops record, so on a follower
// the counters stay put and the gauges of passes read zero; codehub_leader
// says which replica leads. A nil *Metrics records nothing.
type Metrics struct {
	leader         prometheus.Gauge
	terms          prometheus.Counter
	workspaces     *prometheus.GaugeVec
	opAge          *prometheus.GaugeVec
	backupFailures prometheus.Counter

	transitions *prometheus.CounterVec
	operations  *prometheus.CounterVec
	opDuration  *prometheus.HistogramVec
	ttlExpiries *prometheus.CounterVec
	passes      prometheus.Histogram
	observes    prometheus.Histogram
	stale       prometheus.Counter
	gcDeleted   prometheus.Counter
	gcAborted   prometheus.Counter
	orphans     prometheus.Gauge
	snapshots   *prometheus.CounterVec
	snapBytes   prometheus.Counter
	prebuilds   *prometheus.GaugeVec
	warmHomes   *prometheus.GaugeVec
}

// NewMetrics registers the engine's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "codehub_leader",
			Help: "1 while this replica leads the controller, else 0.",
		}),
		terms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_leader_terms_total",
			Help: "Leader terms this replica began.",
		}),
		workspaces: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "codehub_controller_workspaces",
			Help: "Unfinished workspaces by phase as the API shows it (UNAVAILABLE: the home waits for a node that cannot serve it), at the leader's last pass.",
		}, []string{"phase"}),
		opAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "codehub_operation_age_seconds",
			Help: "Age of the oldest operation of each kind in flight at the leader's last pass; 0 when none is.",
		}, []string{"operation"}),
		backupFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_backup_failures_total",
			Help: "Backups that failed or were given up; the home stays in its volume and the backup is tried again.",
		}),
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
		observes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "codehub_controller_observe_duration_seconds",
			Help:    "Duration of the backend observations that begin each controller pass.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codehub_controller_stale_passes_total",
			Help: "Controller passes that stopped acting because their observation had grown too old; the next pass observes again at once.",
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
	for _, op := range operations {
		for _, result := range []string{resultStarted, resultSucceeded, resultFailed, resultTimeout} {
			m.operations.WithLabelValues(string(op), result)
		}
		m.opDuration.WithLabelValues(string(op))
	}
	m.resetPassGauges()
	m.prebuilds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "codehub_prebuilds",
		Help: "Prebuilds of each template by status (REQUESTED, BUILDING, READY, FAILED), as the prebuild runner's last pass saw them.",
	}, []string{"template", "status"})
	m.warmHomes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "codehub_warm_homes",
		Help: "Homes of each template's warm pool (size: what it keeps; ready: claimable now; filling: being made), as the prebuild runner's last pass saw them.",
	}, []string{"template", "state"})
	for _, c := range []prometheus.Collector{m.leader, m.terms, m.workspaces, m.opAge, m.backupFailures, m.transitions, m.operations, m.opDuration, m.ttlExpiries, m.passes, m.observes, m.stale, m.gcDeleted, m.gcAborted, m.orphans, m.snapshots, m.snapBytes, m.prebuilds, m.warmHomes} {
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

func (m *Metrics) observed(d time.Duration) {
	if m != nil {
		m.observes.Observe(d.Seconds())
	}
}

func (m *Metrics) stalePass() {
	if m != nil {
		m.stale.Inc()
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

// operations are the kinds of operation, and displayPhases the phases the
// API shows: every series of their vectors exists from the start.
var (
	operations = []workspace.Operation{
		workspace.OpProvisioning, workspace.OpRestoring, workspace.OpStarting, workspace.OpStopping,
		workspace.OpArchiving, workspace.OpCreateEmptyArchive, workspace.OpDeleting,
	}
	displayPhases = []string{
		string(workspace.PhasePending), string(workspace.PhaseArchived), string(workspace.PhaseStandby),
		string(workspace.PhaseRunning), string(workspace.PhaseError), string(workspace.PhaseDeleting),
		workspace.DisplayProvisioning, workspace.DisplayRestoring, workspace.DisplayStarting,
		workspace.DisplayStopping, workspace.DisplayArchiving, workspace.DisplayUnavailable,
	}
)

// leading records that this replica began (true) or ended a leader term.
// A replica that stops leading reports no pass of its own.
func (m *Metrics) leading(on bool) {
	if m == nil {
		return
	}
	if on {
		m.terms.Inc()
		m.leader.Set(1)
		return
	}
	m.leader.Set(0)
	m.resetPassGauges()
}

func (m *Metrics) resetPassGauges() {
	for _, phase := range displayPhases {
		m.workspaces.WithLabelValues(phase).Set(0)
	}
	for _, op := range operations {
		m.opAge.WithLabelValues(string(op)).Set(0)
	}
}

// passTally counts, as a pass goes, what its gauges report.
type passTally struct {
	phases map[string]int
	oldest map[workspace.Operation]time.Duration
}

// add counts w as the pass leaves it.
func (t *passTally) add(w workspace.Workspace, now time.Time) {
	if t.phases == nil {
		t.phases = make(map[string]int, len(displayPhases))
		t.oldest = make(map[workspace.Operation]time.Duration, len(operations))
	}
	t.phases[workspace.DisplayPhase(w)]++
	if w.Operation != workspace.OpNone && w.OpStartedAt != nil {
		t.oldest[w.Operation] = max(t.oldest[w.Operation], now.Sub(*w.OpStartedAt))
	}
}

// passSeen records what a completed pass counted.
func (m *Metrics) passSeen(t passTally) {
	if m == nil {
		return
	}
	for _, phase := range displayPhases {
		m.workspaces.WithLabelValues(phase).Set(float64(t.phases[phase]))
	}
	for _, op := range operations {
		m.opAge.WithLabelValues(string(op)).Set(t.oldest[op].Seconds())
	}
}

func (m *Metrics) backupFailed() {
	if m != nil {
		m.backupFailures.Inc()
	}
}

// prebuildPass records what a prebuild runner pass saw: prebuilds by
// template and status, and each warm pool's size and level.
func (m *Metrics) prebuildPass(templates []prebuildTemplate, rows []prebuildRow, pool []workspace.Workspace) {
	if m == nil {
		return
	}
	m.prebuilds.Reset()
	for _, t := range templates {
		if t.Prebuilds {
			for _, st := range []string{store.PrebuildRequested, store.PrebuildBuilding, store.PrebuildReady, store.PrebuildFailed} {
				m.prebuilds.WithLabelValues(t.Name, st).Set(0)
			}
		}
	}
	for _, r := range rows {
		m.prebuilds.WithLabelValues(r.Template, r.Status).Inc()
	}
	m.warmHomes.Reset()
	for _, t := range templates {
		if t.Warm > 0 {
			m.warmHomes.WithLabelValues(t.Name, "size").Set(float64(t.Warm))
			m.warmHomes.WithLabelValues(t.Name, "ready").Set(0)
			m.warmHomes.WithLabelValues(t.Name, "filling").Set(0)
		}
	}
	for _, w := range pool {
		state := "filling"
		if workspace.PoolReady(w) {
			state = "ready"
		}
		m.warmHomes.WithLabelValues(deref(w.PoolOf), state).Inc()
	}
}
