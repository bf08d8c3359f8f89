package agent

import (
	"io"
	"sync"
)

// pipe copies both ways until both directions end, passing each end of
// stream on as a half close where the other side allows it, then closes
// both. onRead, when set, hears of every read from a.
func pipe(a, b io.ReadWriteCloser, onRead func()) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); copyHalf(b, a, onRead) }()
	go func() { defer wg.Done(); copyHalf(a, b, nil) }()
	wg.Wait()
	a.Close()
	b.Close()
}

type closeWriter interface{ CloseWrite() error }

func copyHalf(dst, src io.ReadWriteCloser, onRead func()) {
	var r io.Reader = src
	if onRead != nil {
		r = &noticeReader{r: src, notice: onRead}
	}
	_, err := io.Copy(dst, r)
	if cw, ok := dst.(closeWriter); ok && err == nil {
		_ = cw.CloseWrite()
		return
	}
	// No half close, or the copy failed: end both directions.
	dst.Close()
	src.Close()
}

// noticeReader calls notice on every read that returns bytes.
type noticeReader struct {
	r      io.Reader
	notice func()
}

func (n *noticeReader) Read(p []byte) (int, error) {
	k, err := n.r.Read(p)
	if k > 0 {
		n.notice()
	}
	return k, err
}
