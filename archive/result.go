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

// ResultCode returns the CODEHUB_ERROR of the last "RESULT=FAIL" line a job
// printed, or CodeUnknown without one. Lines that are not the job's own
// key/value lines are passed over; maxLine bounds one line.
func ResultCode(r io.Reader, maxLine int) (Code, error) {
	code := CodeUnknown
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxLine, 64<<10)), maxLine)
	for sc.Scan() {
		fields, err := ParseFields(sc.Text())
		if err != nil || len(fields) < 2 || fields[0] != [2]string{"RESULT", "FAIL"} {
			continue
		}
		for _, f := range fields[1:] {
			if f[0] == "CODEHUB_ERROR" && f[1] != "" {
				code = Code(f[1])
				break
			}
		}
	}
	return code, sc.Err()
}
