package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/events"
	"github.com/codehub-io/codehub/store"
)

// Loop is a background loop that runs only on the elected leader. Run
// blocks until ctx ends (leadership lost or shutdown) and then returns; an
// error before that ends the leadership term, as a leader that cannot do
// its work should let another replica try.
type Loop interface {
	Run(ctx context.Context) error
}

// LoopFunc adapts a function to Loop.
type LoopFunc func(ctx context.Context) error

// Run calls f.
func (f LoopFunc) Run(ctx context.Context) error { return f(ctx) }

// CoordinatorConfig configures leader election and the controller loop.
type CoordinatorConfig struct {
	// DatabaseURL opens the dedicated leader connection; the session holds
	// the leader lock and LISTENs for workspace changes.
	DatabaseURL string
	// Holder names this replica in coordinator_epoch (e.g. host:pid).
	Holder string
	// IdleInterval and ActiveInterval pace the controller: active while
	// any operation runs or the last pass changed something.
	IdleInterval   time.Duration
	ActiveInterval time.Duration
	// RetryInterval paces a follower's attempts to take the lock.
	RetryInterval time.Duration
	// KeepAlive is the TCP keepalive idle time and probe interval of the
	// leader connection, on both ends; UserTimeout bounds unacknowledged
	// data on it (Linux). Together they end a silently broken session, and
	// free the lock, within seconds.
	KeepAlive   time.Duration
	UserTimeout time.Duration
	// Metrics records the leader terms this replica holds.
	Metrics *Metrics
}

// DefaultCoordinatorConfig is CoordinatorConfigFrom the configuration's
// defaults.
func DefaultCoordinatorConfig(databaseURL, holder string) CoordinatorConfig {
	cfg := config.Default()
	cfg.Database.URL = config.SecretURL(databaseURL)
	return CoordinatorConfigFrom(cfg, holder)
}

// CoordinatorConfigFrom takes the coordinator's pacing from codehub's
// configuration; the connection's own timings are fixed here.
func CoordinatorConfigFrom(cfg *config.Config, holder string) CoordinatorConfig {
	return CoordinatorConfig{
		DatabaseURL:    cfg.Database.URL.Reveal(),
		Holder:         holder,
		IdleInterval:   cfg.Coordinator.IdleInterval,
		ActiveInterval: cfg.Coordinator.ActiveInterval,
		RetryInterval:  time.Second,
		KeepAlive:      2 * time.Second,
		UserTimeout:    5 * time.Second,
	}
}

// Coordinator elects one leader among the replicas with a session advisory
// lock and runs the WorkspaceController and the extra loops only while it
// leads. Leadership, and every loop, ends the moment the leader connection
// is lost; a follower then takes the lock and bumps the epoch, which fences
// out any write the old leader still has in flight.
type Coordinator struct {
	logger     hclog.Logger
	cfg        CoordinatorConfig
	controller *WorkspaceController
	loops      []Loop

	wake    chan struct{}
	leading atomic.Bool
	epoch   atomic.Int64
}

// NewCoordinator returns a coordinator that, while leading, runs controller
// and loops (TTL runner, GC runner, event listener, backend watcher).
func NewCoordinator(logger hclog.Logger, cfg CoordinatorConfig, controller *WorkspaceController, loops ...Loop) *Coordinator {
	return &Coordinator{
		logger:     logger,
		cfg:        cfg,
		controller: controller,
		loops:      loops,
		wake:       make(chan struct{}, 1),
	}
}

// Wake asks for a controller pass as soon as possible. Bursts coalesce into
// one pass; it never blocks.
func (c *Coordinator) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// WatchLoop runs a backend's event watcher as a leader loop that wakes
// the controller.
func (c *Coordinator) WatchLoop(n Notifier) Loop {
	return LoopFunc(func(ctx context.Context) error { return n.Watch(ctx, c.Wake) })
}

// Leading reports whether this replica currently leads.
func (c *Coordinator) Leading() bool { return c.leading.Load() }

// Epoch returns the epoch of the current (or last) leadership term.
func (c *Coordinator) Epoch() int64 { return c.epoch.Load() }

// Run campaigns for leadership and leads until ctx ends, campaigning again
// whenever a term ends.
func (c *Coordinator) Run(ctx context.Context) error {
	for {
		err := c.campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.logger.Warn("leader election", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.cfg.RetryInterval):
		}
	}
}

// campaign connects, waits for the lock, and leads for one term.
func (c *Coordinator) campaign(ctx context.Context) error {
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	// Closing the session releases the lock at once.
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		ok, err := store.TryLeaderLock(ctx, conn)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.cfg.RetryInterval):
		}
	}
	epoch, err := store.BumpEpoch(ctx, conn, c.cfg.Holder)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+events.PGChannel); err != nil {
		return fmt.Errorf("listen %s: %w", events.PGChannel, err)
	}
	return c.lead(ctx, conn, epoch)
}

func (c *Coordinator) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(c.cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: c.cfg.KeepAlive, Interval: c.cfg.KeepAlive, Count: 3,
		},
		Control: userTimeoutControl(c.cfg.UserTimeout),
	}
	cfg.DialFunc = dialer.DialContext
	// The same limits on the server's end of the session: a leader host
	// that vanishes without closing its connection loses the lock within
	// seconds, not when the server's default keepalive (hours) notices.
	secs := strconv.Itoa(max(1, int(c.cfg.KeepAlive.Seconds())))
	cfg.RuntimeParams["tcp_keepalives_idle"] = secs
	cfg.RuntimeParams["tcp_keepalives_interval"] = secs
	cfg.RuntimeParams["tcp_keepalives_count"] = "3"
	cfg.RuntimeParams["tcp_user_timeout"] = strconv.FormatInt(c.cfg.UserTimeout.Milliseconds(), 10)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect leader session: %w", err)
	}
	return conn, nil
}

// lead runs every loop until ctx ends, the session is lost, a loop fails,
// or the controller finds itself deposed.
func (c *Coordinator) lead(ctx context.Context, conn *pgx.Conn, epoch int64) error {
	termCtx, end := context.WithCancelCause(ctx)
	defer end(nil)
	c.epoch.Store(epoch)
	c.leading.Store(true)
	c.cfg.Metrics.leading(true)
	defer func() {
		c.leading.Store(false)
		c.cfg.Metrics.leading(false)
	}()
	log := c.logger.With("epoch", epoch)
	log.Info("leadership acquired", "holder", c.cfg.Holder)

	// LISTEN came before the term's first pass, which is full.
	c.controller.notes.follow(epoch)
	defer c.controller.notes.follow(0)
	var wg sync.WaitGroup
	wg.Go(func() { end(c.listen(termCtx, conn)) })
	wg.Go(func() { end(c.runController(termCtx, epoch)) })
	for _, l := range c.loops {
		wg.Go(func() {
			if err := l.Run(termCtx); err != nil && termCtx.Err() == nil {
				end(fmt.Errorf("leader loop: %w", err))
			}
		})
	}
	<-termCtx.Done()
	cause := context.Cause(termCtx)
	wg.Wait()
	if ctx.Err() != nil {
		log.Info("leadership released on shutdown")
		return nil
	}
	log.Warn("leadership lost", "error", cause)
	return cause
}

// listen waits on the leader session: a notification of a desired-state
// change wakes the controller; an error means the session, and with it the
// lock, is gone.
func (c *Coordinator) listen(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("leader session lost: %w", err)
		}
		notice, err := events.ParseNotice(n.Payload)
		if err != nil {
			// A change the controller cannot place: it reads every row.
			c.logger.Warn("unreadable workspace notification", "payload", n.Payload, "error", err)
			c.controller.notes.follow(0)
			continue
		}
		c.controller.notes.changed(notice.ID)
		// A user's request, now in the notes: the pass that wakes reads
		// it. (A wake by another listener may come before this session
		// has the notification, and that pass does not see the change.)
		if notice.Kind == events.KindDesired || notice.Kind == events.KindDeleted {
			c.Wake()
		}
	}
}

// runController ticks the controller: at once, then every active or idle
// interval, at the earliest retry, or sooner when woken.
func (c *Coordinator) runController(ctx context.Context, epoch int64) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wake:
		case <-timer.C:
		}
		stats, err := c.controller.Tick(ctx, epoch)
		if errors.Is(err, ErrDeposed) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			c.logger.Warn("controller pass failed", "error", err)
		}
		timer.Reset(nextPass(stats, c.cfg, time.Now()))
	}
}

// nextPass is the pause before the next controller pass: short while work
// is in flight, long when idle, and never past the earliest retry of a
// failed attempt, so a transient failure costs its backoff and no more.
func nextPass(stats TickStats, cfg CoordinatorConfig, now time.Time) time.Duration {
	if stats.Stale {
		return 0
	}
	next := cfg.IdleInterval
	if stats.Active() {
		next = cfg.ActiveInterval
	}
	if !stats.NextAttempt.IsZero() {
		next = min(next, max(stats.NextAttempt.Sub(now), 0))
	}
	return next
}
