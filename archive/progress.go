package archive

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progressInterval is how often a running archive or restore reports; the
// dashboard shows the latest report.
const progressInterval = 2 * time.Second

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
	// total is what in counts towards once known, -1 before.
	total atomic.Int64
	stopc chan struct{}
	done  chan struct{}
}

// startProgress reports at once, so that a watcher learns the step has
// begun, and then every progressInterval.
func startProgress(out *lineWriter, step string) *progress {
	p := &progress{out: out, step: step, start: time.Now(), stopc: make(chan struct{}), done: make(chan struct{})}
	p.total.Store(-1)
	p.report("")
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
	if total := p.total.Load(); total >= 0 {
		kv = append(kv, "TOTAL", strconv.FormatInt(total, 10))
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

// Progress is the latest report of a running or finished archive or
// restore: Done of Total bytes of its data step (an archive counts the
// home's file bytes read, a restore the archive's bytes downloaded).
type Progress struct {
	Step string
	Done int64
	// Total is -1 while unknown (an archive still sizing the home).
	Total int64
	// Result is OK or FAIL once the step ended, empty while it runs.
	Result string
}

// Percent is Done as a whole percentage of Total, or -1 when Total is not
// known.
func (p Progress) Percent() int {
	switch {
	case p.Total < 0:
		return -1
	case p.Total == 0 || p.Done >= p.Total:
		return 100
	}
	return int(p.Done * 100 / p.Total)
}

// LastProgress returns the last progress report in a job's output (the
// tail a backend read), and false when it holds none. Lines that are not
// the job's own are passed over; maxLine bounds one line.
func LastProgress(r io.Reader, maxLine int) (Progress, bool, error) {
	var last Progress
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxLine, 64<<10)), maxLine)
	for sc.Scan() {
		if p, ok := parseProgress(sc.Text()); ok {
			last, found = p, true
		}
	}
	return last, found, sc.Err()
}

func parseProgress(line string) (Progress, bool) {
	fields, err := ParseFields(line)
	if err != nil || len(fields) == 0 || fields[0][0] != "STEP" {
		return Progress{}, false
	}
	p := Progress{Step: fields[0][1], Total: -1}
	seen := false
	for _, f := range fields[1:] {
		switch f[0] {
		case "BYTES_IN":
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || n < 0 {
				return Progress{}, false
			}
			p.Done, seen = n, true
		case "TOTAL":
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || n < 0 {
				return Progress{}, false
			}
			p.Total = n
		case "RESULT":
			p.Result = f[1]
		}
	}
	// The check, meta and swap lines carry no byte counts.
	return p, seen
}

// ProgressTail is how much of the end of a job's output a backend reads for
// its latest progress report: reports come every progressInterval, and
// the job's own log lines may sit between them.
const ProgressTail = 16 << 10
