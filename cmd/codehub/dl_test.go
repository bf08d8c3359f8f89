package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http/httptest"
	"os"
	"testing"
)

// /dl/codehub.tar holds this binary, executable, as its checksum says.
func TestSelfBinaryTar(t *testing.T) {
	self, err := newSelfBinary()
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	self.tarHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/dl/codehub.tar", nil))
	body := rec.Body.Bytes()
	sum := sha256.Sum256(body)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != self.tarChecksum || rec.Header().Get("X-Checksum") != got {
		t.Fatalf("checksum %s, announced %s and %s", got, self.tarChecksum, rec.Header().Get("X-Checksum"))
	}
	if rec.Header().Get("Content-Length") != "" && int64(len(body)) != tarSize(self.size) {
		t.Fatalf("%d bytes, Content-Length says %s", len(body), rec.Header().Get("Content-Length"))
	}
	tr := tar.NewReader(bytes.NewReader(body))
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Name != "codehub" || hdr.Mode != 0o755 || hdr.Typeflag != tar.TypeReg {
		t.Fatalf("entry %q mode %o type %c", hdr.Name, hdr.Mode, hdr.Typeflag)
	}
	got, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the archived file is not this binary")
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("a second entry: %v", err)
	}
}
