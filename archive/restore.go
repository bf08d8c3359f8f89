package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// maxWindow bounds the zstd window a restore accepts: what we write uses
// 8 MiB, so anything far larger is not ours and would only cost memory.
const maxWindow = 32 << 20

// Restore replaces the contents of dstDir with the archive at key; for an
// incremental archive, with the tree its manifest describes, read from the
// archives of its chain (every one checked to be complete first). It is
// crash-only: the archive is extracted into a staging directory inside
// dstDir, verified against the meta's sha256, and only then swapped in; a
// rerun after a crash at any point discards the staging directory and ends
// with the same tree. On any failure dstDir keeps its previous contents.
// Job log lines go to progress (nil for none).
func (s *Store) Restore(ctx context.Context, key, dstDir string, progress io.Writer) (Meta, error) {
	log := s.logger.With("key", key)
	out := &lineWriter{w: progress}
	meta, err := s.Stat(ctx, key)
	if err != nil {
		return Meta{}, err
	}
	var c *chain
	if meta.Incremental() {
		if c, err = s.openChain(ctx, key, meta); err != nil {
			return Meta{}, err
		}
		out.fields("STEP", "check", "RESULT", "OK", "SIZE", fmt.Sprint(c.size()), "ARCHIVES", fmt.Sprint(len(c.layers)))
	} else {
		out.fields("STEP", "check", "RESULT", "OK", "SIZE", fmt.Sprint(meta.Size))
	}
	staging := filepath.Join(dstDir, stagingName)
	if err := prepareStaging(dstDir, staging); err != nil {
		return Meta{}, classifyLocal(err)
	}
	if c != nil {
		err = s.fetchChain(ctx, log, out, c, staging)
	} else {
		err = s.fetch(ctx, log, out, key, meta, staging)
	}
	if err != nil {
		if rmErr := removeTree(staging); rmErr != nil {
			log.Warn("remove staging directory", "path", staging, "error", rmErr)
		}
		return Meta{}, err
	}
	if err := swapIn(dstDir, staging); err != nil {
		return Meta{}, classifyLocal(fmt.Errorf("swap restored tree into %s: %w", dstDir, err))
	}
	if err := syncFS(dstDir); err != nil {
		return Meta{}, classifyLocal(fmt.Errorf("flush restored tree in %s: %w", dstDir, err))
	}
	out.fields("STEP", "swap", "RESULT", "OK")
	log.Info("restore complete", "bytes", meta.Size)
	return meta, nil
}

func prepareStaging(dstDir, staging string) error {
	fi, err := os.Stat(dstDir)
	if err != nil {
		return fmt.Errorf("restore target: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("restore target %s is not a directory", dstDir)
	}
	if err := removeTree(staging); err != nil {
		return fmt.Errorf("remove leftover staging directory: %w", err)
	}
	return os.Mkdir(staging, 0o700)
}

// fetch streams the object through sha256 and zstd into the staging
// directory and verifies it. A damaged archive usually breaks decompression
// before its end, so on a format error the rest is still read and hashed:
// a checksum mismatch is the truer diagnosis.
func (s *Store) fetch(ctx context.Context, log hclog.Logger, out *lineWriter, key string, meta Meta, staging string) error {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return s3Error(fmt.Errorf("get %s: %w", key, err), CodeArchiveNotFound)
	}
	defer obj.Close()
	root, err := os.OpenRoot(staging)
	if err != nil {
		return classifyLocal(err)
	}
	defer root.Close()

	prog := startProgress(out, "download")
	prog.total.Store(meta.Size)
	sum := sha256.New()
	body := io.TeeReader(countingReader{r: objectReader{obj}, n: &prog.in}, sum)
	extractErr := unpack(ctx, log, body, root, prog)
	if extractErr != nil && CodeOf(extractErr) != CodeTarExtractFailed {
		prog.stop("FAIL")
		return extractErr
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		prog.stop("FAIL")
		return s3Error(fmt.Errorf("read %s: %w", key, err), CodeS3Access)
	}
	if err := verify(sum, prog.in.Load(), meta); err != nil {
		prog.stop("FAIL")
		return err
	}
	if extractErr != nil {
		prog.stop("FAIL")
		return extractErr
	}
	prog.stop("OK")
	return nil
}

// unpack decompresses in a goroutine of its own and extracts in this one,
// so that the file system calls of extraction overlap with decompression
// and hashing.
func unpack(ctx context.Context, log hclog.Logger, body io.Reader, root *os.Root, prog *progress) error {
	zr, err := zstd.NewReader(body, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return withCode(CodeUnknown, err)
	}
	defer zr.Close()
	pipe := newChunkPipe()
	decoded := make(chan struct{})
	go func() {
		defer close(decoded)
		_, err := zr.WriteTo(pipe)
		pipe.closeWrite(err)
	}()
	err = extractTar(ctx, log, pipe, root, &prog.wrote)
	if err == nil {
		// Reading to the end checks the zstd frame checksum past the tar
		// trailer.
		if _, copyErr := io.Copy(io.Discard, pipe); copyErr != nil {
			err = extractError(fmt.Errorf("decompress: %w", copyErr))
		}
	}
	pipe.closeRead(err)
	// The caller reads the rest of body once the decoder is done with it.
	<-decoded
	return err
}

func verify(sum hash.Hash, size int64, meta Meta) error {
	got := hex.EncodeToString(sum.Sum(nil))
	if got != meta.SHA256 || size != meta.Size {
		return withCode(CodeChecksumMismatch,
			fmt.Errorf("downloaded %d bytes with sha256 %s, meta says %d bytes with %s", size, got, meta.Size, meta.SHA256))
	}
	return nil
}

// objectReader tags read failures of the S3 object as S3 errors, so they
// keep their class when they surface through zstd and tar.
type objectReader struct{ r io.Reader }

func (o objectReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = s3Error(err, CodeArchiveNotFound)
	}
	return n, err
}

// swapIn replaces everything in dstDir but the staging directory with the
// staged tree. Renames stay on one file system, so each is atomic; a crash
// between them leaves a mixed tree that the next run replaces wholesale.
func swapIn(dstDir, staging string) error {
	old, err := os.ReadDir(dstDir)
	if err != nil {
		return err
	}
	for _, e := range old {
		if e.Name() == stagingName {
			continue
		}
		if err := removeTree(filepath.Join(dstDir, e.Name())); err != nil {
			return err
		}
	}
	staged, err := os.ReadDir(staging)
	if err != nil {
		return err
	}
	for _, e := range staged {
		if err := moveIn(filepath.Join(staging, e.Name()), filepath.Join(dstDir, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(staging)
}

// syncFS flushes the file system holding dir. The controller records the
// home as restored once the job reports success, so by then a crash of the
// node must not be able to leave files cut short or renames undone; before
// it, a rerun replaces the whole tree anyway. One syncfs covers every
// file's contents and the swap's renames, where an fsync per file would
// cost a disk flush each.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return &fs.PathError{Op: "syncfs", Path: dir, Err: err}
	}
	return nil
}

// moveIn renames a staged entry into place. Moving a directory to another
// parent rewrites its ".." entry, which takes write permission on the
// directory itself: a read-only one is made writable for the rename.
func moveIn(from, to string) error {
	fi, err := os.Lstat(from)
	if err != nil {
		return err
	}
	mode := fi.Mode()
	if !mode.IsDir() || mode&0o200 != 0 {
		return os.Rename(from, to)
	}
	if err := os.Chmod(from, mode|0o200); err != nil {
		return err
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return os.Chmod(to, mode)
}

// removeTree removes path and everything below it, first making
// directories writable: restored homes hold read-only directories (Go's
// module cache, for one) that would otherwise stop a non-root restore.
func removeTree(path string) error {
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return os.Chmod(p, 0o700)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(path)
}
