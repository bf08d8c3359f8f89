package doctor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
)

// Options tune the checks.
type Options struct {
	// ClockTolerance is how far another clock may be off;
	// DefaultClockTolerance if zero.
	ClockTolerance time.Duration
	// Timeout bounds each check; 10 s if zero.
	Timeout time.Duration
	// Resolver looks names up; net.DefaultResolver if nil.
	Resolver Resolver
}

func (o Options) withDefaults() Options {
	if o.ClockTolerance == 0 {
		o.ClockTolerance = DefaultClockTolerance
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Resolver == nil {
		o.Resolver = defaultResolver
	}
	return o
}

// Services checks the services every codehub needs, whatever its backend:
// PostgreSQL (reachable, schema), Redis, S3 (keys, bucket, writes), their
// clocks, and the public URL.
func Services(ctx context.Context, cfg *config.Config, opts Options) []Finding {
	opts = opts.withDefaults()
	var out []Finding
	out = append(out, postgres(ctx, cfg, opts)...)
	out = append(out, redisCheck(ctx, cfg, opts))
	out = append(out, s3(ctx, cfg, opts)...)
	out = append(out, PublicURL(ctx, cfg, opts)...)
	return out
}

func postgres(ctx context.Context, cfg *config.Config, opts Options) []Finding {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	fail := func(detail string) []Finding {
		return []Finding{
			{Check: "postgres", Status: Fail, Detail: detail,
				Fix: "set database { url } to a PostgreSQL 15 or newer that this machine reaches, with a role that owns the database", Doc: DocDeployment},
			{Check: "postgres.schema", Status: Skip, Detail: "PostgreSQL not reachable"},
			{Check: "clock.postgres", Status: Skip, Detail: "PostgreSQL not reachable"},
		}
	}
	pool, err := store.Open(ctx, cfg.Database.URL.Reveal())
	if err != nil {
		return fail(err.Error())
	}
	defer pool.Close()
	var version string
	sent := time.Now()
	var remote time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp(), current_setting('server_version')").Scan(&remote, &version); err != nil {
		return fail(err.Error())
	}
	received := time.Now()
	out := []Finding{{Check: "postgres", Status: OK, Detail: "PostgreSQL " + version}}

	st, err := store.ReadSchemaState(ctx, pool)
	switch {
	case err != nil:
		out = append(out, Finding{Check: "postgres.schema", Status: Fail, Detail: err.Error(),
			Fix: "give codehub's role the rights to read its database", Doc: DocDeployment})
	case len(st.Unknown) > 0:
		out = append(out, Finding{Check: "postgres.schema", Status: Fail,
			Detail: fmt.Sprintf("the database holds migrations this codehub does not know (%v): a newer release migrated it", st.Unknown),
			Fix:    "run the release that migrated the database, or a newer one; schemas are never migrated down", Doc: DocDeployment})
	case len(st.Pending) > 0 && !st.CanCreate:
		out = append(out, Finding{Check: "postgres.schema", Status: Fail,
			Detail: fmt.Sprintf("%d migrations pending and the role may not create tables in its schema", len(st.Pending)),
			Fix:    "grant codehub's role CREATE on its schema (or make it the database's owner), then run codehub migrate", Doc: DocDeployment})
	case len(st.Pending) > 0:
		out = append(out, Finding{Check: "postgres.schema", Status: Warn,
			Detail: fmt.Sprintf("%d of the schema's migrations not applied yet (first: %s)", len(st.Pending), st.Pending[0]),
			Fix:    "codehub server applies them at start; codehub migrate -config FILE applies them now", Doc: DocDeployment})
	default:
		out = append(out, Finding{Check: "postgres.schema", Status: OK, Detail: "migrated to this release's schema"})
	}
	// clock_timestamp has microseconds: the precision is the round trip's.
	return append(out, judgeClock("postgres", leastSkew(sent, received, remote, time.Microsecond), opts.ClockTolerance))
}

func redisCheck(ctx context.Context, cfg *config.Config, opts Options) Finding {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	ropts, err := redis.ParseURL(cfg.Redis.URL.Reveal())
	if err != nil {
		return Finding{Check: "redis", Status: Fail, Detail: "redis { url }: " + err.Error(),
			Fix: "set redis { url } to redis://[user:password@]host:port/db", Doc: DocDeployment}
	}
	c := redis.NewClient(ropts)
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return Finding{Check: "redis", Status: Fail, Detail: err.Error(),
			Fix: "set redis { url } to a Redis this machine reaches, with its password", Doc: DocDeployment}
	}
	detail := "answers"
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			detail = "Redis " + v
		}
	}
	return Finding{Check: "redis", Status: OK, Detail: detail}
}

// s3 tries the bucket the way archives use it: the keys are accepted, the
// bucket exists, and an object can be written, listed and removed. The
// object written is removed before the check ends.
func s3(ctx context.Context, cfg *config.Config, opts Options) []Finding {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	keysFix := "set s3 { endpoint, access_key, secret_key, region, use_ssl } to an S3 server this machine reaches and keys it accepts"
	client, err := archive.NewClient(archive.ClientConfig{
		Endpoint:  cfg.S3.Endpoint,
		AccessKey: cfg.S3.AccessKey.Reveal(),
		SecretKey: cfg.S3.SecretKey.Reveal(),
		Region:    cfg.S3.Region,
		UseSSL:    cfg.S3.UseSSL,
	})
	if err != nil {
		return []Finding{{Check: "s3", Status: Fail, Detail: err.Error(), Fix: keysFix, Doc: DocDeployment}}
	}
	out := []Finding{s3Clock(ctx, client, opts)}
	exists, err := client.BucketExists(ctx, cfg.S3.Bucket)
	switch {
	case err != nil:
		return append(out,
			Finding{Check: "s3", Status: Fail, Detail: describeS3(err), Fix: keysFix, Doc: DocDeployment},
			Finding{Check: "s3.write", Status: Skip, Detail: "S3 did not answer"})
	case !exists:
		return append(out,
			Finding{Check: "s3", Status: Warn, Detail: fmt.Sprintf("bucket %q does not exist", cfg.S3.Bucket),
				Fix: "codehub server creates it at its first start if the keys may; else create it, or fix s3 { bucket }", Doc: DocDeployment},
			Finding{Check: "s3.write", Status: Skip, Detail: "no bucket to write to"})
	}
	out = append(out, Finding{Check: "s3", Status: OK, Detail: fmt.Sprintf("bucket %q at %s", cfg.S3.Bucket, cfg.S3.Endpoint)})
	return append(out, s3Write(ctx, client, cfg.S3.Bucket))
}

func s3Write(ctx context.Context, client *minio.Client, bucket string) Finding {
	fix := "the keys need to put, list and delete objects in the bucket (s3:PutObject, s3:ListBucket, s3:DeleteObject)"
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	key := "codehub-doctor/" + hex.EncodeToString(suffix)
	body := []byte("written by codehub doctor, removed at once\n")
	if _, err := client.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		return Finding{Check: "s3.write", Status: Fail, Detail: "write an object: " + describeS3(err), Fix: fix, Doc: DocDeployment}
	}
	listed := false
	for obj := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: key}) {
		if obj.Err != nil {
			_ = client.RemoveObject(context.WithoutCancel(ctx), bucket, key, minio.RemoveObjectOptions{})
			return Finding{Check: "s3.write", Status: Fail, Detail: "list objects: " + describeS3(obj.Err), Fix: fix, Doc: DocDeployment}
		}
		listed = listed || obj.Key == key
	}
	if err := client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return Finding{Check: "s3.write", Status: Fail, Detail: fmt.Sprintf("remove the object written (%s): %s", key, describeS3(err)), Fix: fix, Doc: DocDeployment}
	}
	if !listed {
		return Finding{Check: "s3.write", Status: Fail, Detail: "an object written was not listed", Fix: "use an S3 server whose listings show what was written", Doc: DocDeployment}
	}
	return Finding{Check: "s3.write", Status: OK, Detail: "an object was written, listed and removed"}
}

// s3Clock reads the S3 server's clock from the Date header of an
// unsigned request, which every S3 server answers (if only to refuse it).
func s3Clock(ctx context.Context, client *minio.Client, opts Options) Finding {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, client.EndpointURL().String(), nil)
	if err != nil {
		return Finding{Check: "clock.s3", Status: Skip, Detail: err.Error()}
	}
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	received := time.Now()
	if err != nil {
		return Finding{Check: "clock.s3", Status: Skip, Detail: "S3 did not answer: " + err.Error()}
	}
	resp.Body.Close()
	remote, err := DateOf(resp)
	if err != nil {
		return Finding{Check: "clock.s3", Status: Skip, Detail: err.Error()}
	}
	return judgeClock("s3", leastSkew(sent, received, remote, HTTPDatePrecision), opts.ClockTolerance)
}

// describeS3 names an S3 error by its code when the server gave one.
func describeS3(err error) string {
	if resp := minio.ToErrorResponse(err); resp.Code != "" {
		return fmt.Sprintf("%s (%s)", resp.Code, resp.Message)
	}
	return err.Error()
}
