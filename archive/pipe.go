package archive

import (
	"errors"
	"io"
)

// Sizes of the pipe between two stages of an archive or a restore: a few
// chunks in flight let each stage keep its own core busy, as the two
// processes of `tar | zstd` do, in a fixed amount of memory.
const (
	chunkSize  = 1 << 20
	chunkCount = 4
)

// errReaderStopped is what a chunkPipe's writer gets once the reader has
// given up without an error of its own.
var errReaderStopped = errors.New("reader stopped")

// chunkPipe is an in-memory pipe with a buffer of chunkCount chunks: the
// writer fills one chunk while the reader drains another. One goroutine
// writes and ends with closeWrite; one other reads and ends with closeRead.
// Each side unblocks when the other closes, so neither can strand the
// other.
type chunkPipe struct {
	full chan []byte // filled chunks, in order
	free chan []byte // drained chunks, for the writer to reuse
	done chan struct{}

	wbuf []byte // writer's chunk being filled
	werr error  // set before full is closed: what the reader gets instead of EOF

	rchunk []byte // reader's chunk being drained
	rbuf   []byte // its unread rest
	rerr   error  // set before done is closed: what the writer gets
}

func newChunkPipe() *chunkPipe {
	c := &chunkPipe{
		full: make(chan []byte, chunkCount),
		free: make(chan []byte, chunkCount),
		done: make(chan struct{}),
	}
	for range chunkCount {
		c.free <- make([]byte, 0, chunkSize)
	}
	return c
}

// Write copies p into chunks and hands on every full one.
func (c *chunkPipe) Write(p []byte) (int, error) {
	select {
	case <-c.done:
		return 0, c.rerr
	default:
	}
	written := 0
	for len(p) > 0 {
		if c.wbuf == nil {
			select {
			case c.wbuf = <-c.free:
			case <-c.done:
				return written, c.rerr
			}
		}
		n := copy(c.wbuf[len(c.wbuf):cap(c.wbuf)], p)
		c.wbuf = c.wbuf[:len(c.wbuf)+n]
		written += n
		p = p[n:]
		if len(c.wbuf) == cap(c.wbuf) {
			if err := c.send(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (c *chunkPipe) send() error {
	select {
	case c.full <- c.wbuf:
		c.wbuf = nil
		return nil
	case <-c.done:
		return c.rerr
	}
}

// closeWrite hands on the last chunk and ends the stream: the reader gets
// io.EOF after it, or err if err is not nil.
func (c *chunkPipe) closeWrite(err error) {
	if err == nil && len(c.wbuf) > 0 {
		// A failed send means the reader is gone and wants no more.
		_ = c.send()
	}
	c.werr = err
	close(c.full)
}

// Read copies from the chunks in order.
func (c *chunkPipe) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(c.rbuf) == 0 {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.rbuf)
	c.rbuf = c.rbuf[n:]
	return n, nil
}

// WriteTo hands whole chunks to w, saving the copy Read would make.
func (c *chunkPipe) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if len(c.rbuf) > 0 {
			n, err := w.Write(c.rbuf)
			total += int64(n)
			c.rbuf = c.rbuf[n:]
			if err != nil {
				return total, err
			}
		}
		if err := c.next(); errors.Is(err, io.EOF) {
			return total, nil
		} else if err != nil {
			return total, err
		}
	}
}

// next recycles the drained chunk and takes the following one.
func (c *chunkPipe) next() error {
	if c.rchunk != nil {
		c.free <- c.rchunk[:0]
		c.rchunk, c.rbuf = nil, nil
	}
	chunk, ok := <-c.full
	if !ok {
		if c.werr != nil {
			return c.werr
		}
		return io.EOF
	}
	c.rchunk, c.rbuf = chunk, chunk
	return nil
}

// closeRead tells the writer no more will be read: its pending and later
// writes fail with err, or errReaderStopped if err is nil.
func (c *chunkPipe) closeRead(err error) {
	if err == nil {
		err = errReaderStopped
	}
	c.rerr = err
	close(c.done)
}
