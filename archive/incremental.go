package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"
)

// base is the parent an incremental archive builds on.
type base struct {
	key  string
	meta Meta
	m    *manifest
}

// loadParent reads the parent archive at parent for the archive at key. Any
// reason it cannot serve (none named, another workspace's, missing,
// damaged, made without a manifest) is logged and reported, and the
// archive is made complete instead: nil.
func (s *Store) loadParent(ctx context.Context, log hclog.Logger, out *lineWriter, key, parent string) *base {
	if parent == "" {
		return nil
	}
	b, err := s.readParent(ctx, key, parent)
	if err != nil {
		log.Warn("parent archive unusable, archiving the whole home", "parent", parent, "error", err)
		out.fields("STEP", "parent", "PARENT", parent, "RESULT", "FULL", "DETAIL", err.Error())
		return nil
	}
	out.fields("STEP", "parent", "PARENT", parent, "RESULT", "OK", "DEPTH", fmt.Sprint(len(b.meta.Chain)+1))
	return b
}

func (s *Store) readParent(ctx context.Context, key, parent string) (*base, error) {
	b, _, err := s.readParentData(ctx, key, parent)
	return b, err
}

// readParentData is readParent, with the parent's manifest as stored.
func (s *Store) readParentData(ctx context.Context, key, parent string) (*base, []byte, error) {
	if parent == key || OpID(parent) == "" || workspacePrefix(parent) != workspacePrefix(key) {
		return nil, nil, fmt.Errorf("%q is not another archive of the same workspace", parent)
	}
	meta, err := s.Stat(ctx, parent)
	if err != nil {
		return nil, nil, err
	}
	if meta.Manifest == nil {
		return nil, nil, fmt.Errorf("%s has no manifest (made before incremental archives)", parent)
	}
	chain := map[string]bool{parent: true}
	for _, k := range meta.Chain {
		chain[k] = true
	}
	m, data, err := s.readManifest(ctx, parent, meta, chain)
	if err != nil {
		return nil, nil, err
	}
	return &base{key: parent, meta: meta, m: m}, data, nil
}

// workspacePrefix is "archives/{workspace}/" of an archive key.
func workspacePrefix(key string) string {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) < 3 {
		return ""
	}
	return parts[0] + "/" + parts[1] + "/"
}

// readManifest reads the manifest of the archive at key and checks it
// against the archive's meta and chain. A missing manifest is
// META_NOT_FOUND, one whose bytes differ from the meta's record
// CHECKSUM_MISMATCH, one intact but malformed TAR_EXTRACT_FAILED.
func (s *Store) readManifest(ctx context.Context, key string, meta Meta, chain map[string]bool) (*manifest, []byte, error) {
	ref := meta.Manifest
	obj, err := s.client.GetObject(ctx, s.bucket, ManifestKey(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, nil, s3Error(fmt.Errorf("get manifest of %s: %w", key, err), CodeMetaNotFound)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, ref.Size+1))
	if err != nil {
		return nil, nil, s3Error(fmt.Errorf("read manifest of %s: %w", key, err), CodeMetaNotFound)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != ref.SHA256 || int64(len(data)) != ref.Size {
		return nil, nil, withCode(CodeChecksumMismatch, fmt.Errorf("manifest of %s: %d bytes with sha256 %s, meta says %d bytes with %s",
			key, len(data), got, ref.Size, ref.SHA256))
	}
	m, err := decodeManifest(data, key, chain)
	if err != nil {
		return nil, nil, withCode(CodeTarExtractFailed, fmt.Errorf("manifest of %s: %w", key, err))
	}
	return m, data, nil
}

// putManifest stores m beside the archive at key.
func (s *Store) putManifest(ctx context.Context, key string, m *manifest) (ManifestRef, error) {
	data, err := encodeManifest(m)
	if err != nil {
		return ManifestRef{}, withCode(CodeUnknown, fmt.Errorf("encode manifest: %w", err))
	}
	return s.putManifestData(ctx, key, data)
}

// putManifestData stores an encoded manifest beside the archive at key.
func (s *Store) putManifestData(ctx context.Context, key string, data []byte) (ManifestRef, error) {
	_, err := s.client.PutObject(ctx, s.bucket, ManifestKey(key), bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/zstd"})
	if err != nil {
		return ManifestRef{}, s3Error(fmt.Errorf("put manifest of %s: %w", key, err), CodeS3Access)
	}
	sum := sha256.Sum256(data)
	return ManifestRef{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}, nil
}

// layerPlan is what an archive stores in its own object.
type layerPlan struct {
	full       bool
	files      int   // regular files in the home
	liveBytes  int64 // their bytes, each multiply linked file once
	stored     int   // files in this archive's object
	layerBytes int64 // their bytes
	hashed     int64 // bytes read to decide
	reason     string
}

func (p layerPlan) report(out *lineWriter) {
	kind := "INCREMENTAL"
	if p.full {
		kind = "FULL"
	}
	out.fields("STEP", "plan", "RESULT", kind, "FILES", fmt.Sprint(p.files), "CHANGED", fmt.Sprint(p.stored),
		"BYTES", fmt.Sprint(p.layerBytes), "HASHED", fmt.Sprint(p.hashed), "DETAIL", p.reason)
}

// planLayer assigns every regular file of m to the archive holding its
// bytes: the parent's layer for those unchanged since (by stat or by
// hash, see decide), this archive (key) for the rest. Without a parent, or
// when the chain would grow past its limits, every file goes to key.
//
// In a live plan (a snapshot of a home in use) a file that cannot be hashed
// (written, replaced or removed meanwhile) goes to key: the layer reads it
// again, or leaves it out.
func planLayer(ctx context.Context, root string, m *manifest, key string, b *base, live bool) (layerPlan, error) {
	var p layerPlan
	var prev map[string]*Entry
	sameVolume := false
	if b != nil {
		prev = make(map[string]*Entry, len(b.m.entries))
		for i := range b.m.entries {
			prev[b.m.entries[i].Path] = &b.m.entries[i]
		}
		sameVolume = b.m.header.Volume == m.header.Volume
	}
	buf := make([]byte, 1<<20)
	var hashed atomic.Int64
	for i := range m.entries {
		e := &m.entries[i]
		if e.Type != TypeFile {
			continue
		}
		if err := ctx.Err(); err != nil {
			return layerPlan{}, err
		}
		p.files++
		p.liveBytes += e.Size
		old := prev[e.Path]
		switch decide(old, *e, sameVolume) {
		case actionKeep:
			e.SHA256, e.Layer = old.SHA256, old.Layer
		case actionHash:
			sum, err := hashFile(root, e, buf, &hashed)
			switch {
			case err != nil && live:
				e.SHA256, e.Layer = "", key
			case err != nil:
				return layerPlan{}, err
			default:
				e.SHA256, e.Layer = sum, key
				if sameContent(old, e.Size, sum) {
					e.Layer = old.Layer
				}
			}
		default:
			e.Layer = key
		}
		if e.Layer == key {
			p.stored++
			p.layerBytes += e.Size
		}
	}
	p.hashed = hashed.Load()
	switch {
	case b == nil:
		p.full, p.reason = true, "no parent"
	case chainTooLong(len(b.meta.Chain), b.meta.ChainBytes, p.layerBytes, p.liveBytes):
		p.full = true
		p.reason = fmt.Sprintf("chain of %d archives holding %d file bytes for a home of %d", len(b.meta.Chain)+1, b.meta.ChainBytes+p.layerBytes, p.liveBytes)
	default:
		p.reason = "parent " + b.key
	}
	if p.full {
		p.stored, p.layerBytes = p.files, p.liveBytes
		for i := range m.entries {
			if m.entries[i].Type == TypeFile {
				m.entries[i].Layer = key
			}
		}
	}
	return p, nil
}
