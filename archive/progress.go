package archive

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progressInterval is how often a running archive or restore reports.
const progressInterval = 5 * time.Second

// FormatFields renders key/value pairs as one job log line: KEY=value
// separated by spaces, values quoted when they would not read back as one
// token.
func FormatFields(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(quoteValue(kv[i+1]))
	}
	return b.String()
}

func quoteValue(v string) string {
	if v == "" || strings.ContainsFunc(v, func(r rune) bool {
		return r <= ' ' || r == '"' || r == '=' || r == '\\' || r >= 0x7f
	}) {
		return strconv.Quote(v)
	}
	return v
}

// WriteFields writes FormatFields(kv...) and a newline to w.
func WriteFields(w io.Writer, kv ...string) {
	fmt.Fprintln(w, FormatFields(kv...))
}

// lineWriter serialises whole lines from the progress ticker and the
// operation itself; a nil destination discards them.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) fields(kv ...string) {
	if l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	WriteFields(l.w, kv...)
}

// progress counts bytes read and written by one step and reports them
// every progressInterval until stopped.
type progress struct {
	out   *lineWriter
	step  string
	start time.Time
	in    atomic.Int64
	wrote atomic.Int64
	stopc chan struct{}
	done  chan struct{}
}

func startProgress(out *lineWriter, step string) *progress {
	p := &progress{out: out, step: step, start: time.Now(), stopc: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *progress) run() {
	defer close(p.done)
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stopc:
			return
		case <-t.C:
			p.report("")
		}
	}
}

// stop ends the ticker and writes the step's final line.
func (p *progress) stop(result string) {
	close(p.stopc)
	<-p.done
	p.report(result)
}

func (p *progress) report(result string) {
	elapsed := time.Since(p.start)
	kv := []string{
		"STEP", p.step,
		"BYTES_IN", strconv.FormatInt(p.in.Load(), 10),
		"BYTES_OUT", strconv.FormatInt(p.wrote.Load(), 10),
		"MBPS", strconv.FormatFloat(mbps(p.in.Load(), elapsed), 'f', 1, 64),
		"ELAPSED", elapsed.Round(time.Millisecond).String(),
	}
	if result != "" {
		kv = append(kv, "RESULT", result)
	}
	p.out.fields(kv...)
}

// mbps is throughput in MB/s (10^6 bytes), the unit disks and links quote.
func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}

// countingWriter adds what passes through it to n.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// countingReader adds what passes through it to n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}
