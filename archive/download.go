package archive

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

// Open returns the complete archive at key as stored (zstd-compressed tar),
// with its meta, for a reader that passes the bytes on (a download). The
// bytes are checked against the meta as they are read: the read that would
// complete the object instead returns an error of code CHECKSUM_MISMATCH,
// without its bytes, when the sha256 or the size differ. So whoever passes
// on what it reads, announcing meta.Size bytes, never passes on a
// complete-looking damaged archive: the receiver gets fewer bytes than
// announced. Failures of Open are those of Stat.
//
// An incremental archive is not one object: Open makes the complete
// home.tar.zst of its chain as it is read (see openChain and writeChain),
// checking every archive of the chain against its meta and every file
// against the manifest; its length is not known in advance (meta.Size is
// that of the incremental archive's own object). Any failure is the
// reader's error before its end, so the output never looks complete.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, Meta, error) {
	meta, err := s.Stat(ctx, key)
	if err != nil {
		return nil, Meta{}, err
	}
	if meta.Incremental() {
		c, err := s.openChain(ctx, key, meta)
		if err != nil {
			return nil, Meta{}, err
		}
		return s.combined(ctx, c), meta, nil
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, Meta{}, s3Error(fmt.Errorf("get %s: %w", key, err), CodeArchiveNotFound)
	}
	return &checkedReader{obj: obj, key: key, meta: meta, sum: sha256.New()}, meta, nil
}

// checkedReader hashes what it reads and holds back the last read of the
// object until the object's end confirms size and sha256.
type checkedReader struct {
	obj  io.ReadCloser
	key  string
	meta Meta
	sum  hash.Hash
	n    int64
	err  error
}

func (c *checkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.obj.Read(p)
	c.n += int64(n)
	c.sum.Write(p[:n])
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		c.err = s3Error(fmt.Errorf("read %s: %w", c.key, err), CodeArchiveNotFound)
		return 0, c.err
	case c.n > c.meta.Size:
		c.err = verify(c.sum, c.n, c.meta)
		return 0, c.err
	case c.n < c.meta.Size && err == nil:
		return n, nil
	}
	// The object's last bytes, or its end: they count only if it ends here.
	if err == nil {
		var one [1]byte
		m, endErr := io.ReadFull(c.obj, one[:])
		c.n += int64(m)
		c.sum.Write(one[:m])
		if endErr != nil && !errors.Is(endErr, io.EOF) {
			c.err = s3Error(fmt.Errorf("read %s: %w", c.key, endErr), CodeArchiveNotFound)
			return 0, c.err
		}
	}
	if verr := verify(c.sum, c.n, c.meta); verr != nil {
		c.err = verr
		return 0, c.err
	}
	c.err = io.EOF
	return n, nil
}

func (c *checkedReader) Close() error { return c.obj.Close() }

// combined compresses the chain's complete tar stream into a pipe, in a
// goroutine that Close stops and waits for.
func (s *Store) combined(ctx context.Context, c *chain) io.ReadCloser {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var read atomic.Int64
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		if err == nil {
			err = compressStream(enc, func(w io.Writer) error { return s.writeChain(ctx, c, w, &read) })
			if closeErr := enc.Close(); err == nil {
				err = closeErr
			}
		}
		pw.CloseWithError(err)
	}()
	return &pipeReader{PipeReader: pr, cancel: cancel, done: done}
}

type pipeReader struct {
	*io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *pipeReader) Close() error {
	p.cancel()
	p.PipeReader.Close()
	<-p.done
	return nil
}
