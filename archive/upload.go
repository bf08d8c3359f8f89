package archive

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"
)

// Part sizing. S3 allows 10000 parts of at most 5 GiB, and the size of a
// streamed archive is unknown until its end: parts start small so a small
// home costs little memory, and double every partsPerStep parts so that
// maxParts parts hold 7 TiB, beyond S3's 5 TiB object limit.
const (
	firstPartSize = 8 << 20
	lastPartSize  = 1 << 30
	partsPerStep  = 500
	maxParts      = 10000

	// memPartBytes of each part buffer live in memory; the rest of a larger
	// part spills to a temporary file, so memory stays bounded for any home.
	memPartBytes = 8 << 20

	// partsInFlight parts are hashed or sent at once: an S3 server answers
	// a part only once it is stored, and one part at a time leaves the
	// compressor waiting on that latency.
	partsInFlight = 3

	// hashChunk is how much of a part goes through one hash before the
	// next, so the second reads it from cache.
	hashChunk = 256 << 10
)

// partChecksum is the checksum S3 verifies on every part: the server
// rejects a part whose bytes do not match it, so a part damaged on the way
// fails the upload instead of leaving an archive that only a restore, after
// the volume is gone, finds corrupt. It stands in for SigV4's streaming
// payload signature, which minio-go uses on plain http and which costs a
// second sha256 of every byte on both ends; CRC32C costs a fraction of
// that, and the archive's own sha256 remains the end-to-end check.
const partChecksum = minio.ChecksumCRC32C

// partSize returns the size of part n (counting from 1).
func partSize(n int) int64 {
	size := int64(firstPartSize) << ((n - 1) / partsPerStep)
	return min(size, lastPartSize)
}

// uploader is an io.Writer that cuts what it receives into parts of a
// multipart upload. One part is filled while up to partsInFlight others are
// hashed and sent, so compression, hashing and upload overlap with a fixed
// number of buffers.
type uploader struct {
	ctx      context.Context
	core     minio.Core
	logger   hclog.Logger
	bucket   string
	key      string
	uploadID string

	cur     *spool
	number  int
	size    int64         // bytes accepted so far
	stalled time.Duration // time the writer waited for a free buffer

	// sum is the sha256 of the whole object. Only the hasher writes it,
	// part after part in order; read it after stop.
	sum hash.Hash

	free     chan *spool
	hashing  chan pendingPart // to the hasher, in part order
	sending  chan pendingPart // from the hasher to the senders
	workers  sync.WaitGroup
	failed   chan struct{}
	failOnce sync.Once
	err      error // set once, before failed is closed
	mu       sync.Mutex
	parts    []minio.CompletePart
	closed   bool
}

type pendingPart struct {
	number   int
	buf      *spool
	checksum string // base64 partChecksum of the part's bytes
}

// startUpload opens a multipart upload of key and starts its hasher and
// senders.
func startUpload(ctx context.Context, logger hclog.Logger, core minio.Core, bucket, key string) (*uploader, error) {
	// Declaring the part checksum up front is what S3 asks of a multipart
	// upload whose parts carry one.
	id, err := core.NewMultipartUpload(ctx, bucket, key, minio.PutObjectOptions{
		ContentType:  "application/zstd",
		UserMetadata: map[string]string{"X-Amz-Checksum-Algorithm": partChecksum.String()},
	})
	if err != nil {
		return nil, s3Error(fmt.Errorf("start multipart upload: %w", err), CodeS3Access)
	}
	u := &uploader{
		ctx: ctx, core: core, logger: logger, bucket: bucket, key: key, uploadID: id,
		number:  1,
		cur:     newSpool(memPartBytes),
		sum:     sha256.New(),
		free:    make(chan *spool, partsInFlight),
		hashing: make(chan pendingPart),
		sending: make(chan pendingPart),
		failed:  make(chan struct{}),
	}
	u.workers.Add(1 + partsInFlight)
	go u.hash()
	for range partsInFlight {
		u.free <- newSpool(memPartBytes)
		go u.send()
	}
	return u, nil
}

func (u *uploader) fail(err error) {
	u.failOnce.Do(func() {
		u.err = err
		close(u.failed)
	})
}

// hash adds each part, in order, to the object's sha256, gives it its
// checksum and passes it on to the senders, off the compressing goroutine.
// After a failure it only passes buffers on, so they get recycled.
func (u *uploader) hash() {
	defer u.workers.Done()
	defer close(u.sending)
	crc := partChecksum.Hasher()
	both := io.MultiWriter(u.sum, crc)
	for p := range u.hashing {
		if u.failure() == nil {
			crc.Reset()
			if err := p.buf.writeTo(both, hashChunk); err != nil {
				u.fail(fmt.Errorf("hash part %d: %w", p.number, err))
			}
			p.checksum = base64.StdEncoding.EncodeToString(crc.Sum(nil))
		}
		u.sending <- p
	}
}

// send uploads parts until sending is closed; after a failure it only
// recycles buffers so the writer never blocks.
func (u *uploader) send() {
	defer u.workers.Done()
	for p := range u.sending {
		if u.failure() == nil {
			if err := u.sendPart(p); err != nil {
				u.fail(err)
			}
		}
		p.buf.reset()
		u.free <- p.buf
	}
}

func (u *uploader) sendPart(p pendingPart) error {
	start := time.Now()
	r := io.NewSectionReader(p.buf, 0, p.buf.size)
	opts := minio.PutObjectPartOptions{
		// The signed checksum header replaces the payload signature; see
		// partChecksum.
		DisableContentSha256: true,
		CustomHeader:         http.Header{},
	}
	opts.CustomHeader.Set(partChecksum.Key(), p.checksum)
	part, err := u.core.PutObjectPart(u.ctx, u.bucket, u.key, u.uploadID, p.number, r, p.buf.size, opts)
	if err != nil {
		return s3Error(fmt.Errorf("upload part %d: %w", p.number, err), CodeS3Access)
	}
	u.mu.Lock()
	u.parts = append(u.parts, minio.CompletePart{PartNumber: p.number, ETag: part.ETag, ChecksumCRC32C: p.checksum})
	u.mu.Unlock()
	u.logger.Debug("uploaded part", "part", p.number, "bytes", p.buf.size, "duration", time.Since(start))
	return nil
}

func (u *uploader) failure() error {
	select {
	case <-u.failed:
		return u.err
	default:
		return nil
	}
}

func (u *uploader) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if err := u.failure(); err != nil {
			return written, err
		}
		room := partSize(u.number) - u.cur.size
		chunk := p[:min(int64(len(p)), room)]
		if _, err := u.cur.Write(chunk); err != nil {
			return written, fmt.Errorf("buffer part %d: %w", u.number, err)
		}
		written += len(chunk)
		u.size += int64(len(chunk))
		p = p[len(chunk):]
		if u.cur.size == partSize(u.number) {
			if err := u.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush hands the current part to the hasher and takes a free buffer.
func (u *uploader) flush() error {
	if u.number > maxParts {
		return fmt.Errorf("archive exceeds %d parts", maxParts)
	}
	start := time.Now()
	u.hashing <- pendingPart{number: u.number, buf: u.cur}
	u.number++
	u.cur = <-u.free
	u.stalled += time.Since(start)
	return nil
}

// stop ends the hasher and the senders and waits for them.
func (u *uploader) stop() {
	if u.closed {
		return
	}
	u.closed = true
	close(u.hashing)
	u.workers.Wait()
}

// complete sends the last part and commits the object.
func (u *uploader) complete() error {
	var err error
	if u.cur.size > 0 || u.number == 1 {
		err = u.flush()
	}
	u.stop()
	if err != nil {
		return err
	}
	if err := u.failure(); err != nil {
		return err
	}
	slices.SortFunc(u.parts, func(a, b minio.CompletePart) int { return a.PartNumber - b.PartNumber })
	if _, err := u.core.CompleteMultipartUpload(u.ctx, u.bucket, u.key, u.uploadID, u.parts, minio.PutObjectOptions{}); err != nil {
		return s3Error(fmt.Errorf("complete multipart upload: %w", err), CodeS3Access)
	}
	// A long stall means S3, not compression, set the pace.
	u.logger.Info("multipart upload complete", "parts", len(u.parts), "bytes", u.size, "waited_for_s3", u.stalled.Round(time.Millisecond))
	return nil
}

// abort discards the upload's parts. It runs after a failure, when ctx may
// already be cancelled, so it uses a context of its own.
func (u *uploader) abort() {
	u.stop()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 30*time.Second)
	defer cancel()
	if err := u.core.AbortMultipartUpload(ctx, u.bucket, u.key, u.uploadID); err != nil {
		u.logger.Warn("abort multipart upload", "upload_id", u.uploadID, "error", err)
	}
}

// close releases the buffers' temporary files.
func (u *uploader) close() {
	u.cur.close()
	for {
		select {
		case s := <-u.free:
			s.close()
		default:
			return
		}
	}
}

// spool holds one part: the first bytes in memory, any excess in a
// temporary file. It is an io.ReaderAt so a failed part request can be
// retried from the start.
type spool struct {
	mem  []byte
	file *os.File
	size int64
}

func newSpool(memBytes int) *spool {
	return &spool{mem: make([]byte, 0, memBytes)}
}

func (s *spool) Write(p []byte) (int, error) {
	k := min(cap(s.mem)-len(s.mem), len(p))
	s.mem = append(s.mem, p[:k]...)
	s.size += int64(k)
	if k == len(p) {
		return k, nil
	}
	if s.file == nil {
		f, err := os.CreateTemp("", "codehub-part-*")
		if err != nil {
			return k, err
		}
		// Unlinked at once: the space is freed even if the process dies.
		if err := os.Remove(f.Name()); err != nil {
			f.Close()
			return k, err
		}
		s.file = f
	}
	n, err := s.file.WriteAt(p[k:], s.size-int64(len(s.mem)))
	s.size += int64(n)
	return k + n, err
}

func (s *spool) ReadAt(p []byte, off int64) (int, error) {
	if off >= s.size {
		return 0, io.EOF
	}
	n := 0
	if off < int64(len(s.mem)) {
		n = copy(p, s.mem[off:])
	}
	if n < len(p) && s.file != nil && off+int64(n) < s.size {
		fileOff := off + int64(n) - int64(len(s.mem))
		want := min(int64(len(p)-n), s.size-off-int64(n))
		k, err := s.file.ReadAt(p[n:n+int(want)], fileOff)
		n += k
		if err != nil && !errors.Is(err, io.EOF) {
			return n, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// writeTo writes the spool's contents to w, at most chunk bytes at a time.
func (s *spool) writeTo(w io.Writer, chunk int) error {
	for mem := s.mem; len(mem) > 0; {
		n := min(chunk, len(mem))
		if _, err := w.Write(mem[:n]); err != nil {
			return err
		}
		mem = mem[n:]
	}
	if s.file == nil {
		return nil
	}
	rest := io.NewSectionReader(s.file, 0, s.size-int64(len(s.mem)))
	_, err := io.CopyBuffer(w, rest, make([]byte, chunk))
	return err
}

func (s *spool) reset() {
	s.mem = s.mem[:0]
	s.size = 0
	if s.file != nil {
		// Give the disk space back between parts; a failure only delays that.
		_ = s.file.Truncate(0)
	}
}

func (s *spool) close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}
