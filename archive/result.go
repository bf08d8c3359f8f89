package archive

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
)

// errBadLine reports a job log line that FormatFields could not have written.
var errBadLine = errors.New("not a job log line")

// ParseFields reads a line FormatFields wrote back into its pairs, in order.
// Quoted values are read whole, so a value (a file name in a DETAIL)
// can never pose as a field of its own.
func ParseFields(line string) ([][2]string, error) {
	var out [][2]string
	for rest := strings.TrimLeft(line, " "); rest != ""; rest = strings.TrimLeft(rest, " ") {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			return nil, errBadLine
		}
		var value string
		if strings.HasPrefix(after, `"`) {
			quoted, err := strconv.QuotedPrefix(after)
			if err != nil {
				return nil, errBadLine
			}
			if value, err = strconv.Unquote(quoted); err != nil {
				return nil, errBadLine
			}
			after = after[len(quoted):]
		} else {
			end := strings.IndexByte(after, ' ')
			if end < 0 {
				end = len(after)
			}
			value, after = after[:end], after[end:]
			if strings.ContainsAny(value, "\"=") {
				return nil, errBadLine
			}
		}
		if after != "" && after[0] != ' ' {
			return nil, errBadLine
		}
		out = append(out, [2]string{key, value})
		rest = after
	}
	return out, nil
}

// ResultTail is how much of the end of a job's output a backend reads for
// its result: the result line is the last line the job prints.
const ResultTail = 64 << 10

// Results a job's last RESULT line gives.
const (
	ResultOK   = "OK"
	ResultFail = "FAIL"
	// ResultSkipped: the job had nothing to do (a stop archive nobody
	// asked for).
	ResultSkipped = "SKIPPED"
)

// Outcome is what a job's last RESULT line says: Result is "" when it
// printed none, and Code is CodeUnknown unless it failed with a code.
type Outcome struct {
	Result string
	Code   Code
	// URL is the ARCHIVE_URL the job named (its CODEHUB_JOB line): the
	// archive it made or read.
	URL string
}

// LastResult reads the last RESULT line a job printed. Lines that are not
// the job's own key/value lines are passed over; maxLine bounds one line.
func LastResult(r io.Reader, maxLine int) (Outcome, error) {
	out := Outcome{Code: CodeUnknown}
	url := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxLine, 64<<10)), maxLine)
	for sc.Scan() {
		fields, err := ParseFields(sc.Text())
		if err != nil || len(fields) == 0 {
			continue
		}
		if fields[0][0] == "CODEHUB_JOB" {
			for _, f := range fields[1:] {
				if f[0] == "ARCHIVE_URL" {
					url = f[1]
				}
			}
			continue
		}
		if fields[0][0] != "RESULT" {
			continue
		}
		out = Outcome{Result: fields[0][1], Code: CodeUnknown, URL: url}
		for _, f := range fields[1:] {
			switch {
			case out.Result == ResultFail && f[0] == "CODEHUB_ERROR" && f[1] != "" && out.Code == CodeUnknown:
				out.Code = Code(f[1])
			case f[0] == "ARCHIVE_URL":
				out.URL = f[1]
			}
		}
	}
	return out, sc.Err()
}

// ResultCode returns the CODEHUB_ERROR of the last RESULT line a job
// printed when it says FAIL, or CodeUnknown.
func ResultCode(r io.Reader, maxLine int) (Code, error) {
	out, err := LastResult(r, maxLine)
	return out.Code, err
}
