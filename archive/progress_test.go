package archive

import (
	"strings"
	"testing"
)

func TestLastProgress(t *testing.T) {
	cases := []struct {
		name string
		log  string
		want Progress
		ok   bool
	}{
		{"nothing yet", "", Progress{}, false},
		{"only the check", "STEP=check RESULT=OK\n", Progress{}, false},
		{"sizing the home", "STEP=check RESULT=OK\nSTEP=upload BYTES_IN=10 BYTES_OUT=3 MBPS=0.0 ELAPSED=2s\n",
			Progress{Step: "upload", Done: 10, Total: -1}, true},
		{"running", "STEP=upload BYTES_IN=10 BYTES_OUT=3 MBPS=0.0 ELAPSED=2s\nSTEP=upload BYTES_IN=50 BYTES_OUT=9 MBPS=0.0 ELAPSED=4s TOTAL=200\n",
			Progress{Step: "upload", Done: 50, Total: 200}, true},
		{"finished", "STEP=download BYTES_IN=200 BYTES_OUT=900 MBPS=1.0 ELAPSED=4s TOTAL=200 RESULT=OK\nSTEP=swap RESULT=OK\n",
			Progress{Step: "download", Done: 200, Total: 200, Result: "OK"}, true},
		{"other output between", "STEP=upload BYTES_IN=5 TOTAL=10\npanic: something\n\tat line\n",
			Progress{Step: "upload", Done: 5, Total: 10}, true},
		{"a damaged line is passed over", "STEP=upload BYTES_IN=5 TOTAL=10\nSTEP=upload BYTES_IN=-3 TOTAL=10\nSTEP=upload BYTES_IN=x\n",
			Progress{Step: "upload", Done: 5, Total: 10}, true},
	}
	for _, tc := range cases {
		got, ok, err := LastProgress(strings.NewReader(tc.log), ResultTail)
		if err != nil || ok != tc.ok || got != tc.want {
			t.Errorf("%s: %+v, %v, %v; want %+v, %v", tc.name, got, ok, err, tc.want, tc.ok)
		}
	}
}

func TestProgressPercent(t *testing.T) {
	for _, tc := range []struct {
		p    Progress
		want int
	}{
		{Progress{Done: 5, Total: -1}, -1},
		{Progress{Done: 0, Total: 0}, 100},
		{Progress{Done: 1, Total: 3}, 33},
		{Progress{Done: 3, Total: 3}, 100},
		// Files that grew while archiving.
		{Progress{Done: 4, Total: 3}, 100},
	} {
		if got := tc.p.Percent(); got != tc.want {
			t.Errorf("%+v: %d%%, want %d%%", tc.p, got, tc.want)
		}
	}
}
