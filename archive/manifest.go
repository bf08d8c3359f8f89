package archive

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
)

// manifestSuffix names the manifest object beside an archive object.
const manifestSuffix = ".manifest"

// manifestVersion is the only manifest layout this package writes and reads.
const manifestVersion = 1

// maxManifestBytes bounds a decompressed manifest: about ten million
// entries, far beyond any home, yet a bound on what a hostile one costs.
const maxManifestBytes = 4 << 30

// ManifestKey returns the key of the manifest object of the archive at key.
func ManifestKey(key string) string {
	return key + manifestSuffix
}

// EntryType is the kind of a manifest entry.
type EntryType string

// Entry types. A hard link is the second or later name of a regular file
// (Link names the first); its bytes are those of the first name.
const (
	TypeFile     EntryType = "file"
	TypeDir      EntryType = "dir"
	TypeSymlink  EntryType = "symlink"
	TypeHardlink EntryType = "hardlink"
)

// Entry describes one entry of a home as an archive recorded it.
type Entry struct {
	Path string    `json:"path"`
	Type EntryType `json:"type"`
	// Mode holds the permission, setuid, setgid and sticky bits as a tar
	// header does.
	Mode int64 `json:"mode"`
	// UID and GID are recorded, not restored: a restore writes as whoever
	// runs it.
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Size int64  `json:"size,omitempty"`
	// MTime and MTimeNS are the modification time: seconds since the
	// epoch and nanoseconds within the second (one count of nanoseconds
	// would not reach before 1678 or after 2262).
	MTime   int64 `json:"mtime"`
	MTimeNS int64 `json:"mtime_ns,omitempty"`
	// SHA256 is the content hash of a regular file.
	SHA256 string `json:"sha256,omitempty"`
	// Link is a symlink's target or a hard link's first name.
	Link string `json:"link,omitempty"`
	// Layer is the key of the archive whose tar holds this regular file's
	// bytes under the same path.
	Layer string `json:"layer,omitempty"`
	// Inode and CTime, with Size, MTime and Mode, let the next archive of
	// the same volume know a file unchanged without reading it.
	Inode uint64 `json:"inode,omitempty"`
	CTime int64  `json:"ctime,omitempty"`
}

func (e *Entry) modTime() time.Time { return time.Unix(e.MTime, e.MTimeNS) }

func (e *Entry) sameMTime(ts syscall.Timespec) bool {
	return ts.Sec == e.MTime && ts.Nsec == e.MTimeNS
}

// MarshalJSON writes a path or link that is not valid UTF-8 (Linux names
// are any bytes but NUL and slash) as base64 in path_bytes or link_bytes:
// as a JSON string it would come back with its bad bytes replaced.
func (e Entry) MarshalJSON() ([]byte, error) {
	w := entryJSON{plainEntry: plainEntry(e)}
	if !utf8.ValidString(e.Path) {
		w.Path, w.PathBytes = "", []byte(e.Path)
	}
	if !utf8.ValidString(e.Link) {
		w.Link, w.LinkBytes = "", []byte(e.Link)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var w entryJSON
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return err
	}
	*e = Entry(w.plainEntry)
	if w.PathBytes != nil {
		e.Path = string(w.PathBytes)
	}
	if w.LinkBytes != nil {
		e.Link = string(w.LinkBytes)
	}
	return nil
}

type plainEntry Entry

type entryJSON struct {
	plainEntry
	PathBytes []byte `json:"path_bytes,omitempty"`
	LinkBytes []byte `json:"link_bytes,omitempty"`
}

// manifestHeader is the first line of a manifest.
type manifestHeader struct {
	Version int    `json:"version"`
	Archive string `json:"archive"`
	// Volume identifies the file system the home was read from; inode
	// numbers and ctimes mean something only on the same one.
	Volume string `json:"volume"`
}

// manifest is the complete list of what an archive's home holds, and for
// each regular file which archive of the chain holds its bytes.
type manifest struct {
	header  manifestHeader
	entries []Entry
}

// encodeManifest writes m as zstd-compressed JSON lines: the header, then
// one entry per line in walk order.
func encodeManifest(m *manifest) ([]byte, error) {
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	je := json.NewEncoder(enc)
	je.SetEscapeHTML(false)
	if err := je.Encode(m.header); err != nil {
		return nil, err
	}
	for i := range m.entries {
		if err := je.Encode(&m.entries[i]); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// errBadManifest marks a manifest that decodes but cannot describe a home.
var errBadManifest = errors.New("bad manifest")

// decodeManifest reads and checks a manifest written for the archive at
// key: every entry must be one a restore may write, and every regular
// file's bytes must be held by an archive of chain (the keys of key's
// chain, key included).
func decodeManifest(data []byte, key string, chain map[string]bool) (*manifest, error) {
	zr, err := zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	sc := bufio.NewScanner(io.LimitReader(zr, maxManifestBytes))
	// A line holds at most a path and a link target of PATH_MAX bytes each,
	// six times longer once escaped.
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	m := &manifest{}
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			if err := strictDecode(sc.Bytes(), &m.header); err != nil {
				return nil, fmt.Errorf("%w: header: %w", errBadManifest, err)
			}
			continue
		}
		var e Entry
		if err := strictDecode(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", errBadManifest, line, err)
		}
		m.entries = append(m.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadManifest, err)
	}
	if line == 0 {
		return nil, fmt.Errorf("%w: empty", errBadManifest)
	}
	if err := m.check(key, chain); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadManifest, err)
	}
	return m, nil
}

func strictDecode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// check verifies what a restore relies on: version and owner, unique clean
// names, known types, a hash, size and holding layer for every regular
// file, and hard links that name a regular file of the manifest.
func (m *manifest) check(key string, chain map[string]bool) error {
	if m.header.Version != manifestVersion {
		return fmt.Errorf("version %d, want %d", m.header.Version, manifestVersion)
	}
	if m.header.Archive != key {
		return fmt.Errorf("written for %q, not %q", m.header.Archive, key)
	}
	types := make(map[string]EntryType, len(m.entries))
	for _, e := range m.entries {
		if err := checkName(e.Path); err != nil {
			return fmt.Errorf("entry %q: %w", e.Path, err)
		}
		if e.Path == stagingName || strings.HasPrefix(e.Path, stagingName+"/") {
			return fmt.Errorf("entry %q: the restore's staging directory", e.Path)
		}
		if _, dup := types[e.Path]; dup {
			return fmt.Errorf("entry %q appears twice", e.Path)
		}
		types[e.Path] = e.Type
		if e.Size < 0 || e.Size > maxEntrySize || (e.Type != TypeFile && e.Size != 0) {
			return fmt.Errorf("entry %q: size %d", e.Path, e.Size)
		}
		if e.Mode&^0o7777 != 0 {
			return fmt.Errorf("entry %q: mode %o", e.Path, e.Mode)
		}
		switch e.Type {
		case TypeFile:
			if sum, err := hex.DecodeString(e.SHA256); err != nil || len(sum) != 32 {
				return fmt.Errorf("entry %q: sha256 %q", e.Path, e.SHA256)
			}
			if !chain[e.Layer] {
				return fmt.Errorf("entry %q: held by %q, which is not in the archive's chain", e.Path, e.Layer)
			}
		case TypeDir, TypeSymlink:
		case TypeHardlink:
		default:
			return fmt.Errorf("entry %q: type %q", e.Path, e.Type)
		}
	}
	for _, e := range m.entries {
		if e.Type == TypeHardlink && types[e.Link] != TypeFile {
			return fmt.Errorf("entry %q: hard link to %q, which is not a regular file of the manifest", e.Path, e.Link)
		}
	}
	return nil
}

// fileAction is what an archive does with a regular file of the home.
type fileAction int

const (
	// actionStore: the file's bytes go into this archive's own layer.
	actionStore fileAction = iota
	// actionKeep: the parent's layer holds the file as it is; not read.
	actionKeep
	// actionHash: the file may have changed; its content hash decides.
	actionHash
)

// decide tells, from the stat of a regular file (cur) and what the parent
// manifest recorded at the same path (prev, nil for none), whether the file
// needs reading. A file is unchanged without reading it only on the volume
// the parent was read from, when inode, ctime, mtime, size and mode all
// match: every write and every chmod moves the ctime, which no user call
// can set back. A file whose size changed is stored without hashing it
// first (its content cannot be the same). Otherwise a path the parent held
// as a regular file is hashed, so that a home restored on another node
// (new inodes, new ctimes) is read again but not uploaded again.
func decide(prev *Entry, cur Entry, sameVolume bool) fileAction {
	switch {
	case prev == nil || prev.Type != TypeFile || prev.Size != cur.Size:
		return actionStore
	case sameVolume && prev.Inode == cur.Inode && prev.CTime == cur.CTime &&
		prev.MTime == cur.MTime && prev.MTimeNS == cur.MTimeNS && prev.Size == cur.Size && prev.Mode == cur.Mode:
		return actionKeep
	default:
		return actionHash
	}
}

// sameContent reports whether a file of size bytes hashing to sum is the
// one prev recorded, so that prev's layer still holds its bytes.
func sameContent(prev *Entry, size int64, sum string) bool {
	return prev != nil && prev.Type == TypeFile && prev.Size == size && prev.SHA256 == sum
}

// Chain limits: past either, an archive is made full although it has a
// parent.
const (
	// maxChainDepth bounds the layers a restore reads one after the other:
	// with an archive at every stop, a full archive about every month of
	// daily use.
	maxChainDepth = 32
	// maxChainFactor bounds the file bytes of a chain's layers against the
	// live tree's: a restore reads every layer whole, so it reads at most
	// this many times the home, and storage stays within the same bound.
	maxChainFactor = 2
)

// chainTooLong decides whether an archive on a parent of depth
// parentDepth whose chain already stores parentStored file bytes, adding a
// layer of layerBytes, must rather be a full archive of a home of
// liveBytes.
func chainTooLong(parentDepth int, parentStored, layerBytes, liveBytes int64) bool {
	return parentDepth+1 > maxChainDepth || parentStored+layerBytes > maxChainFactor*liveBytes
}
