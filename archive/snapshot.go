package archive

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

// Snapshots are incremental archives of a running home. The workspace
// agent reads the home where it runs (WriteSnapshot) and streams the layer
// and the manifest to the server, which writes them to S3 (StoreSnapshot):
// no S3 credential ever enters a workspace, and the server checks the
// manifest it is handed as strictly as one it reads back from S3.

// SnapshotRequest is what the agent needs to snapshot its home: the key
// to write and the archive to build on.
type SnapshotRequest struct {
	Key string `json:"key"`
	// Parent is the archive the snapshot builds on; "" for a complete one.
	Parent     string `json:"parent,omitempty"`
	ParentMeta *Meta  `json:"parent_meta,omitempty"`
	// ParentManifest is the parent's manifest object as stored.
	ParentManifest []byte `json:"parent_manifest,omitempty"`
}

// SnapshotPlan is what the agent found, sent before the layer.
type SnapshotPlan struct {
	// Unchanged: the home is what the parent holds; nothing follows.
	Unchanged bool  `json:"unchanged"`
	Full      bool  `json:"full"`
	Files     int   `json:"files"`
	Stored    int   `json:"stored"`
	Bytes     int64 `json:"bytes"`
}

// SnapshotResult is a stored snapshot: its meta, or Unchanged.
type SnapshotResult struct {
	SnapshotPlan
	Meta Meta
}

// The stream from the agent is a sequence of frames: a kind byte, a
// big-endian uint32 length, the payload. The plan comes first, then the
// layer (tar+zstd) and the manifest (as stored), then the end; an error
// frame ends it at any point.
const (
	framePlan     = 'P'
	frameLayer    = 'L'
	frameManifest = 'M'
	frameError    = 'E'
	frameEnd      = 'Z'

	maxFrame = 1 << 20
	// maxSnapshotManifest bounds the manifest a server accepts from an
	// agent, as stored (compressed).
	maxSnapshotManifest = 512 << 20
)

// ErrSnapshot marks a snapshot the agent could not make or sent malformed.
var ErrSnapshot = errors.New("snapshot failed")

type frameWriter struct {
	w    io.Writer
	kind byte
}

func (f frameWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), maxFrame)
		if err := writeFrame(f.w, f.kind, p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

func writeFrame(w io.Writer, kind byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func readFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("%w: read frame: %w", ErrSnapshot, err)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes", ErrSnapshot, n)
	}
	p := buf[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, fmt.Errorf("%w: read frame: %w", ErrSnapshot, err)
	}
	return hdr[0], p, nil
}

// SnapshotRequestFor prepares the snapshot at key of a home whose current
// archive is parent ("" for none). A parent that cannot serve (missing,
// made without a manifest, of another workspace) gives a complete
// snapshot, as for any archive.
func (s *Store) SnapshotRequestFor(ctx context.Context, key, parent string) SnapshotRequest {
	req := SnapshotRequest{Key: key}
	if parent == "" {
		return req
	}
	b, data, err := s.readParentData(ctx, key, parent)
	if err != nil {
		s.logger.Warn("parent archive unusable, the snapshot stores the whole home", "key", key, "parent", parent, "error", err)
		return req
	}
	req.Parent, req.ParentMeta, req.ParentManifest = parent, &b.meta, data
	return req
}

// WriteSnapshot snapshots the home at root as req asks and writes the
// frames to w. It runs in the workspace, as its user, while the home is in
// use: see the live mode of writeLayer. A failure is sent as an error
// frame as well as returned.
func WriteSnapshot(ctx context.Context, logger hclog.Logger, root string, req SnapshotRequest, w io.Writer) error {
	bw := bufio.NewWriterSize(w, maxFrame+5)
	err := writeSnapshot(ctx, logger, root, req, bw)
	if err != nil {
		_ = writeFrame(bw, frameError, []byte(err.Error()))
	} else {
		err = writeFrame(bw, frameEnd, nil)
	}
	if flushErr := bw.Flush(); err == nil {
		err = flushErr
	}
	return err
}

func writeSnapshot(ctx context.Context, logger hclog.Logger, root string, req SnapshotRequest, w io.Writer) error {
	if OpID(req.Key) == "" {
		return fmt.Errorf("%q is not an archive key", req.Key)
	}
	var b *base
	if req.Parent != "" {
		if req.ParentMeta == nil {
			return fmt.Errorf("parent %s without its meta", req.Parent)
		}
		chain := map[string]bool{req.Parent: true}
		for _, k := range req.ParentMeta.Chain {
			chain[k] = true
		}
		pm, err := decodeManifest(req.ParentManifest, req.Parent, chain)
		if err != nil {
			return fmt.Errorf("manifest of %s: %w", req.Parent, err)
		}
		b = &base{key: req.Parent, meta: *req.ParentMeta, m: pm}
	}
	root, m, err := scanTree(ctx, logger, root, true)
	if err != nil {
		return err
	}
	m.header.Archive = req.Key
	p, err := planLayer(ctx, root, m, req.Key, b, true)
	if err != nil {
		return err
	}
	plan := SnapshotPlan{Full: p.full, Files: p.files, Stored: p.stored, Bytes: p.layerBytes}
	plan.Unchanged = b != nil && !p.full && p.stored == 0 && sameTree(b.m, m)
	data, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	if err := writeFrame(w, framePlan, data); err != nil {
		return err
	}
	if plan.Unchanged {
		return nil
	}
	enc, err := zstd.NewWriter(frameWriter{w: w, kind: frameLayer},
		zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	var read atomic.Int64
	err = writeLayer(ctx, root, m, req.Key, p.full, true, enc, &read)
	if closeErr := enc.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	man, err := encodeManifest(m)
	if err != nil {
		return err
	}
	_, err = frameWriter{w: w, kind: frameManifest}.Write(man)
	return err
}

// sameTree reports whether two manifests describe the same tree with the
// same bytes.
func sameTree(a, b *manifest) bool {
	return slices.EqualFunc(a.entries, b.entries, func(x, y Entry) bool {
		return x.Path == y.Path && x.Type == y.Type && x.Mode == y.Mode && x.UID == y.UID && x.GID == y.GID &&
			x.Link == y.Link && x.MTime == y.MTime && x.MTimeNS == y.MTimeNS && x.Size == y.Size &&
			x.SHA256 == y.SHA256 && x.Layer == y.Layer
	})
}

// StoreSnapshot writes the snapshot the agent streams in r (answering req)
// to S3 as the archive at req.Key: the layer, then the manifest once it is
// checked to describe a home held by the snapshot's chain, then the meta
// that makes it complete. An unchanged home writes nothing.
func (s *Store) StoreSnapshot(ctx context.Context, req SnapshotRequest, r io.Reader) (SnapshotResult, error) {
	log := s.logger.With("key", req.Key)
	buf := make([]byte, maxFrame)
	kind, payload, err := readFrame(r, buf)
	if err != nil {
		return SnapshotResult{}, err
	}
	if kind == frameError {
		return SnapshotResult{}, fmt.Errorf("%w: %s", ErrSnapshot, payload)
	}
	var res SnapshotResult
	if kind != framePlan || strictDecode(payload, &res.SnapshotPlan) != nil {
		return SnapshotResult{}, fmt.Errorf("%w: the stream does not begin with a plan", ErrSnapshot)
	}
	if res.Unchanged {
		if kind, _, err := readFrame(r, buf); err != nil || kind != frameEnd {
			return SnapshotResult{}, fmt.Errorf("%w: an unchanged home's stream does not end", ErrSnapshot)
		}
		return res, nil
	}
	if !res.Full && req.Parent == "" {
		return SnapshotResult{}, fmt.Errorf("%w: an incremental snapshot without a parent", ErrSnapshot)
	}
	up, err := startUpload(ctx, log, s.core, s.bucket, req.Key)
	if err != nil {
		return SnapshotResult{}, err
	}
	defer up.close()
	manifest, err := s.receiveSnapshot(r, buf, up)
	if err == nil {
		err = up.complete()
	}
	if err != nil {
		up.abort()
		return SnapshotResult{}, err
	}
	meta := newMeta(up.sum.Sum(nil), up.size, time.Now())
	info, err := s.client.StatObject(ctx, s.bucket, req.Key, minio.StatObjectOptions{})
	if err != nil {
		return SnapshotResult{}, s3Error(fmt.Errorf("stat uploaded %s: %w", req.Key, err), CodeS3Access)
	}
	if info.Size != meta.Size {
		return SnapshotResult{}, withCode(CodeChecksumMismatch, fmt.Errorf("uploaded %d bytes but %s has %d", meta.Size, req.Key, info.Size))
	}
	chain := map[string]bool{req.Key: true}
	if !res.Full {
		meta.Parent = req.Parent
		meta.Chain = append([]string{req.Parent}, req.ParentMeta.Chain...)
		meta.ChainBytes = req.ParentMeta.ChainBytes
		for _, k := range meta.Chain {
			chain[k] = true
		}
	}
	m, err := decodeManifest(manifest, req.Key, chain)
	if err != nil {
		// Without its meta the object is no archive; it goes now rather
		// than when the GC finds it abandoned.
		if rmErr := s.client.RemoveObject(ctx, s.bucket, req.Key, minio.RemoveObjectOptions{}); rmErr != nil {
			log.Warn("remove refused snapshot", "error", rmErr)
		}
		return SnapshotResult{}, fmt.Errorf("%w: manifest: %w", ErrSnapshot, err)
	}
	for _, e := range m.entries {
		if e.Type == TypeFile && e.Layer == req.Key {
			meta.ChainBytes += e.Size
		}
	}
	ref, err := s.putManifestData(ctx, req.Key, manifest)
	if err != nil {
		return SnapshotResult{}, err
	}
	meta.Manifest = &ref
	if err := s.putMeta(ctx, req.Key, meta); err != nil {
		return SnapshotResult{}, err
	}
	s.abortStaleUploads(ctx, log, req.Key)
	log.Info("snapshot stored", "bytes", meta.Size, "files", res.Files, "stored", res.Stored, "parent", meta.Parent, "depth", len(meta.Chain))
	res.Meta = meta
	return res, nil
}

// receiveSnapshot copies the layer frames of r to layer and returns the
// manifest that follows them.
func (s *Store) receiveSnapshot(r io.Reader, buf []byte, layer io.Writer) ([]byte, error) {
	var manifest bytes.Buffer
	for {
		kind, payload, err := readFrame(r, buf)
		if err != nil {
			return nil, err
		}
		switch {
		case kind == frameLayer && manifest.Len() == 0:
			if _, err := layer.Write(payload); err != nil {
				return nil, err
			}
		case kind == frameManifest:
			if manifest.Len()+len(payload) > maxSnapshotManifest {
				return nil, fmt.Errorf("%w: manifest over %d bytes", ErrSnapshot, maxSnapshotManifest)
			}
			manifest.Write(payload)
		case kind == frameEnd && manifest.Len() > 0:
			return manifest.Bytes(), nil
		case kind == frameError:
			return nil, fmt.Errorf("%w: %s", ErrSnapshot, payload)
		default:
			return nil, fmt.Errorf("%w: frame %q out of order", ErrSnapshot, kind)
		}
	}
}
