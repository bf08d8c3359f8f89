package archive

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	prev := Entry{Path: "a", Type: TypeFile, Mode: 0o644, Size: 10, MTime: 100, CTime: 200, Inode: 7,
		SHA256: strings.Repeat("ab", 32), Layer: "archives/w/1/home.tar.zst"}
	with := func(f func(e *Entry)) Entry {
		e := prev
		e.SHA256, e.Layer = "", ""
		f(&e)
		return e
	}
	same := with(func(*Entry) {})
	dir := prev
	dir.Type = TypeDir
	link := prev
	link.Type = TypeHardlink
	tests := []struct {
		name       string
		prev       *Entry
		cur        Entry
		sameVolume bool
		want       fileAction
	}{
		{"new path", nil, same, true, actionStore},
		{"was a directory", &dir, same, true, actionStore},
		{"was a second hard link", &link, same, true, actionStore},
		{"untouched", &prev, same, true, actionKeep},
		{"untouched, other volume", &prev, same, false, actionHash},
		{"written (ctime)", &prev, with(func(e *Entry) { e.CTime++ }), true, actionHash},
		{"mtime set back, ctime moved", &prev, with(func(e *Entry) { e.CTime++; e.MTime = 100 }), true, actionHash},
		{"touched", &prev, with(func(e *Entry) { e.MTime++ }), true, actionHash},
		{"grown", &prev, with(func(e *Entry) { e.Size++ }), true, actionStore},
		{"grown, other volume", &prev, with(func(e *Entry) { e.Size++ }), false, actionStore},
		{"chmod", &prev, with(func(e *Entry) { e.Mode = 0o600 }), true, actionHash},
		{"replaced (inode)", &prev, with(func(e *Entry) { e.Inode++ }), true, actionHash},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(tt.prev, tt.cur, tt.sameVolume); got != tt.want {
				t.Errorf("decide = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSameContent(t *testing.T) {
	sum := strings.Repeat("cd", 32)
	prev := &Entry{Type: TypeFile, Size: 5, SHA256: sum}
	tests := []struct {
		name string
		prev *Entry
		size int64
		sum  string
		want bool
	}{
		{"same bytes", prev, 5, sum, true},
		{"other bytes", prev, 5, strings.Repeat("ef", 32), false},
		{"other size", prev, 6, sum, false},
		{"no previous file", nil, 5, sum, false},
		{"previous is a directory", &Entry{Type: TypeDir, Size: 5, SHA256: sum}, 5, sum, false},
	}
	for _, tt := range tests {
		if got := sameContent(tt.prev, tt.size, tt.sum); got != tt.want {
			t.Errorf("%s: sameContent = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestChainTooLong(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name                string
		depth               int
		stored, layer, live int64
		want                bool
	}{
		{"first layer on a full archive", 0, 100 * mib, mib, 100 * mib, false},
		{"deep but small", maxChainDepth - 1, 150 * mib, mib, 100 * mib, false},
		{"too deep", maxChainDepth, 101 * mib, mib, 100 * mib, true},
		{"layers twice the home", 5, 199 * mib, 2 * mib, 100 * mib, true},
		{"exactly twice the home", 5, 198 * mib, 2 * mib, 100 * mib, false},
		{"home emptied", 1, 100 * mib, 0, 0, true},
	}
	for _, tt := range tests {
		if got := chainTooLong(tt.depth, tt.stored, tt.layer, tt.live); got != tt.want {
			t.Errorf("%s: chainTooLong = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAncestors(t *testing.T) {
	k := func(op string) string { return Key("w", op) }
	metas := map[string]Meta{
		k("5"): {Parent: k("4"), Chain: []string{k("4"), k("3"), k("1")}},
		k("4"): {Parent: k("3"), Chain: []string{k("3"), k("1")}},
		k("2"): {},
		k("9"): {Parent: k("8"), Chain: []string{k("8")}},
	}
	broken := errors.New("s3 is down")
	stat := func(_ context.Context, key string) (Meta, error) {
		switch key {
		case k("down"):
			return Meta{}, withCode(CodeS3Access, broken)
		case k("damaged"):
			return Meta{}, withCode(CodeChecksumMismatch, errors.New("sizes differ"))
		}
		m, ok := metas[key]
		if !ok {
			return Meta{}, fmt.Errorf("stat: %w", ErrArchiveNotFound)
		}
		return m, nil
	}
	got, err := Ancestors(context.Background(), []string{k("5"), k("4"), k("2"), k("gone"), k("damaged")}, stat)
	if err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{k("1"), k("3"), k("4")}) {
		t.Errorf("ancestors %v", keys)
	}
	if _, err := Ancestors(context.Background(), []string{k("5"), k("down")}, stat); !errors.Is(err, broken) {
		t.Errorf("an unreadable meta: %v, want the error", err)
	}
}

func TestParseMetaChain(t *testing.T) {
	sum := strings.Repeat("00", 32)
	ref := fmt.Sprintf(`"manifest":{"sha256":%q,"size":3}`, sum)
	base := fmt.Sprintf(`{"sha256":%q,"size":1,"format":"tar+zstd","created_at":"2026-01-01T00:00:00Z"`, sum)
	p, q := Key("w", "1"), Key("w", "2")
	tests := []struct {
		name string
		doc  string
		ok   bool
	}{
		{"made before manifests", base + `}`, true},
		{"complete with manifest", base + `,` + ref + `}`, true},
		{"incremental", base + `,` + ref + fmt.Sprintf(`,"parent":%q,"chain":[%q,%q]}`, p, p, q), true},
		{"incremental without manifest", base + fmt.Sprintf(`,"parent":%q,"chain":[%q]}`, p, p), false},
		{"chain not starting at the parent", base + `,` + ref + fmt.Sprintf(`,"parent":%q,"chain":[%q,%q]}`, p, q, p), false},
		{"chain without parent", base + `,` + ref + fmt.Sprintf(`,"chain":[%q]}`, p), false},
		{"loop", base + `,` + ref + fmt.Sprintf(`,"parent":%q,"chain":[%q,%q,%q]}`, p, p, q, p), false},
		{"not a key", base + `,` + ref + `,"parent":"x","chain":["x"]}`, false},
		{"bad manifest sum", base + `,"manifest":{"sha256":"zz","size":3}}`, false},
	}
	for _, tt := range tests {
		if _, err := parseMeta([]byte(tt.doc)); (err == nil) != tt.ok {
			t.Errorf("%s: parseMeta error %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestDecodeManifestRefusesWhatCannotBeAHome(t *testing.T) {
	key, parent := Key("w", "2"), Key("w", "1")
	chain := map[string]bool{key: true, parent: true}
	sum := strings.Repeat("ab", 32)
	file := Entry{Path: "a", Type: TypeFile, Mode: 0o644, Size: 1, SHA256: sum, Layer: parent}
	tests := []struct {
		name    string
		header  manifestHeader
		entries []Entry
		ok      bool
	}{
		{"fine", manifestHeader{Version: 1, Archive: key}, []Entry{file, {Path: "b", Type: TypeHardlink, Link: "a"}}, true},
		{"other archive's", manifestHeader{Version: 1, Archive: parent}, []Entry{file}, false},
		{"future version", manifestHeader{Version: 2, Archive: key}, []Entry{file}, false},
		{"climbs out", manifestHeader{Version: 1, Archive: key}, []Entry{{Path: "../a", Type: TypeDir}}, false},
		{"staging name", manifestHeader{Version: 1, Archive: key}, []Entry{{Path: stagingName + "/x", Type: TypeDir}}, false},
		{"twice", manifestHeader{Version: 1, Archive: key}, []Entry{file, file}, false},
		{"held outside the chain", manifestHeader{Version: 1, Archive: key}, []Entry{{Path: "a", Type: TypeFile, Size: 1, SHA256: sum, Layer: Key("v", "1")}}, false},
		{"no hash", manifestHeader{Version: 1, Archive: key}, []Entry{{Path: "a", Type: TypeFile, Size: 1, Layer: key}}, false},
		{"device", manifestHeader{Version: 1, Archive: key}, []Entry{{Path: "a", Type: "chardev"}}, false},
		{"hard link to nothing", manifestHeader{Version: 1, Archive: key}, []Entry{{Path: "b", Type: TypeHardlink, Link: "a"}}, false},
		{"bytes in a directory", manifestHeader{Version: 1, Archive: key}, []Entry{{Path: "d", Type: TypeDir, Size: 3}}, false},
		{"mode beyond permissions", manifestHeader{Version: 1, Archive: key}, []Entry{{Path: "d", Type: TypeDir, Mode: 0o170000}}, false},
	}
	for _, tt := range tests {
		data, err := encodeManifest(&manifest{header: tt.header, entries: tt.entries})
		if err != nil {
			t.Fatal(err)
		}
		m, err := decodeManifest(data, key, chain)
		if (err == nil) != tt.ok {
			t.Errorf("%s: decode error %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err == nil && !slices.Equal(m.entries, tt.entries) {
			t.Errorf("%s: decoded %+v, want %+v", tt.name, m.entries, tt.entries)
		}
		if err != nil && !errors.Is(err, errBadManifest) {
			t.Errorf("%s: %v is not errBadManifest", tt.name, err)
		}
	}
	for _, garbage := range [][]byte{nil, []byte("not zstd"), compress(t, []byte("{\"version\":1,\n")), compress(t, []byte(`{"version":1,"archive":"`+key+`","extra":1}`+"\n"))} {
		if _, err := decodeManifest(garbage, key, chain); err == nil {
			t.Errorf("garbage %q decoded", garbage)
		}
	}
}

// Names are bytes, not text, and mtimes reach beyond what one count of
// nanoseconds holds: both come back from a manifest exactly.
func TestManifestKeepsAnyNameAndTime(t *testing.T) {
	key := Key("w", "1")
	entries := []Entry{
		{Path: "latin1-\xe9t\xe9.txt", Type: TypeFile, Mode: 0o644, Size: 1, MTime: -11676096000, MTimeNS: 999999999,
			SHA256: strings.Repeat("ab", 32), Layer: key},
		{Path: "link-\xff", Type: TypeSymlink, Link: "latin1-\xe9t\xe9.txt", MTime: 1 << 40},
		{Path: "plain", Type: TypeDir, Mode: 0o755},
	}
	data, err := encodeManifest(&manifest{header: manifestHeader{Version: 1, Archive: key}, entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(data, key, map[string]bool{key: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.entries, entries) {
		t.Fatalf("decoded %+v, want %+v", m.entries, entries)
	}
}
