package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestCheckedReaderWithholdsTheEnd: whatever differs from the meta (a
// flipped byte, bytes missing or added), the reader never hands out the
// whole object, and it says CHECKSUM_MISMATCH.
func TestCheckedReaderWithholdsTheEnd(t *testing.T) {
	good := bytes.Repeat([]byte("codehub archive "), 4096)
	sum := sha256.Sum256(good)
	meta := Meta{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(good))}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	cases := map[string]struct {
		object []byte
		ok     bool
	}{
		"intact":       {good, true},
		"last byte":    {flipped, false},
		"one short":    {good[:len(good)-1], false},
		"one too many": {append(bytes.Clone(good), 'x'), false},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole reads":    func(r io.Reader) io.Reader { return r },
		"one byte reads": iotest.OneByteReader,
		"data with EOF":  iotest.DataErrReader,
	}
	for name, c := range cases {
		for how, wrap := range readers {
			r := &checkedReader{obj: io.NopCloser(wrap(bytes.NewReader(c.object))), key: "k", meta: meta, sum: sha256.New()}
			got, err := io.ReadAll(r)
			switch {
			case c.ok && (err != nil || !bytes.Equal(got, good)):
				t.Errorf("%s, %s: read %d bytes, error %v", name, how, len(got), err)
			case !c.ok && !errors.Is(err, ErrChecksumMismatch):
				t.Errorf("%s, %s: error %v, want a checksum mismatch", name, how, err)
			case !c.ok && int64(len(got)) >= meta.Size:
				t.Errorf("%s, %s: handed out %d of %d bytes", name, how, len(got), meta.Size)
			}
		}
	}
}
