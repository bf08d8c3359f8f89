package archive

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestPartSize(t *testing.T) {
	tests := []struct {
		part int
		want int64
	}{
		{1, 8 << 20},
		{500, 8 << 20},
		{501, 16 << 20},
		{1001, 32 << 20},
		{3501, 1 << 30},
		{10000, 1 << 30},
	}
	for _, tt := range tests {
		if got := partSize(tt.part); got != tt.want {
			t.Errorf("partSize(%d) = %d, want %d", tt.part, got, tt.want)
		}
	}
	var total int64
	for n := 1; n <= maxParts; n++ {
		total += partSize(n)
	}
	if total < 5<<40 {
		t.Fatalf("%d parts hold %d bytes, less than S3's 5 TiB object limit", maxParts, total)
	}
}

func TestSpoolSpillsToFile(t *testing.T) {
	s := newSpool(10)
	defer s.close()
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	for _, chunk := range [][]byte{data[:4], data[4:15], data[15:]} {
		if _, err := s.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if s.file == nil || s.size != int64(len(data)) {
		t.Fatalf("spool holds %d bytes, file %v", s.size, s.file)
	}
	for _, off := range []int64{0, 3, 9, 10, 11, 30} {
		got, err := io.ReadAll(io.NewSectionReader(s, off, s.size-off))
		if err != nil || !bytes.Equal(got, data[off:]) {
			t.Errorf("read from %d = %q, %v", off, got, err)
		}
	}
	s.reset()
	if _, err := s.Write([]byte("short")); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(io.NewSectionReader(s, 0, s.size))
	if string(got) != "short" {
		t.Fatalf("after reset read %q", got)
	}
}

func TestListing(t *testing.T) {
	k := func(op string) string { return Key("ws", op) }
	t1, t2 := time.Unix(1700000000, 0), time.Unix(1700000100, 0)
	var objects []Object
	for _, name := range []string{
		k("01a"), MetaKey(k("01a")),
		k("01c"), MetaKey(k("01c")),
		k("01b"),          // unfinished: no meta
		MetaKey(k("01d")), // a deletion that died after removing the object
		"archives/ws/01e/other.txt", MetaKey("archives/ws/01e/other.txt"),
	} {
		objects = append(objects, Object{Key: name, Modified: t1})
	}
	objects[4].Modified = t2
	got := listing(objects)
	if want := []string{k("01c"), k("01a")}; strings.Join(got.Complete, " ") != strings.Join(want, " ") {
		t.Fatalf("complete = %v, want %v", got.Complete, want)
	}
	want := []Object{{Key: k("01b"), Modified: t2}, {Key: k("01d"), Modified: t1}}
	if len(got.Incomplete) != 2 || got.Incomplete[0] != want[0] || got.Incomplete[1] != want[1] {
		t.Fatalf("incomplete = %v, want %v", got.Incomplete, want)
	}
}

func TestFormatFields(t *testing.T) {
	tests := []struct {
		kv   []string
		want string
	}{
		{[]string{"RESULT", "OK"}, "RESULT=OK"},
		{[]string{"A", "1", "B", "s3://b/k"}, "A=1 B=s3://b/k"},
		{[]string{"DETAIL", "two words"}, `DETAIL="two words"`},
		{[]string{"DETAIL", `say "x"=y`}, `DETAIL="say \"x\"=y"`},
		{[]string{"DETAIL", "line\nbreak"}, `DETAIL="line\nbreak"`},
		{[]string{"EMPTY", ""}, `EMPTY=""`},
	}
	for _, tt := range tests {
		if got := FormatFields(tt.kv...); got != tt.want {
			t.Errorf("FormatFields(%q) = %s, want %s", tt.kv, got, tt.want)
		}
	}
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		raw, bucket, key string
		ok               bool
	}{
		{"s3://codehub/archives/ws/op/home.tar.zst", "codehub", "archives/ws/op/home.tar.zst", true},
		{"s3://codehub/k", "codehub", "k", true},
		{"http://codehub/k", "", "", false},
		{"s3://codehub/", "", "", false},
		{"s3:///k", "", "", false},
		{"s3://codehub/dir/", "", "", false},
		{"s3://codehub/k?versionId=1", "", "", false},
		{"s3://user@codehub/k", "", "", false},
		{"::", "", "", false},
	}
	for _, tt := range tests {
		bucket, key, err := ParseURL(tt.raw)
		if (err == nil) != tt.ok || bucket != tt.bucket || key != tt.key {
			t.Errorf("ParseURL(%q) = %q, %q, %v", tt.raw, bucket, key, err)
		}
	}
}

// What URL writes, ParseURL reads back, whatever the key holds.
func TestURLRoundTrip(t *testing.T) {
	for _, key := range []string{Key("01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x8a0000000000000000aa"), "k", "a b/ü?#%41"} {
		bucket, got, err := ParseURL(URL("codehub", key))
		if err != nil || bucket != "codehub" || got != key {
			t.Errorf("ParseURL(URL(%q)) = %q, %q, %v", key, bucket, got, err)
		}
	}
}

func TestParseMeta(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	good := fmt.Sprintf(`{"sha256":%q,"size":42,"format":"tar+zstd","created_at":"2026-11-25T23:00:00Z"}`, sum)
	m, err := parseMeta([]byte(good))
	if err != nil || m.Size != 42 || m.SHA256 != sum || !m.CreatedAt.Equal(time.Date(2026, 11, 25, 23, 0, 0, 0, time.UTC)) {
		t.Fatalf("parseMeta(good) = %+v, %v", m, err)
	}
	for _, bad := range []string{
		`not json`,
		strings.Replace(good, "tar+zstd", "tar+gzip", 1),
		strings.Replace(good, sum, "abc", 1),
		strings.Replace(good, sum, strings.Repeat("zz", 32), 1),
		strings.Replace(good, "42", "-1", 1),
	} {
		if _, err := parseMeta([]byte(bad)); err == nil {
			t.Errorf("parseMeta(%s) accepted", bad)
		}
	}
	// The meta written is exactly the JSON shape docs/archive.md documents.
	b, _ := json.Marshal(newMeta(bytes.Repeat([]byte{0xab}, 32), 42, time.Date(2026, 11, 25, 23, 0, 0, 999, time.FixedZone("x", 3600))))
	want := fmt.Sprintf(`{"sha256":%q,"size":42,"format":"tar+zstd","created_at":"2026-11-25T22:00:00Z"}`, sum)
	if string(b) != want {
		t.Fatalf("meta json %s, want %s", b, want)
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, ""},
		{"coded", fmt.Errorf("x: %w", &Error{Code: CodeChecksumMismatch, Err: errors.New("y")}), CodeChecksumMismatch},
		{"disk full", fmt.Errorf("write: %w", &os.PathError{Op: "write", Path: "f", Err: syscall.ENOSPC}), CodeDiskFull},
		{"quota", fmt.Errorf("write: %w", syscall.EDQUOT), CodeDiskFull},
		{"s3 response", fmt.Errorf("put: %w", minio.ErrorResponse{Code: "AccessDenied", StatusCode: 403}), CodeS3Access},
		{"network", fmt.Errorf("put: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), CodeS3Access},
		{"other", errors.New("boom"), CodeUnknown},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("%s: CodeOf = %q, want %q", tt.name, got, tt.want)
		}
	}
	notFound := s3Error(minio.ErrorResponse{Code: minio.NoSuchKey, StatusCode: 404}, CodeMetaNotFound)
	if !errors.Is(notFound, ErrMetaNotFound) || errors.Is(notFound, ErrArchiveNotFound) {
		t.Fatalf("s3Error(NoSuchKey, META_NOT_FOUND) = %v", notFound)
	}
	if got := CodeOf(s3Error(minio.ErrorResponse{Code: "SignatureDoesNotMatch"}, CodeArchiveNotFound)); got != CodeS3Access {
		t.Fatalf("bad signature classified %s", got)
	}
	if got := CodeOf(s3Error(syscall.ENOSPC, CodeArchiveNotFound)); got != CodeDiskFull {
		t.Fatalf("ENOSPC during an upload classified %s", got)
	}
}
