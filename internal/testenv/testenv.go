// Package testenv hands tests the real services that `make test` starts:
// PostgreSQL, Redis and an S3 server. Outside `make test` a test whose
// service is not configured is skipped with the variable it needs; under
// `make test` (CODEHUB_TEST_REQUIRE_SERVICES=1) that is a failure.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/redis/go-redis/v9"
)

// Variables set by the Makefile.
const (
	EnvDatabaseURL = "CODEHUB_TEST_DATABASE_URL"
	EnvRedisURL    = "CODEHUB_TEST_REDIS_URL"
	EnvS3Endpoint  = "CODEHUB_TEST_S3_ENDPOINT"
	EnvS3AccessKey = "CODEHUB_TEST_S3_ACCESS_KEY"
	EnvS3SecretKey = "CODEHUB_TEST_S3_SECRET_KEY"
	EnvS3Region    = "CODEHUB_TEST_S3_REGION"
	EnvRequire     = "CODEHUB_TEST_REQUIRE_SERVICES"
)

func need(t testing.TB, name, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s is required under make test but %s is not set", name, env)
	}
	t.Skipf("%s not available: set %s (make test does)", name, env)
	return ""
}

// Suffix returns a short random lower-case hex string for unique names.
func Suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PostgresURL creates a fresh, empty database for the test and returns its URL.
// The database is dropped when the test ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := need(t, "PostgreSQL", EnvDatabaseURL)
	name := "t_" + Suffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to test postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop test database: %v", err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database: %v", err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvDatabaseURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// RedisURL returns the URL of a Redis logical database reserved for the
// test and emptied first. The server runs with many databases so packages
// testing in parallel do not see each other's keys.
func RedisURL(t testing.TB) string {
	t.Helper()
	base := need(t, "Redis", EnvRedisURL)
	opts, err := redis.ParseURL(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvRedisURL, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(opts)
	defer c.Close()
	n, err := c.Incr(ctx, "codehub:test:next-db").Result()
	if err != nil {
		t.Fatalf("reserve redis database: %v", err)
	}
	db := int(n%1000) + 1
	opts.DB = db
	rc := redis.NewClient(opts)
	defer rc.Close()
	if err := rc.FlushDB(ctx).Err(); err != nil {
		t.Fatalf("flush redis database %d: %v", db, err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvRedisURL, err)
	}
	u.Path = fmt.Sprintf("/%d", db)
	return u.String()
}

// S3 is a connection to the test S3 server with a bucket of the test's own.
type S3 struct {
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
	Region    string
	Bucket    string
	Client    *minio.Client
}

// NewS3 creates a fresh bucket for the test on the test S3 server.
func NewS3(t testing.TB) S3 {
	t.Helper()
	s := S3{
		Endpoint:  strings.TrimPrefix(need(t, "S3 server", EnvS3Endpoint), "http://"),
		AccessKey: need(t, "S3 server", EnvS3AccessKey),
		SecretKey: need(t, "S3 server", EnvS3SecretKey),
		Region:    os.Getenv(EnvS3Region),
		Bucket:    "t-" + Suffix(),
	}
	if s.Region == "" {
		s.Region = "us-east-1"
	}
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: s.Region,
	})
	if err != nil {
		t.Fatalf("s3 client: %v", err)
	}
	s.Client = c
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("create test bucket: %v", err)
	}
	t.Cleanup(func() { removeBucket(t, c, s.Bucket) })
	return s
}

func removeBucket(t testing.TB, c *minio.Client, bucket string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objects := c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true})
	for e := range c.RemoveObjects(ctx, bucket, objects, minio.RemoveObjectsOptions{}) {
		t.Logf("remove test object %s: %v", e.ObjectName, e.Err)
	}
	if err := c.RemoveBucket(ctx, bucket); err != nil {
		t.Logf("remove test bucket: %v", err)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// server the test starts itself. It is taken below Linux's ephemeral
// range (32768 and up by default): a port from that range may be handed
// to any outgoing connection on the machine before the server binds it,
// which made tests fail with "address already in use".
func FreePort(t testing.TB) int {
	t.Helper()
	const low, high = 10000, 32000
	for range 200 {
		port := low + mathrand.IntN(high-low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("find a free port: 200 tries between %d and %d were all taken", low, high)
	return 0
}
