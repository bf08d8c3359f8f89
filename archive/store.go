package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

// maxMetaBytes bounds how much of a meta object is read.
const maxMetaBytes = 64 << 10

// Store keeps home archives in one S3 bucket.
type Store struct {
	logger hclog.Logger
	client *minio.Client
	core   minio.Core
	bucket string
}

// NewStore returns a Store for bucket.
func NewStore(logger hclog.Logger, client *minio.Client, bucket string) *Store {
	return &Store{logger: logger, client: client, core: minio.Core{Client: client}, bucket: bucket}
}

// Stat reports the meta of the complete archive at key. A missing object is
// ErrArchiveNotFound, a missing or unreadable meta ErrMetaNotFound, and an
// object whose size disagrees with its meta ErrChecksumMismatch.
func (s *Store) Stat(ctx context.Context, key string) (Meta, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Meta{}, s.statError(ctx, key, err)
	}
	meta, err := s.readMeta(ctx, key)
	if err != nil {
		return Meta{}, err
	}
	if info.Size != meta.Size {
		return Meta{}, withCode(CodeChecksumMismatch, fmt.Errorf("%s has %d bytes, its meta says %d", key, info.Size, meta.Size))
	}
	return meta, nil
}

// statError classifies a failed HEAD of the object at key. An answer to a
// HEAD has no body, so minio-go reads any bare 404 as NoSuchKey, though a
// missing bucket answers so too, and some servers answer an unknown access
// key so. Only a GET's answer, which carries the error code, may declare the
// archive missing: that is what the controller writes off as lost data.
func (s *Store) statError(ctx context.Context, key string, headErr error) error {
	headErr = fmt.Errorf("stat %s: %w", key, headErr)
	if resp, ok := errors.AsType[minio.ErrorResponse](headErr); !ok || resp.Code != minio.NoSuchKey {
		return s3Error(headErr, CodeArchiveNotFound)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err == nil {
		// Stat would send another HEAD; a read sends the GET.
		_, err = obj.Read(make([]byte, 1))
		obj.Close()
	}
	if err == nil || errors.Is(err, io.EOF) {
		return withCode(CodeS3Access, fmt.Errorf("%w, yet a GET finds it", headErr))
	}
	return s3Error(fmt.Errorf("get %s: %w", key, err), CodeArchiveNotFound)
}

func (s *Store) readMeta(ctx context.Context, key string) (Meta, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, MetaKey(key), minio.GetObjectOptions{})
	if err != nil {
		return Meta{}, s3Error(fmt.Errorf("get meta of %s: %w", key, err), CodeMetaNotFound)
	}
	defer obj.Close()
	b, err := io.ReadAll(io.LimitReader(obj, maxMetaBytes))
	if err != nil {
		return Meta{}, s3Error(fmt.Errorf("read meta of %s: %w", key, err), CodeMetaNotFound)
	}
	meta, err := parseMeta(b)
	if err != nil {
		return Meta{}, withCode(CodeMetaNotFound, fmt.Errorf("meta of %s: %w", key, err))
	}
	return meta, nil
}

func (s *Store) putMeta(ctx context.Context, key string, meta Meta) error {
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, s.bucket, MetaKey(key), bytes.NewReader(b), int64(len(b)),
		minio.PutObjectOptions{ContentType: "application/json"})
	if err != nil {
		return s3Error(fmt.Errorf("put meta of %s: %w", key, err), CodeS3Access)
	}
	return nil
}

// needsUpload tells a complete archive (false) from one to (re)write; any
// other Stat failure is returned.
func needsUpload(err error) (bool, error) {
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, ErrArchiveNotFound), errors.Is(err, ErrMetaNotFound), errors.Is(err, ErrChecksumMismatch):
		return true, nil
	default:
		return false, err
	}
}

// Archive streams the contents of srcDir to key as one complete tar+zstd
// archive (ArchiveFrom without a parent).
func (s *Store) Archive(ctx context.Context, srcDir, key string, progress io.Writer) (Meta, error) {
	return s.ArchiveFrom(ctx, srcDir, key, "", progress)
}

// ArchiveFrom streams the contents of srcDir to key as tar+zstd, writes its
// manifest and then its meta. With a parent (the key of an earlier
// complete archive of the same home, "" for none), the object holds only
// the regular files that are new or changed since the parent, and the
// manifest names the archive of the chain that holds each other one; a
// parent that is missing, unreadable or made without a manifest, or a chain
// grown too long, gives a complete archive instead (never a failure). It
// is idempotent: an archive whose object and meta both exist is left alone;
// an object without meta is an unfinished attempt and is overwritten. Job
// log lines go to progress (nil for none).
func (s *Store) ArchiveFrom(ctx context.Context, srcDir, key, parent string, progress io.Writer) (Meta, error) {
	log := s.logger.With("key", key)
	out := &lineWriter{w: progress}
	existing, err := s.Stat(ctx, key)
	upload, err := needsUpload(err)
	if err != nil {
		return Meta{}, err
	}
	if !upload {
		log.Info("archive already complete, not uploading")
		out.fields("STEP", "check", "RESULT", "EXISTS")
		// The run that completed it may have been killed before clearing
		// the parts of earlier attempts.
		s.abortStaleUploads(ctx, log, key)
		return existing, nil
	}
	out.fields("STEP", "check", "RESULT", "OK")
	if fi, err := os.Stat(srcDir); err != nil {
		return Meta{}, withCode(CodeUnknown, fmt.Errorf("archive source: %w", err))
	} else if !fi.IsDir() {
		return Meta{}, withCode(CodeUnknown, fmt.Errorf("archive source %s is not a directory", srcDir))
	}
	// A stale meta must not vouch for the object about to be written.
	if err := s.client.RemoveObject(ctx, s.bucket, MetaKey(key), minio.RemoveObjectOptions{}); err != nil {
		return Meta{}, s3Error(fmt.Errorf("remove stale meta: %w", err), CodeS3Access)
	}
	root, m, err := scanTree(ctx, log, srcDir, false)
	if err != nil {
		return Meta{}, classifyLocal(err)
	}
	m.header.Archive = key
	base := s.loadParent(ctx, log, out, key, parent)
	p, err := planLayer(ctx, root, m, key, base, false)
	if err != nil {
		return Meta{}, classifyLocal(err)
	}
	p.report(out)
	meta, err := s.upload(ctx, log, out, root, m, key, p)
	if err != nil {
		return Meta{}, err
	}
	ref, err := s.putManifest(ctx, key, m)
	if err != nil {
		return Meta{}, err
	}
	meta.Manifest = &ref
	meta.ChainBytes = p.layerBytes
	if !p.full {
		meta.Parent = base.key
		meta.Chain = append([]string{base.key}, base.meta.Chain...)
		meta.ChainBytes += base.meta.ChainBytes
	}
	if err := s.putMeta(ctx, key, meta); err != nil {
		return Meta{}, err
	}
	out.fields("STEP", "meta", "RESULT", "OK", "SHA256", meta.SHA256, "SIZE", fmt.Sprint(meta.Size),
		"PARENT", meta.Parent, "DEPTH", fmt.Sprint(len(meta.Chain)))
	s.abortStaleUploads(ctx, log, key)
	log.Info("archive complete", "bytes", meta.Size, "sha256", meta.SHA256, "parent", meta.Parent, "depth", len(meta.Chain))
	return meta, nil
}

// upload runs tar of the layer -> zstd -> sha256 -> multipart upload and
// checks the stored object's size.
func (s *Store) upload(ctx context.Context, log hclog.Logger, out *lineWriter, root string, m *manifest, key string, p layerPlan) (Meta, error) {
	up, err := startUpload(ctx, log, s.core, s.bucket, key)
	if err != nil {
		return Meta{}, err
	}
	defer up.close()
	prog := startProgress(out, "upload")
	prog.total.Store(p.layerBytes)
	// One encoder goroutine: an asynchronous encoder spends about a fifth
	// more CPU for the same output, and the cores are better spent on
	// walking the tree, hashing and uploading alongside.
	enc, err := zstd.NewWriter(countingWriter{w: up, n: &prog.wrote},
		zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err == nil {
		err = compressStream(enc, func(w io.Writer) error {
			return writeLayer(ctx, root, m, key, p.full, false, w, &prog.in)
		})
		if closeErr := enc.Close(); err == nil {
			err = closeErr
		}
	}
	if err == nil {
		err = up.complete()
	}
	if err != nil {
		prog.stop("FAIL")
		up.abort()
		return Meta{}, classifyLocal(err)
	}
	prog.stop("OK")
	meta := newMeta(up.sum.Sum(nil), up.size, time.Now())
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Meta{}, s3Error(fmt.Errorf("stat uploaded %s: %w", key, err), CodeS3Access)
	}
	if info.Size != meta.Size {
		return Meta{}, withCode(CodeChecksumMismatch, fmt.Errorf("uploaded %d bytes but %s has %d", meta.Size, key, info.Size))
	}
	return meta, nil
}

// classifyLocal gives an uncoded error its class by type.
func classifyLocal(err error) error {
	if _, coded := errors.AsType[*Error](err); coded {
		return err
	}
	return withCode(CodeOf(err), err)
}

// abortStaleUploads discards parts left by killed attempts at key. It only
// frees space, so failures are logged, not returned.
func (s *Store) abortStaleUploads(ctx context.Context, log hclog.Logger, key string) {
	uploads, err := s.uploads(ctx, key)
	if err != nil {
		log.Warn("list unfinished uploads", "error", err)
		return
	}
	for _, u := range uploads {
		if u.Key != key {
			continue
		}
		if err := s.AbortUpload(ctx, u); err != nil {
			log.Warn("abort unfinished upload", "upload_id", u.ID, "error", err)
			continue
		}
		log.Info("aborted unfinished upload of an earlier attempt", "upload_id", u.ID)
	}
}

// Upload is a multipart upload that was neither completed nor aborted.
type Upload struct {
	Key       string
	ID        string
	Initiated time.Time
}

// Unfinished lists the unfinished multipart uploads under a workspace's
// archives: attempts killed before they completed or aborted their upload,
// whose parts S3 keeps (and bills) until someone aborts them.
func (s *Store) Unfinished(ctx context.Context, workspaceID string) ([]Upload, error) {
	return s.uploads(ctx, "archives/"+workspaceID+"/")
}

func (s *Store) uploads(ctx context.Context, prefix string) ([]Upload, error) {
	var out []Upload
	keyMarker, idMarker := "", ""
	for {
		res, err := s.core.ListMultipartUploads(ctx, s.bucket, prefix, keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, s3Error(fmt.Errorf("list unfinished uploads under %s: %w", prefix, err), CodeS3Access)
		}
		for _, u := range res.Uploads {
			out = append(out, Upload{Key: u.Key, ID: u.UploadID, Initiated: u.Initiated})
		}
		if !res.IsTruncated {
			return out, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// AbortUpload discards an unfinished upload and its parts.
func (s *Store) AbortUpload(ctx context.Context, u Upload) error {
	if err := s.core.AbortMultipartUpload(ctx, s.bucket, u.Key, u.ID); err != nil {
		return s3Error(fmt.Errorf("abort upload %s of %s: %w", u.ID, u.Key, err), CodeS3Access)
	}
	return nil
}

// CreateEmpty writes an archive of an empty home at key, in the same format
// as Archive. It is idempotent.
func (s *Store) CreateEmpty(ctx context.Context, key string) error {
	_, err := s.Stat(ctx, key)
	upload, err := needsUpload(err)
	if err != nil || !upload {
		return err
	}
	body, err := emptyArchive()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if err := s.client.RemoveObject(ctx, s.bucket, MetaKey(key), minio.RemoveObjectOptions{}); err != nil {
		return s3Error(fmt.Errorf("remove stale meta: %w", err), CodeS3Access)
	}
	_, err = s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{ContentType: "application/zstd"})
	if err != nil {
		return s3Error(fmt.Errorf("put empty archive %s: %w", key, err), CodeS3Access)
	}
	return s.putMeta(ctx, key, newMeta(sum[:], int64(len(body)), time.Now()))
}

func emptyArchive() ([]byte, error) {
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return nil, err
	}
	if err := tar.NewWriter(enc).Close(); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Listing is what a workspace's archive prefix holds.
type Listing struct {
	// Complete are the keys of archives with their meta, newest first.
	Complete []string
	// Incomplete are archives with one of their two objects missing: an
	// attempt that died between writing the archive and its meta, or a
	// deletion that died between removing them. Nothing reads them, and
	// Delete removes what is left.
	Incomplete []Object
}

// Object names an archive key and when its newest object was written.
type Object struct {
	Key      string
	Modified time.Time
}

// List returns the archives of a workspace, complete or not.
func (s *Store) List(ctx context.Context, workspaceID string) (Listing, error) {
	prefix := "archives/" + workspaceID + "/"
	var objects []Object
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return Listing{}, s3Error(fmt.Errorf("list %s: %w", prefix, obj.Err), CodeS3Access)
		}
		objects = append(objects, Object{Key: obj.Key, Modified: obj.LastModified})
	}
	return listing(objects), nil
}

// listing pairs archive objects with their metas. Complete keys come
// newest first (op ids are ULIDs, so by key, descending); objects that are
// neither an archive nor a meta are not CodeHub's and are left out.
func listing(objects []Object) Listing {
	halves := make(map[string][]time.Time, len(objects))
	for _, o := range objects {
		key := strings.TrimSuffix(o.Key, metaSuffix)
		if !strings.HasSuffix(key, "/"+homeObject) {
			continue
		}
		halves[key] = append(halves[key], o.Modified)
	}
	var l Listing
	for key, times := range halves {
		if len(times) == 2 {
			l.Complete = append(l.Complete, key)
			continue
		}
		l.Incomplete = append(l.Incomplete, Object{Key: key, Modified: times[0]})
	}
	slices.Sort(l.Complete)
	slices.Reverse(l.Complete)
	slices.SortFunc(l.Incomplete, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return l
}

// Delete removes the archive at key: meta first, so a crash in between
// leaves an unfinished archive, never a meta without its object; the object
// last, so that List still sees what is left. Its manifest and the parts of
// unfinished uploads go too.
func (s *Store) Delete(ctx context.Context, key string) error {
	for _, k := range []string{MetaKey(key), ManifestKey(key), key} {
		if err := s.client.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{}); err != nil {
			return s3Error(fmt.Errorf("remove %s: %w", k, err), CodeS3Access)
		}
	}
	s.abortStaleUploads(ctx, s.logger.With("key", key), key)
	return nil
}
