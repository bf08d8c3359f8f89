package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestLeastSkew(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name             string
		sent, received   time.Duration
		remote           time.Duration
		precision, least time.Duration
	}{
		{"same instant", 0, 0, 0, 0, 0},
		{"within the round trip", 0, 200 * time.Millisecond, 100 * time.Millisecond, 0, 0},
		{"truncated to the second", 300 * time.Millisecond, 400 * time.Millisecond, 0, time.Second, 0},
		{"remote ahead", 0, 100 * time.Millisecond, 5 * time.Second, time.Second, 4900 * time.Millisecond},
		{"remote behind", 0, 100 * time.Millisecond, -5 * time.Second, time.Second, -4 * time.Second},
		{"behind by less than the precision", 500 * time.Millisecond, 600 * time.Millisecond, -400 * time.Millisecond, time.Second, 0},
	} {
		got := leastSkew(t0.Add(c.sent), t0.Add(c.received), t0.Add(c.remote), c.precision)
		if got != c.least {
			t.Errorf("%s: %s, want %s", c.name, got, c.least)
		}
	}
}

func TestJudgeClock(t *testing.T) {
	for _, c := range []struct {
		skew   time.Duration
		status Status
		says   string
	}{
		{0, OK, "agrees"},
		{time.Second, OK, "within 2s"},
		{-2 * time.Second, OK, "within 2s"},
		{3 * time.Second, Fail, "at least 3s ahead of"},
		{-10 * time.Minute, Fail, "at least 10m0s behind"},
	} {
		f := judgeClock("nomad", c.skew, 2*time.Second)
		if f.Check != "clock.nomad" || f.Status != c.status || !strings.Contains(f.Detail, c.says) {
			t.Errorf("skew %s: %+v", c.skew, f)
		}
		if (f.Status == Fail) != (f.Fix != "" && f.Doc != "") {
			t.Errorf("skew %s: a failure says what to change and where, nothing else does: %+v", c.skew, f)
		}
	}
}

func TestWrite(t *testing.T) {
	fs := []Finding{
		{Check: "redis", Status: OK, Detail: "Redis 7"},
		{Check: "nomad.acls", Status: Warn, Detail: "not enforced", Fix: "enable ACLs", Doc: DocACLs},
		{Check: "s3", Status: Fail, Detail: "AccessDenied", Fix: "fix the keys", Doc: DocDeployment},
		{Check: "clock.s3", Status: Skip, Detail: "S3 did not answer"},
	}
	var text bytes.Buffer
	if err := WriteText(&text, fs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OK    redis", "FAIL  s3", "- nomad.acls: enable ACLs (" + DocACLs + ")", "- s3: fix the keys", "4 checks: 1 failed, 1 warnings"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, fs); err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK       bool
		Findings []Finding
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || got.OK || len(got.Findings) != 4 || got.Findings[2] != fs[2] {
		t.Errorf("json: %+v, %v\n%s", got, err, js.String())
	}
	if !Failed(fs) || Failed(fs[:2]) {
		t.Error("Failed counts only failures")
	}
}

// Every section a finding points at exists in the docs, under the anchor
// GitHub gives its heading.
func TestDocAnchors(t *testing.T) {
	anchors := map[string]map[string]bool{}
	heading := regexp.MustCompile(`(?m)^#+ (.+)$`)
	for _, doc := range []string{DocACLs, DocPolicy, DocRequired, DocDeployment, DocTLS, DocDoctor} {
		file, anchor, _ := strings.Cut(doc, "#")
		if anchors[file] == nil {
			body, err := os.ReadFile("../" + file)
			if err != nil {
				t.Fatal(err)
			}
			anchors[file] = map[string]bool{}
			for _, m := range heading.FindAllStringSubmatch(string(body), -1) {
				anchors[file][slug(m[1])] = true
			}
		}
		if !anchors[file][anchor] {
			t.Errorf("%s: no heading with anchor %q", file, anchor)
		}
	}
}

// slug is GitHub's anchor of a heading: lower case, punctuation but
// hyphens and underscores dropped, spaces to hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
