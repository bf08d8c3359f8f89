package archive

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestChunkPipeCarriesTheStream(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 3*chunkCount*chunkSize+12345)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	readers := []struct {
		name string
		read func(*chunkPipe) ([]byte, error)
	}{
		{"Read", func(c *chunkPipe) ([]byte, error) {
			// Odd sizes, so reads straddle chunk ends.
			sizes := rand.New(rand.NewPCG(7, 8))
			var out []byte
			buf := make([]byte, 7777)
			for {
				n, err := c.Read(buf[:1+sizes.IntN(len(buf)-1)])
				out = append(out, buf[:n]...)
				if errors.Is(err, io.EOF) {
					return out, nil
				}
				if err != nil {
					return out, err
				}
			}
		}},
		{"WriteTo", func(c *chunkPipe) ([]byte, error) {
			var out bytes.Buffer
			_, err := c.WriteTo(&out)
			return out.Bytes(), err
		}},
	}
	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			c := newChunkPipe()
			go func() {
				sizes := rand.New(rand.NewPCG(5, 6))
				for rest := data; len(rest) > 0; {
					n := min(len(rest), 1+sizes.IntN(3*chunkSize/2))
					if _, err := c.Write(rest[:n]); err != nil {
						c.closeWrite(err)
						return
					}
					rest = rest[n:]
				}
				c.closeWrite(nil)
			}()
			got, err := r.read(c)
			c.closeRead(err)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes that differ from the %d written", len(got), len(data))
			}
		})
	}
}

func TestChunkPipeWriterErrorReachesReader(t *testing.T) {
	c := newChunkPipe()
	broken := errors.New("disk went away")
	go func() {
		if _, err := c.Write([]byte("partial")); err != nil {
			t.Error(err)
		}
		c.closeWrite(broken)
	}()
	got, err := io.ReadAll(c)
	c.closeRead(err)
	if !errors.Is(err, broken) {
		t.Fatalf("reader got %v, want %v", err, broken)
	}
	if len(got) != 0 {
		t.Fatalf("reader got %q from a stream that failed before its first full chunk", got)
	}
}

func TestChunkPipeReaderStopUnblocksWriter(t *testing.T) {
	c := newChunkPipe()
	wrote := make(chan error)
	go func() {
		// More than the pipe holds: only a stopped reader lets this end.
		_, err := c.Write(make([]byte, (chunkCount+2)*chunkSize))
		wrote <- err
	}()
	stopped := errors.New("encoder failed")
	c.closeRead(stopped)
	if err := <-wrote; !errors.Is(err, stopped) {
		t.Fatalf("writer got %v, want %v", err, stopped)
	}
	if _, err := c.Write([]byte("more")); !errors.Is(err, stopped) {
		t.Fatalf("write after the reader stopped: %v, want %v", err, stopped)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

func TestCompressTreeStopsWhenEncoderFails(t *testing.T) {
	src := t.TempDir()
	makeTree(t, src, 12<<20)
	broken := errors.New("encoder failed")
	var read atomic.Int64
	err := compressTree(context.Background(), hclog.NewNullLogger(), src, failingWriter{broken}, &read)
	if !errors.Is(err, broken) {
		t.Fatalf("compressTree: %v, want %v", err, broken)
	}
	if read.Load() >= 12<<20 {
		t.Fatalf("the walker read all %d bytes after the encoder failed", read.Load())
	}
}

func TestCompressTreeReportsWalkFailure(t *testing.T) {
	var read atomic.Int64
	var out bytes.Buffer
	err := compressTree(context.Background(), hclog.NewNullLogger(), "/nonexistent-home", &out, &read)
	if err == nil {
		t.Fatal("compressTree of a missing directory succeeded")
	}
}
