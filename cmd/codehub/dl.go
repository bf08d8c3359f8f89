package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// selfBinary is the running codehub executable, served at /dl/codehub so
// exec and raw_exec tasks can fetch the data mover and the workspace agent
// with a Nomad artifact block, which verifies Checksum, and at
// /dl/codehub.tar as an executable file in a tar archive: Nomad's artifact
// download keeps a plain file's mode at 0644, which the exec and raw_exec
// drivers fix before they run it and docker does not, while an archive's
// modes survive its extraction.
type selfBinary struct {
	path        string
	size        int64
	checksum    string // "sha256:<hex>", the form Nomad's artifact options take
	tarChecksum string
	modTime     time.Time
}

func newSelfBinary() (*selfBinary, error) {
	path, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate own executable: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open own executable: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("hash own executable: %w", err)
	}
	b := &selfBinary{path: path, size: st.Size(), checksum: "sha256:" + hex.EncodeToString(h.Sum(nil)), modTime: st.ModTime()}
	th := sha256.New()
	if err := b.writeTar(th); err != nil {
		return nil, fmt.Errorf("hash own executable as a tar archive: %w", err)
	}
	b.tarChecksum = "sha256:" + hex.EncodeToString(th.Sum(nil))
	return b, nil
}

func (b *selfBinary) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, err := os.Open(b.path)
	if err != nil {
		http.Error(w, "binary not available", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Checksum", b.checksum)
	http.ServeContent(w, r, "codehub", b.modTime, f)
}

// tarHandler serves /dl/codehub.tar.
func (b *selfBinary) tarHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-tar")
		w.Header().Set("X-Checksum", b.tarChecksum)
		w.Header().Set("Content-Length", strconv.FormatInt(tarSize(b.size), 10))
		if r.Method == http.MethodHead {
			return
		}
		_ = b.writeTar(w)
	})
}

// writeTar writes the archive: one file, "codehub", mode 0755, with the
// binary's modification time, so its bytes (and checksum) are the same for
// every request.
func (b *selfBinary) writeTar(w io.Writer) error {
	f, err := os.Open(b.path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(w)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: "codehub", Mode: 0o755, Size: b.size, ModTime: b.modTime.UTC().Truncate(time.Second), Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, b.size); err != nil {
		return err
	}
	return tw.Close()
}

// tarSize is the length of writeTar's archive of a file of size bytes: a
// header block, the content padded to whole blocks and two zero blocks.
func tarSize(size int64) int64 {
	return 512 + (size+511)/512*512 + 1024
}
