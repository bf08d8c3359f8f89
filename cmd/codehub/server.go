package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/doctor"
)

func runServer(args []string, _ io.Reader, _, stderr io.Writer) int {
	fs, path := configFlags("server", stderr)
	if !parseConfigCommand(fs, path, args, stderr) {
		return 2
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return 1
	}
	logger := config.NewLogger(cfg)
	setGCPercent()
	ctx, stop := signalContext()
	defer stop()
	if err := serve(ctx, logger, cfg); err != nil {
		logger.Error("server stopped", "error", err)
		return 1
	}
	return 0
}

// serverGCPercent is the server's garbage collection target when GOGC is
// not set. The server's live heap is a few MiB, while the proxy allocates
// some 7 KiB per request: at Go's default of 100 the collector ran about
// 20 times a second under proxy load, for a heap goal of 6 MiB. At 400 it
// runs a quarter as often, for a goal about 12 MiB higher; in paired runs
// at moderate load a proxied request cost 4–16 % less CPU
// (docs/benchmarks.md). GOGC in the environment still takes precedence,
// and GOMEMLIMIT still bounds the heap where memory is tight.
const serverGCPercent = 400

func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
}

// deps are the connections every part of the server shares.
type deps struct {
	pool   *pgxpool.Pool
	redis  *redis.Client
	s3     *minio.Client
	bucket string
	// s3Requests counts the requests of s3.
	s3Requests *s3Requests
}

func connect(ctx context.Context, logger hclog.Logger, cfg *config.Config) (*deps, error) {
	pool, err := openMigrated(ctx, cfg.Database.URL.Reveal(), logger.Named("migrate"))
	if err != nil {
		return nil, err
	}
	ropts, err := redis.ParseURL(cfg.Redis.URL.Reveal())
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	requests := newS3Requests()
	s3, err := archive.NewClient(archive.ClientConfig{
		Endpoint:  cfg.S3.Endpoint,
		AccessKey: cfg.S3.AccessKey.Reveal(),
		SecretKey: cfg.S3.SecretKey.Reveal(),
		Region:    cfg.S3.Region,
		UseSSL:    cfg.S3.UseSSL,
		Wrap:      requests.wrap,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	d := &deps{pool: pool, redis: redis.NewClient(ropts), s3: s3, bucket: cfg.S3.Bucket, s3Requests: requests}
	if err := ensureBucket(ctx, logger, d); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// ensureBucket creates the archive bucket when it is missing, so a fresh
// installation works; an unreachable S3 server is not fatal at start (the
// health endpoint reports it and archive operations retry).
func ensureBucket(ctx context.Context, logger hclog.Logger, d *deps) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	exists, err := d.s3.BucketExists(ctx, d.bucket)
	if err != nil {
		logger.Warn("s3 not reachable at start", "bucket", d.bucket, "error", err)
		return nil
	}
	if exists {
		return nil
	}
	if err := d.s3.MakeBucket(ctx, d.bucket, minio.MakeBucketOptions{}); err != nil {
		return fmt.Errorf("create bucket %q: %w", d.bucket, err)
	}
	logger.Info("created archive bucket", "bucket", d.bucket)
	return nil
}

func (d *deps) close() {
	_ = d.redis.Close()
	d.pool.Close()
}

func (d *deps) healthChecks() []healthCheck {
	return []healthCheck{
		{"database", func(ctx context.Context) error { return d.pool.Ping(ctx) }},
		{"redis", func(ctx context.Context) error { return d.redis.Ping(ctx).Err() }},
		{"s3", func(ctx context.Context) error {
			ok, err := d.s3.BucketExists(ctx, d.bucket)
			if err == nil && !ok {
				err = fmt.Errorf("bucket %q does not exist", d.bucket)
			}
			return err
		}},
	}
}

// serve runs the HTTP server and the background loops until ctx ends, then
// shuts them down in order: stop accepting, drain requests, stop loops.
func serve(ctx context.Context, logger hclog.Logger, cfg *config.Config) error {
	d, err := connect(ctx, logger, cfg)
	if err != nil {
		return err
	}
	defer d.close()

	app, err := newApp(ctx, logger, cfg, d)
	if err != nil {
		return err
	}

	tcp, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	// Without it an idle keep-alive connection is held forever: it falls
	// back to ReadTimeout, not ReadHeaderTimeout. No ReadTimeout or
	// WriteTimeout: WebSockets and event streams run for hours; event
	// streams bound each write themselves.
	const idleTimeout, headerTimeout = 30 * time.Second, 10 * time.Second
	ln := app.listen(tcp, idleTimeout, headerTimeout)
	srv := &http.Server{
		Handler:           app.handler,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	logger.Info("codehub server listening", "address", ln.Addr().String(), "public_url", cfg.PublicURL, "version", version)
	if cfg.PathModeExposed() {
		logger.Warn("workspaces are served under /w/{id}/ on the dashboard's origin: what a workspace serves can call the API as its user; set proxy.subdomain_base (docs/architecture.md)",
			"public_url", cfg.PublicURL)
	}
	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	if base := cfg.Proxy.SubdomainBase; base != "" {
		// Beside the start, not in front of it: a slow resolver must not
		// hold the listener back.
		wg.Go(func() { checkWildcard(loopCtx, logger, net.DefaultResolver, base) })
	}
	for _, loop := range app.loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop.run(loopCtx); err != nil && !errors.Is(err, context.Canceled) {
				logger.Error("background loop stopped", "loop", loop.name, "error", err)
			}
		}()
	}

	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(ln) }()
	metricsSrv, err := serveMetrics(cfg, app.metrics, serveErr)
	if err != nil {
		_ = srv.Close()
		stopLoops()
		wg.Wait()
		return err
	}
	if metricsSrv == nil && !cfg.Metrics.Token.IsSet() {
		logger.Info("metrics are not served: set metrics.listen or metrics.token")
	}
	select {
	case err := <-serveErr:
		_ = srv.Close()
		if metricsSrv != nil {
			_ = metricsSrv.Close()
		}
		stopLoops()
		wg.Wait()
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// SSE streams and WebSockets never finish by themselves: close them
	// after the grace period rather than wait forever.
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	// Connections the proxy took over end after the answer each is
	// writing; the server does not count them.
	_ = ln.Wait(shutdownCtx)
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(shutdownCtx)
	}
	stopLoops()
	wg.Wait()
	app.close()
	logger.Info("stopped")
	return nil
}

// serveMetrics opens metrics.listen, when set, serving only GET /metrics;
// a failure of that server ends the main one through serveErr.
func serveMetrics(cfg *config.Config, h http.Handler, serveErr chan<- error) (*http.Server, error) {
	if cfg.Metrics.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", cfg.Metrics.Listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("metrics server: %w", err)
		}
	}()
	return srv, nil
}

// checkWildcard warns when a name under the subdomain base does not
// resolve here: every workspace is served on a host of its own there, so
// *.base needs a DNS record (to the front). It only warns, since users may
// resolve names this machine does not (split-horizon DNS); codehub doctor
// checks the same and the certificate too.
func checkWildcard(ctx context.Context, logger hclog.Logger, r doctor.Resolver, base string) {
	probe, err := doctor.CheckWildcard(ctx, r, base)
	switch {
	case probe == "":
	case err != nil:
		logger.Warn("workspace hosts do not resolve here: give *."+base+" a DNS record pointing at the front, with a certificate covering it (docs/nomad.md, Deployment); check with: getent hosts "+probe,
			"subdomain_base", base, "error", err)
	default:
		logger.Debug("workspace hosts resolve", "probe", probe)
	}
}
