package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
)

const configSSHUsage = `usage: codehub config-ssh [-ssh-config FILE]

Write a block to ~/.ssh/config (or FILE) with one "Host codehub.NAME" per
workspace of yours, so that plain OpenSSH and what uses it (scp, sftp,
rsync, git, VS Code Remote-SSH, JetBrains Gateway) reach them:

    ssh codehub.NAME

Each entry goes through "codehub ssh -stdio" and pins the workspace's
host key in a known_hosts file codehub keeps beside its credentials, so
there is no prompt to trust a new host. Run it again after you create,
rename or delete workspaces: it replaces its own block, between its
markers, and leaves the rest of the file as it was.
`

// The markers around the block config-ssh owns.
const (
	sshBlockStart = "# --- START CODEHUB: written by codehub config-ssh; changes inside are replaced ---"
	sshBlockEnd   = "# --- END CODEHUB ---"
)

// sshHost is one workspace's entry.
type sshHost struct {
	name, id, hostKey string
}

func runConfigSSH(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("config-ssh", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, configSSHUsage) }
	configPath := fs.String("ssh-config", "", "the OpenSSH client configuration to write (default ~/.ssh/config)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprint(stderr, configSSHUsage)
		return exitUsage
	}
	u, stop := newUserCLI(stdin, stdout, stderr)
	defer stop()
	if err := u.configSSH(*configPath); err != nil {
		fmt.Fprintf(stderr, "codehub config-ssh: %v\n", err)
		return exitStatus(err)
	}
	return exitOK
}

func (u *userCLI) configSSH(configPath string) error {
	if configPath == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return err
		}
		configPath = filepath.Join(home, ".ssh", "config")
	}
	creds, err := loadCredentials()
	if err != nil {
		return err
	}
	c := newClient(creds)
	all, err := u.listAll(c)
	if err != nil {
		return err
	}
	var hosts []sshHost
	for _, raw := range all {
		var ws wsInfo
		if err := decodeAnswer(raw, &ws); err != nil {
			return err
		}
		key, err := hostKey(u.ctx, c, ws.ID)
		if err != nil {
			return fmt.Errorf("host key of %s: %w", ws.Name, err)
		}
		hosts = append(hosts, sshHost{name: ws.Name, id: ws.ID, hostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))})
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	credPath, err := credentialsPath()
	if err != nil {
		return err
	}
	knownHosts := filepath.Join(filepath.Dir(credPath), "known_hosts")
	if err := os.MkdirAll(filepath.Dir(knownHosts), 0o700); err != nil {
		return err
	}
	if err := writeFileAtomic(knownHosts, []byte(knownHostsText(hosts)), 0o600); err != nil {
		return err
	}
	old, err := os.ReadFile(configPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	updated, err := replaceSSHBlock(old, sshBlock(hosts, self, knownHosts))
	if err != nil {
		return fmt.Errorf("%s: %w", configPath, err)
	}
	if err := os.MkdirAll(filepath.Dir(configPath), 0o700); err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if st, err := os.Stat(configPath); err == nil {
		mode = st.Mode().Perm()
	}
	if err := writeFileAtomic(configPath, updated, mode); err != nil {
		return err
	}
	fmt.Fprintf(u.stdout, "%s: %d workspace(s): ", configPath, len(hosts))
	for i, h := range hosts {
		if i > 0 {
			fmt.Fprint(u.stdout, ", ")
		}
		fmt.Fprint(u.stdout, "codehub."+h.name)
	}
	fmt.Fprintln(u.stdout)
	return nil
}

// knownHostsText pins each workspace's key under its alias, which is its
// id: a rename keeps the key's entry valid.
func knownHostsText(hosts []sshHost) string {
	var b strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&b, "codehub.%s %s\n", h.id, h.hostKey)
	}
	return b.String()
}

// sshBlock is the configuration between the markers.
func sshBlock(hosts []sshHost, self, knownHosts string) string {
	var b strings.Builder
	b.WriteString(sshBlockStart + "\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "Host codehub.%s\n", h.name)
		fmt.Fprintf(&b, "  ProxyCommand %s ssh --stdio %s\n", sshQuote(self), h.id)
		fmt.Fprintf(&b, "  HostKeyAlias codehub.%s\n", h.id)
		fmt.Fprintf(&b, "  UserKnownHostsFile %s\n", sshQuote(knownHosts))
		b.WriteString("  StrictHostKeyChecking yes\n")
		b.WriteString("  User codehub\n")
	}
	b.WriteString(sshBlockEnd + "\n")
	return b.String()
}

// sshQuote quotes a path for ssh_config, which splits on spaces.
func sshQuote(s string) string {
	if !strings.ContainsAny(s, " \t\"") {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

var errBrokenBlock = errors.New("its codehub block has a start marker without an end marker (or the other way round); fix or remove it by hand")

// replaceSSHBlock puts block in place of the existing one, or at the end;
// the rest of the file stays byte for byte.
func replaceSSHBlock(old []byte, block string) ([]byte, error) {
	start := bytes.Index(old, []byte(sshBlockStart))
	end := bytes.Index(old, []byte(sshBlockEnd))
	switch {
	case start < 0 && end < 0:
		out := append([]byte(nil), old...)
		if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n")) {
			out = append(out, '\n')
		}
		if len(out) > 0 {
			out = append(out, '\n')
		}
		return append(out, block...), nil
	case start < 0, end < 0, end < start:
		return nil, errBrokenBlock
	}
	end += len(sshBlockEnd)
	if end < len(old) && old[end] == '\n' {
		end++
	}
	out := append([]byte(nil), old[:start]...)
	out = append(out, block...)
	return append(out, old[end:]...), nil
}

// writeFileAtomic replaces path whole: a crash leaves the old file or the
// new one.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
