package archive

import "testing"

// TestKeys holds the archive keys to what the rest reads from them: the
// op that made an archive, and the commit a prebuilt home names.
func TestKeys(t *testing.T) {
	const (
		ws     = "01jz0000000000000000000000"
		op     = "01jz0000000000000000000001"
		commit = "0123456789abcdef0123456789abcdef01234567"
	)
	prebuilt := PrebuildKey(PrebuildPrefix(ws, op, "node", "v1a2"), commit)
	if want := "archives/" + ws + "/" + op + "/node/v1a2/" + commit + "/home.tar.zst"; prebuilt != want {
		t.Fatalf("PrebuildKey = %q, want %q", prebuilt, want)
	}
	prefix := PrebuildPrefix(ws, op, "node", "v1a2")
	if !PrebuiltUnder(prebuilt, prefix) || PrebuiltUnder(prebuilt, PrebuildPrefix(ws, op, "node", "v1")) || PrebuiltUnder(Key(ws, op), prefix) {
		t.Errorf("PrebuiltUnder: a prebuilt home's key is under its own prefix only")
	}
	cases := []struct {
		key    string
		op     string
		commit string
	}{
		{Key(ws, op), op, ""},
		{prebuilt, op, commit},
		{PrebuildKey(PrebuildPrefix(ws, op, "node", "v1"), commit+"0123456789abcdef01234567"), op, commit + "0123456789abcdef01234567"},
		{PrebuildKey(PrebuildPrefix(ws, op, "node", "v1"), "main"), "", ""},
		{PrebuildKey(PrebuildPrefix(ws, op, "node", "v1"), "0123456789ABCDEF0123456789ABCDEF01234567"), "", ""},
		{"archives/" + ws + "/" + op + "/other.tar", "", ""},
		{"archives/" + ws + "/" + op + "/a/home.tar.zst", "", ""},
		{"elsewhere/" + ws + "/" + op + "/home.tar.zst", "", ""},
		{"home.tar.zst", "", ""},
		{"", "", ""},
	}
	for _, c := range cases {
		if got := OpID(c.key); got != c.op {
			t.Errorf("OpID(%q) = %q, want %q", c.key, got, c.op)
		}
		got, ok := PrebuildCommit(c.key)
		if got != c.commit || ok != (c.commit != "") {
			t.Errorf("PrebuildCommit(%q) = %q, %v, want %q", c.key, got, ok, c.commit)
		}
		if c.op != "" && !OwnedBy(c.key, ws) {
			t.Errorf("OwnedBy(%q) = false", c.key)
		}
	}
}
