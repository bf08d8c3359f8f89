package archive

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseFieldsReadsWhatFormatFieldsWrote(t *testing.T) {
	for _, kv := range [][]string{
		{"RESULT", "OK"},
		{"RESULT", "FAIL", "CODEHUB_ERROR", "DISK_FULL", "DETAIL", "write home/x: no space left on device"},
		{"DETAIL", `open "x CODEHUB_ERROR=CHECKSUM_MISMATCH y": permission denied`},
		{"A", "", "B", "tab\there", "C", "line\nbreak", "D", "ü=é"},
	} {
		fields, err := ParseFields(FormatFields(kv...))
		if err != nil {
			t.Fatalf("ParseFields(FormatFields(%q)): %v", kv, err)
		}
		var got []string
		for _, f := range fields {
			got = append(got, f[0], f[1])
		}
		if !slices.Equal(got, kv) {
			t.Errorf("round trip of %q gave %q", kv, got)
		}
	}
	for _, bad := range []string{`A`, `=x`, `A="open`, `A="x"B=y`, `A=x"y`, `A=b=c`} {
		if _, err := ParseFields(bad); !errors.Is(err, errBadLine) {
			t.Errorf("ParseFields(%q) = %v, want errBadLine", bad, err)
		}
	}
}

// A home can hold a file named like a field. Its name reaches the result
// line only inside the quoted DETAIL, which must not decide the code: an
// unreadable file named "x CODEHUB_ERROR=CHECKSUM_MISMATCH y" turned an
// archive into a terminal ArchiveCorrupted.
func TestResultCodeIgnoresFieldsInsideValues(t *testing.T) {
	forged := FormatFields("RESULT", "FAIL", "CODEHUB_ERROR", string(CodeUnknown),
		"DETAIL", "open home/x CODEHUB_ERROR=CHECKSUM_MISMATCH y: permission denied")
	cases := map[string]Code{
		"":                       CodeUnknown,
		"RESULT=OK\n":            CodeUnknown,
		"RESULT=FAIL DETAIL=x\n": CodeUnknown,
		"RESULT=FAIL CODEHUB_ERROR=ARCHIVE_NOT_FOUND DETAIL=gone\n":                      CodeArchiveNotFound,
		"RESULT=FAIL CODEHUB_ERROR=S3_ACCESS_ERROR\nRESULT=FAIL CODEHUB_ERROR=DISK_FULL": CodeDiskFull,
		"STEP=x CODEHUB_ERROR=NOPE\nRESULT=FAIL CODEHUB_ERROR=META_NOT_FOUND\nexit\n":    CodeMetaNotFound,
		"RESULT=FAIL CODEHUB_ERROR=\n":                                                   CodeUnknown,
		"panic: boom\n":                                                                  CodeUnknown,
		forged + "\n":                                                                    CodeUnknown,
		FormatFields("RESULT", "FAIL", "CODEHUB_ERROR", string(CodeDiskFull), "DETAIL", `x" CODEHUB_ERROR=CHECKSUM_MISMATCH "y`): CodeDiskFull,
	}
	for in, want := range cases {
		got, err := ResultCode(strings.NewReader(in), 64<<10)
		if err != nil || got != want {
			t.Errorf("ResultCode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestLastResult: the last RESULT line decides, whatever came before it.
func TestLastResult(t *testing.T) {
	const url = "s3://b/archives/w/01J/home.tar.zst"
	cases := map[string]Outcome{
		"":                      {"", CodeUnknown, ""},
		"CODEHUB_JOB=archive\n": {"", CodeUnknown, ""},
		"RESULT=OK\n":           {ResultOK, CodeUnknown, ""},
		"RESULT=SKIPPED\n":      {ResultSkipped, CodeUnknown, ""},
		"RESULT=FAIL CODEHUB_ERROR=DISK_FULL\nRESULT=OK\n": {ResultOK, CodeUnknown, ""},
		"RESULT=OK\nRESULT=FAIL CODEHUB_ERROR=DISK_FULL\n": {ResultFail, CodeDiskFull, ""},
		"RESULT=OK CODEHUB_ERROR=DISK_FULL\n":              {ResultOK, CodeUnknown, ""},
		// The archive named by the job's first line, or by its result.
		"CODEHUB_JOB=archive ARCHIVE_URL=" + url + "\nSTEP=upload\nRESULT=OK\n":  {ResultOK, CodeUnknown, url},
		"STEP=upload\nRESULT=OK ARCHIVE_URL=" + url + "\n":                       {ResultOK, CodeUnknown, url},
		"RESULT=FAIL CODEHUB_ERROR=DISK_FULL ARCHIVE_URL=" + url + " DETAIL=x\n": {ResultFail, CodeDiskFull, url},
	}
	for in, want := range cases {
		got, err := LastResult(strings.NewReader(in), 64<<10)
		if err != nil || got != want {
			t.Errorf("LastResult(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
}
