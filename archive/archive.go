// Package archive moves a workspace home between a directory and S3 as one
// tar+zstd object plus a JSON meta object carrying its sha256. It owns the
// archive format, the streaming multipart upload and the safe, crash-only
// restore. It must never know about the database, Nomad or workspace phases:
// callers hand it an object key and a directory, and get a typed error back.
package archive

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Format is the only archive format this package writes and reads.
const Format = "tar+zstd"

// metaSuffix names the meta object beside an archive object.
const metaSuffix = ".meta"

// Key returns the object key of the home archive made by operation opID of
// workspace workspaceID. Op ids are ULIDs, so keys of one workspace sort by
// time.
func Key(workspaceID, opID string) string {
	return "archives/" + workspaceID + "/" + opID + "/" + homeObject
}

// PrebuildPrefix is where operation opID of builder workspaceID writes
// its prebuilt home of template at version. The archive's key,
// PrebuildKey, also names the repository's commit, which only the job that
// cloned it knows: the job completes the key.
func PrebuildPrefix(workspaceID, opID, template, version string) string {
	return "archives/" + workspaceID + "/" + opID + "/" + template + "/" + version
}

// PrebuildKey is the key of a prebuilt home of commit under prefix
// (PrebuildPrefix): archives/{builder}/{op}/{template}/{version}/{commit}/home.tar.zst.
func PrebuildKey(prefix, commit string) string {
	return prefix + "/" + commit + "/" + homeObject
}

// PrebuildCommit is the commit a prebuilt home's key names; ok is false
// for any other key.
func PrebuildCommit(key string) (commit string, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 7 || parts[0] != "archives" || parts[6] != homeObject || !ValidCommit(parts[5]) {
		return "", false
	}
	return parts[5], true
}

// PrebuiltUnder reports whether key is a prebuilt home's key under prefix
// (PrebuildPrefix): the prefix completed with a commit.
func PrebuiltUnder(key, prefix string) bool {
	_, ok := PrebuildCommit(key)
	return ok && strings.HasPrefix(key, prefix+"/")
}

// ValidCommit accepts a git object name: 40 (SHA-1) or 64 (SHA-256)
// lower-case hex digits.
func ValidCommit(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// homeObject ends every archive's key.
const homeObject = "home.tar.zst"

// OpID is the op id inside an archive key (archives/{workspace}/{op}/home.tar.zst,
// or a PrebuildKey): the operation that made it. Any other key has none ("").
func OpID(key string) string {
	parts := strings.Split(key, "/")
	if parts[0] != "archives" || parts[len(parts)-1] != homeObject {
		return ""
	}
	if len(parts) == 4 {
		return parts[2]
	}
	if _, ok := PrebuildCommit(key); ok {
		return parts[2]
	}
	return ""
}

// OwnedBy reports whether key is an archive workspaceID made (one under
// its own prefix), not one it was given, such as a prebuilt home's.
func OwnedBy(key, workspaceID string) bool {
	return workspaceID != "" && strings.HasPrefix(key, "archives/"+workspaceID+"/")
}

// MetaKey returns the key of the meta object of the archive at key.
func MetaKey(key string) string {
	return key + metaSuffix
}

// Meta is the JSON document stored at MetaKey(key). It is written only after
// the archive object (and its manifest) is complete, so its presence marks a
// finished archive.
type Meta struct {
	SHA256    string    `json:"sha256"`
	Size      int64     `json:"size"`
	Format    string    `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	// Manifest describes the manifest object (ManifestKey), nil for an
	// archive made without one (before incremental archives, or empty).
	Manifest *ManifestRef `json:"manifest,omitempty"`
	// Parent is the archive an incremental archive builds on: its object
	// holds only the files that changed since, and its manifest names the
	// archive of the chain holding each other file. Empty for an archive
	// complete on its own.
	Parent string `json:"parent,omitempty"`
	// Chain lists every archive an incremental archive needs besides
	// itself, Parent first, then Parent's parent, and so on.
	Chain []string `json:"chain,omitempty"`
	// ChainBytes is the file bytes the objects of the chain hold together,
	// this one included (before compression).
	ChainBytes int64 `json:"chain_bytes,omitempty"`
}

// ManifestRef is the sha256 and size of a manifest object as stored.
type ManifestRef struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Incremental reports whether the archive needs others (Chain) to restore.
func (m Meta) Incremental() bool { return m.Parent != "" }

func newMeta(sum []byte, size int64, now time.Time) Meta {
	return Meta{
		SHA256:    hex.EncodeToString(sum),
		Size:      size,
		Format:    Format,
		CreatedAt: now.UTC().Truncate(time.Second),
	}
}

// parseMeta decodes and checks a meta document; a meta that cannot vouch for
// an archive is as good as none.
func parseMeta(b []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("decode meta: %w", err)
	}
	if m.Format != Format {
		return Meta{}, fmt.Errorf("meta format %q, want %q", m.Format, Format)
	}
	if sum, err := hex.DecodeString(m.SHA256); err != nil || len(sum) != 32 {
		return Meta{}, fmt.Errorf("meta sha256 %q is not 64 hex digits", m.SHA256)
	}
	if m.Size < 0 {
		return Meta{}, fmt.Errorf("meta size %d is negative", m.Size)
	}
	if m.Manifest != nil {
		if sum, err := hex.DecodeString(m.Manifest.SHA256); err != nil || len(sum) != 32 || m.Manifest.Size < 0 {
			return Meta{}, fmt.Errorf("meta manifest %+v is not a sha256 and a size", *m.Manifest)
		}
	}
	if err := checkChain(m); err != nil {
		return Meta{}, fmt.Errorf("meta chain: %w", err)
	}
	return m, nil
}

// checkChain accepts a chain only with a manifest to read it by, its parent
// first, no archive twice, and no longer than any archive writes.
func checkChain(m Meta) error {
	if m.Parent == "" {
		if len(m.Chain) != 0 {
			return errors.New("a chain without a parent")
		}
		return nil
	}
	switch {
	case m.Manifest == nil:
		return errors.New("an incremental archive without a manifest")
	case len(m.Chain) == 0 || m.Chain[0] != m.Parent:
		return fmt.Errorf("chain %q does not start with the parent %q", m.Chain, m.Parent)
	case len(m.Chain) > maxChainDepth:
		return fmt.Errorf("%d archives deep, at most %d", len(m.Chain), maxChainDepth)
	}
	seen := map[string]bool{}
	for _, k := range m.Chain {
		if OpID(k) == "" || seen[k] {
			return fmt.Errorf("chain %q: %q is not an archive key, or twice", m.Chain, k)
		}
		seen[k] = true
	}
	return nil
}

// URL is the ARCHIVE_URL a job gets for the object at key in bucket,
// s3://bucket/key, which ParseURL reads back.
func URL(bucket, key string) string {
	return (&url.URL{Scheme: "s3", Host: bucket, Path: "/" + key}).String()
}

// ParseURL splits an archive URL of the form s3://bucket/key.
func ParseURL(raw string) (bucket, key string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("parse archive url: %w", err)
	}
	if u.Scheme != "s3" {
		return "", "", fmt.Errorf("archive url %q: scheme must be s3", raw)
	}
	key = strings.TrimPrefix(u.Path, "/")
	if u.Host == "" || key == "" || strings.HasSuffix(key, "/") {
		return "", "", fmt.Errorf("archive url %q: want s3://bucket/key", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", "", fmt.Errorf("archive url %q: unexpected query, fragment or user", raw)
	}
	return u.Host, key, nil
}

// ClientConfig holds what is needed to reach the S3 server.
type ClientConfig struct {
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
	Region    string
	UseSSL    bool
	// Wrap, when set, wraps minio's own transport: to count requests,
	// say.
	Wrap func(http.RoundTripper) http.RoundTripper
}

// NewClient builds a minio client with static SigV4 credentials.
func NewClient(cfg ClientConfig) (*minio.Client, error) {
	if cfg.Endpoint == "" {
		return nil, fmt.Errorf("s3 endpoint is empty")
	}
	opts := &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: cfg.UseSSL,
		Region: cfg.Region,
	}
	if cfg.Wrap != nil {
		t, err := minio.DefaultTransport(cfg.UseSSL)
		if err != nil {
			return nil, fmt.Errorf("s3 transport: %w", err)
		}
		opts.Transport = cfg.Wrap(t)
	}
	c, err := minio.New(cfg.Endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("s3 client for %s: %w", cfg.Endpoint, err)
	}
	return c, nil
}
