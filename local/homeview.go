package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// homeRoot is where a workspace program finds its home: /home/{name} in a
// mount namespace of its own. VS Code names the opened folder after its
// last path element and puts the whole path in the workbench's address, so
// the home's place in the data dir (ws-{id}-home under the operator's
// layout) would be what the user sees; /home/{name} is what a home is
// called on any Linux machine and reveals nothing of the host.
const homeRoot = "/home"

// homeViewScript runs first in the new mount namespace: $1 is the folder
// name, $2 the home's host path, the rest the program. It mounts an empty,
// read-only tmpfs over /home, binds every entry the host has there back in
// place (the program, codehub's checkout or the data dir itself may live
// under /home), binds the home at /home/$1 and starts the program there,
// with no OLDPWD that would name the host path. The home and the host's
// /home are opened before the tmpfs hides them and reached through those
// descriptors, which still point below it.
const homeViewScript = `name=$1 home=$2
shift 2
exec 3<"$home" 4</home
mount -t tmpfs -o mode=0755 codehub-home /home || exit 1
for entry in /proc/self/fd/4/* /proc/self/fd/4/.[!.]* /proc/self/fd/4/..?*; do
  { [ -e "$entry" ] || [ -L "$entry" ]; } || continue
  e=${entry##*/}
  [ "$e" = "$name" ] && continue
  if [ -d "$entry" ]; then mkdir "/home/$e"; else : >"/home/$e"; fi
  mount --no-canonicalize --rbind "$entry" "/home/$e" || echo "codehub: /home/$e stays hidden from the workspace" >&2
done
mkdir "/home/$name" || exit 1
mount --no-canonicalize --bind /proc/self/fd/3 "/home/$name" || exit 1
mount -o remount,ro,bind /home || exit 1
exec 3<&- 4<&-
cd "/home/$name" || exit 1
unset OLDPWD
exec "$@"`

// homeView runs workspace programs in a mount namespace that shows their
// home at homeRoot/{name}. As root, a mount namespace is enough. Otherwise
// an unprivileged user namespace grants the mounts, and a second one,
// nested in it, maps codehub's uid and gid back, so the program runs as
// codehub's user, as it would without the view, not as the namespace's root.
type homeView struct {
	unshare string
	// unprivileged is set when codehub is not root; uid and gid are then
	// its own.
	unprivileged bool
	uid, gid     int
}

// wrap returns the program line that runs program with the home, at host
// path home, shown as homeRoot/folder.
func (v *homeView) wrap(folder, home, program string, args []string) (string, []string) {
	line := []string{"--mount", "--propagation", "private"}
	if v.unprivileged {
		line = append([]string{"--user", "--map-root-user"}, line...)
	}
	line = append(line, "--", "/bin/sh", "-c", homeViewScript, "sh", folder, home)
	if v.unprivileged {
		line = append(line, v.unshare, "--user",
			"--map-user="+strconv.Itoa(v.uid), "--map-group="+strconv.Itoa(v.gid), "--")
	}
	line = append(line, program)
	return v.unshare, append(line, args...)
}

// newHomeView tries the view once with a scratch home in scratchDir. A
// machine where it fails (no unshare, a container without the right to
// mount, user namespaces disabled) keeps the host path; the error says why.
func newHomeView(ctx context.Context, scratchDir string) (*homeView, error) {
	unshare, err := execLookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("unshare (util-linux): %w", err)
	}
	v := &homeView{unshare: unshare}
	if euid := os.Geteuid(); euid != 0 {
		v.unprivileged, v.uid, v.gid = true, euid, os.Getegid()
	}
	home, err := os.MkdirTemp(scratchDir, "home-view-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(home)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	program, args := v.wrap("probe", home, "/bin/sh", []string{"-c", `[ "$PWD" = /home/probe ]`})
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Dir = home
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", program, err, strings.TrimSpace(string(out)))
	}
	return v, nil
}

// homeFolder is the folder name a workspace's home gets in its view: the
// workspace's name made a single, visible path element, or, when the
// host's /home already has an entry of that name (the view would have to
// hide it, and the program may live there), the name with the workspace
// id. Names are checked by the API, but this never trusts them.
func homeFolder(name, wsID string, taken func(string) bool) string {
	folder := pathElement(name)
	if taken(folder) {
		// Shortened so the id, which makes it unique, is kept whole.
		folder = pathElement(folder[:min(len(folder), maxElement-1-len(wsID))] + "-" + wsID)
	}
	return folder
}

// maxElement bounds a folder name, as the API bounds a workspace name.
const maxElement = 63

// pathElement turns a name into one path element: every byte but letters,
// digits, '-', '_' and '.' becomes '-', leading dots and dashes go (no
// hidden folder, no "..", nothing a program reads as an option), and it
// keeps at most 63 bytes. Nothing left makes "workspace".
func pathElement(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
			b.WriteByte(c)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.TrimLeft(b.String(), ".-")
	if len(s) > maxElement {
		s = s[:maxElement]
	}
	if s == "" {
		return "workspace"
	}
	return s
}

// hostHomeTaken reports whether the host's /home has an entry named folder.
func hostHomeTaken(folder string) bool {
	_, err := os.Lstat(filepath.Join(homeRoot, folder))
	return !errors.Is(err, os.ErrNotExist)
}

// programHome is the home a workspace program sees: homeRoot/{folder} in
// its view, the host path without one.
func (b *Backend) programHome(name, wsID, home string) string {
	if b.view == nil {
		return home
	}
	return path.Join(homeRoot, homeFolder(name, wsID, hostHomeTaken))
}
