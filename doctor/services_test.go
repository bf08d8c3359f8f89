package doctor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/config"
)

// An S3 server that lets the keys see the bucket but not write to it
// (keys of a read-only policy) fails s3.write and says which right is
// missing, and its clock is read from its Date header. A real S3 server
// here takes every valid key's writes, so a recorded answer stands in.
func TestS3WriteRefused(t *testing.T) {
	skew := 10 * time.Minute
	var puts int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
		switch {
		case r.Method == http.MethodHead && r.URL.Path == "/archives":
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodPut:
			puts++
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message><Resource>/archives/x</Resource><RequestId>1</RequestId></Error>`))
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	cfg := config.Default()
	cfg.S3.Endpoint, cfg.S3.Bucket, cfg.S3.Region = strings.TrimPrefix(srv.URL, "http://"), "archives", "us-east-1"
	cfg.S3.AccessKey, cfg.S3.SecretKey = config.Secret("read-only"), config.Secret("read-only-secret")
	got := map[string]Finding{}
	for _, f := range s3(context.Background(), cfg, Options{}.withDefaults()) {
		got[f.Check] = f
	}
	if f := got["s3"]; f.Status != OK {
		t.Errorf("s3: %+v", f)
	}
	if f := got["s3.write"]; f.Status != Fail || !strings.Contains(f.Detail, "AccessDenied") || !strings.Contains(f.Fix, "s3:PutObject") || puts == 0 {
		t.Errorf("s3.write: %+v (puts %d)", f, puts)
	}
	if f := got["clock.s3"]; f.Status != Fail || !strings.Contains(f.Detail, "ahead of") {
		t.Errorf("clock.s3: %+v", f)
	}
}
