package archive

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// A part damaged on its way to S3 must fail the upload rather than end up
// in an archive that only a restore, after the volume is gone, finds
// corrupt: the server checks every part against the checksum sent with it.
func TestArchiveRejectsPartCorruptedInTransit(t *testing.T) {
	_, s3 := newTestStore(t)
	damage := &damagingTransport{next: http.DefaultTransport}
	client, err := minio.New(s3.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, ""),
		Region:    s3.Region,
		Transport: damage,
	})
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(hclog.NewNullLogger(), client, s3.Bucket)
	src := t.TempDir()
	makeTree(t, src, 1<<20)
	ctx := context.Background()

	_, err = store.Archive(ctx, src, testKey, nil)
	wantCode(t, err, CodeS3Access)
	if damage.parts.Load() == 0 {
		t.Fatal("no part went through the damaging transport")
	}
	if _, err := store.Stat(ctx, testKey); !errors.Is(err, ErrArchiveNotFound) {
		t.Fatalf("after the failed upload: %v, want %v", err, ErrArchiveNotFound)
	}
}

// damagingTransport flips one byte in the body of every part upload, after
// the request and its headers were signed, as a faulty link would.
type damagingTransport struct {
	next  http.RoundTripper
	parts atomic.Int64
}

func (d *damagingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || r.URL.Query().Get("partNumber") == "" || r.Body == nil {
		return d.next.RoundTrip(r)
	}
	d.parts.Add(1)
	damaged := r.Clone(r.Context())
	damaged.Body = &flipByte{ReadCloser: r.Body, at: 1000}
	return d.next.RoundTrip(damaged)
}

type flipByte struct {
	io.ReadCloser
	at   int64
	read int64
}

func (f *flipByte) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if i := f.at - f.read; i >= 0 && i < int64(n) {
		p[i] ^= 0x01
	}
	f.read += int64(n)
	return n, err
}
