package main

import (
	"errors"
	"strings"
	"testing"
)

func TestReplaceSSHBlock(t *testing.T) {
	block := sshBlock([]sshHost{{name: "dev", id: "01jb3x7k9q2m5n8p4r6s0t1v2w", hostKey: "ssh-ed25519 AAAA"}}, "/usr/bin/codehub", "/home/me/.config/codehub/known_hosts")
	other := sshBlock(nil, "/usr/bin/codehub", "/k")
	mine := "Host example\n  User me\n"
	cases := []struct {
		name, old, want string
	}{
		{"empty file", "", block},
		{"appended after the user's lines", mine, mine + "\n" + block},
		{"a missing final newline is added", strings.TrimSuffix(mine, "\n"), mine + "\n" + block},
		{"replaced in place", mine + other + "Host after\n", mine + block + "Host after\n"},
		{"again is the same", mine + "\n" + block, mine + "\n" + block},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := replaceSSHBlock([]byte(c.old), block)
			if err != nil || string(got) != c.want {
				t.Fatalf("got %v\n%s\nwant\n%s", err, got, c.want)
			}
		})
	}
	for _, broken := range []string{sshBlockStart + "\n", mine + sshBlockEnd + "\n", sshBlockEnd + "\n" + sshBlockStart + "\n"} {
		if _, err := replaceSSHBlock([]byte(broken), block); !errors.Is(err, errBrokenBlock) {
			t.Errorf("%q: %v, want errBrokenBlock", broken, err)
		}
	}
	if !strings.Contains(block, "ProxyCommand /usr/bin/codehub ssh --stdio 01jb3x7k9q2m5n8p4r6s0t1v2w\n") ||
		!strings.Contains(block, "HostKeyAlias codehub.01jb3x7k9q2m5n8p4r6s0t1v2w\n") {
		t.Fatalf("block:\n%s", block)
	}
	if got := sshQuote("/a b/codehub"); got != `"/a b/codehub"` {
		t.Fatalf("sshQuote = %s", got)
	}
}
