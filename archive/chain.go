package archive

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

// chain is an incremental archive ready to be read: its manifest and the
// archives holding its files, newest first, each with its meta.
type chain struct {
	key    string
	m      *manifest
	layers []layer
}

type layer struct {
	key  string
	meta Meta
}

// size is the bytes of every object a read of the chain downloads.
func (c *chain) size() int64 {
	var n int64
	for _, l := range c.layers {
		n += l.meta.Size
	}
	return n
}

// openChain reads the manifest of the incremental archive at key and
// checks that every archive it needs is complete, before anything is
// written anywhere. A chain that leaves the workspace is malformed; a
// missing archive of the chain is ARCHIVE_NOT_FOUND or META_NOT_FOUND, as
// for the archive itself.
func (s *Store) openChain(ctx context.Context, key string, meta Meta) (*chain, error) {
	keys := append([]string{key}, meta.Chain...)
	inChain := make(map[string]bool, len(keys))
	for _, k := range keys {
		if workspacePrefix(k) != workspacePrefix(key) {
			return nil, withCode(CodeTarExtractFailed, fmt.Errorf("archive %s builds on %s of another workspace", key, k))
		}
		inChain[k] = true
	}
	m, _, err := s.readManifest(ctx, key, meta, inChain)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, e := range m.entries {
		if e.Type == TypeFile {
			used[e.Layer] = true
		}
	}
	c := &chain{key: key, m: m}
	for _, k := range keys {
		if !used[k] {
			continue
		}
		lm := meta
		if k != key {
			if lm, err = s.Stat(ctx, k); err != nil {
				return nil, fmt.Errorf("archive %s of the chain of %s: %w", k, key, err)
			}
		}
		c.layers = append(c.layers, layer{key: k, meta: lm})
	}
	return c, nil
}

// sinkError marks a failure to pass the chain's stream on (the reader
// stopped), as opposed to one reading an archive of the chain.
type sinkError struct{ err error }

func (e sinkError) Error() string { return e.err.Error() }
func (e sinkError) Unwrap() error { return e.err }

// writeChain writes the home of the chain's manifest to w as one complete
// tar: directories, then each archive's files that the manifest assigns to
// it (streaming each archive once, newest first, and checking its sha256
// against its meta), then symlinks and hard links. Every file's bytes are
// checked against the manifest's hash. in counts the archive bytes read.
func (s *Store) writeChain(ctx context.Context, c *chain, w io.Writer, in *atomic.Int64) error {
	tw := tar.NewWriter(w)
	want := make(map[string]map[string]*Entry, len(c.layers))
	for _, l := range c.layers {
		want[l.key] = map[string]*Entry{}
	}
	for i := range c.m.entries {
		e := &c.m.entries[i]
		switch e.Type {
		case TypeDir:
			if err := tw.WriteHeader(entryHeader(e, tar.TypeDir)); err != nil {
				return sinkError{err}
			}
		case TypeFile:
			want[e.Layer][e.Path] = e
		}
	}
	buf := make([]byte, 1<<20)
	for _, l := range c.layers {
		if err := s.copyLayer(ctx, tw, l, want[l.key], in, buf); err != nil {
			return err
		}
	}
	for i := range c.m.entries {
		e := &c.m.entries[i]
		var err error
		switch e.Type {
		case TypeSymlink:
			err = tw.WriteHeader(entryHeader(e, tar.TypeSymlink))
		case TypeHardlink:
			err = tw.WriteHeader(entryHeader(e, tar.TypeLink))
		}
		if err != nil {
			return sinkError{err}
		}
	}
	if err := tw.Close(); err != nil {
		return sinkError{err}
	}
	return nil
}

func entryHeader(e *Entry, typ byte) *tar.Header {
	h := &tar.Header{Typeflag: typ, Name: e.Path, Mode: e.Mode, ModTime: e.modTime(), Format: tar.FormatPAX}
	switch typ {
	case tar.TypeDir:
		h.Name += "/"
	case tar.TypeReg:
		h.Size = e.Size
	case tar.TypeSymlink, tar.TypeLink:
		h.Linkname = e.Link
	}
	return h
}

// copyLayer streams the archive l and passes on the regular files of want
// (by path), each as the manifest describes it. A damaged archive usually
// breaks decompression before its end; the rest is still read and hashed,
// so that a checksum mismatch is reported as such.
func (s *Store) copyLayer(ctx context.Context, tw *tar.Writer, l layer, want map[string]*Entry, in *atomic.Int64, buf []byte) error {
	obj, err := s.client.GetObject(ctx, s.bucket, l.key, minio.GetObjectOptions{})
	if err != nil {
		return s3Error(fmt.Errorf("get %s: %w", l.key, err), CodeArchiveNotFound)
	}
	defer obj.Close()
	var n atomic.Int64
	sum := sha256.New()
	body := io.TeeReader(countingReader{r: countingReader{r: objectReader{obj}, n: &n}, n: in}, sum)
	zr, err := zstd.NewReader(body, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return withCode(CodeUnknown, err)
	}
	defer zr.Close()
	readErr := passFiles(ctx, tar.NewReader(zr), tw, want, buf)
	if _, ok := errors.AsType[sinkError](readErr); ok {
		return readErr
	}
	if errors.Is(readErr, context.Canceled) {
		return withCode(CodeUnknown, readErr)
	}
	if readErr == nil {
		// Reading to the end checks the zstd frame checksum past the tar
		// trailer.
		if _, err := io.Copy(io.Discard, zr); err != nil {
			readErr = fmt.Errorf("decompress: %w", err)
		}
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return s3Error(fmt.Errorf("read %s: %w", l.key, err), CodeS3Access)
	}
	if err := verify(sum, n.Load(), l.meta); err != nil {
		return fmt.Errorf("archive %s: %w", l.key, err)
	}
	if readErr != nil {
		return extractError(fmt.Errorf("archive %s: %w", l.key, readErr))
	}
	for name := range want {
		return withCode(CodeTarExtractFailed, fmt.Errorf("archive %s lacks %q, which the manifest of the chain assigns to it", l.key, name))
	}
	return nil
}

// passFiles copies the regular files of tr named in want to tw, removing
// each from want, and skips everything else.
func passFiles(ctx context.Context, tr *tar.Reader, tw *tar.Writer, want map[string]*Entry, buf []byte) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar header: %w", err)
		}
		e := want[h.Name]
		if h.Typeflag != tar.TypeReg || e == nil {
			continue
		}
		if h.Size != e.Size {
			return fmt.Errorf("entry %q has %d bytes, the manifest says %d", h.Name, h.Size, e.Size)
		}
		if err := tw.WriteHeader(entryHeader(e, tar.TypeReg)); err != nil {
			return sinkError{err}
		}
		sum := sha256.New()
		if _, err := io.CopyBuffer(io.MultiWriter(sinkWriter{tw}, sum), tr, buf); err != nil {
			return err
		}
		if got := hex.EncodeToString(sum.Sum(nil)); got != e.SHA256 {
			return fmt.Errorf("entry %q has sha256 %s, the manifest says %s", h.Name, got, e.SHA256)
		}
		delete(want, h.Name)
	}
}

// sinkWriter tags write failures as sinkError.
type sinkWriter struct{ w io.Writer }

func (s sinkWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		err = sinkError{err}
	}
	return n, err
}

// fetchChain extracts the home of an incremental archive into the staging
// directory: the chain's combined tar stream, made in a goroutine of its
// own, goes through the same checks and extractor as a complete archive.
func (s *Store) fetchChain(ctx context.Context, log hclog.Logger, out *lineWriter, c *chain, staging string) error {
	root, err := os.OpenRoot(staging)
	if err != nil {
		return classifyLocal(err)
	}
	defer root.Close()
	prog := startProgress(out, "download")
	prog.total.Store(c.size())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pipe := newChunkPipe()
	written := make(chan error, 1)
	go func() {
		err := s.writeChain(ctx, c, pipe, &prog.in)
		pipe.closeWrite(err)
		written <- err
	}()
	err = extractTar(ctx, log, pipe, root, &prog.wrote)
	if err == nil {
		if _, copyErr := io.Copy(io.Discard, pipe); copyErr != nil {
			err = copyErr
		}
	}
	pipe.closeRead(err)
	if err != nil {
		cancel()
	}
	chainErr := <-written
	_, sink := errors.AsType[sinkError](chainErr)
	if chainErr != nil && !sink && (err == nil || !errors.Is(chainErr, context.Canceled)) {
		// The archives' own failure (a checksum, a missing file) is the
		// truer diagnosis than the extractor's stream ending.
		err = chainErr
	}
	if err != nil {
		prog.stop("FAIL")
		return classifyLocal(err)
	}
	prog.stop("OK")
	return nil
}
