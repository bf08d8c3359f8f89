package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// selfBinary is the running codehub executable, served at /dl/codehub so
// exec and raw_exec batch jobs can fetch the data mover with a Nomad
// artifact block, which verifies Checksum.
type selfBinary struct {
	path     string
	checksum string // "sha256:<hex>", the form Nomad's artifact options take
	modTime  time.Time
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
	return &selfBinary{path: path, checksum: "sha256:" + hex.EncodeToString(h.Sum(nil)), modTime: st.ModTime()}, nil
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
