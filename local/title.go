package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// machineSettings is where code-server keeps its remote ("Machine")
// settings, under the user-data-dir codeServerArgs gives it. They apply
// over the user's own settings and under the folder's.
const machineSettings = ".local/share/code-server/Machine/settings.json"

// windowTitle is VS Code's window.title with the workspace's name where
// the folder's would be: the home's folder name is the volume's, which
// means nothing to the user, and code-server's --app-name does not reach
// the title.
func windowTitle(name string) string {
	// "${" in a name would read as a variable of VS Code's.
	name = strings.ReplaceAll(name, "${", "$ {")
	return "${dirty}${activeEditorShort}${separator}" + name
}

// brandWindow sets window.title in the home's machine settings, keeping
// every other setting there. The home belongs to the workspace's user, so
// every path is resolved inside it (a symlink cannot lead the write
// elsewhere), and what it creates is given to owner (nil: codehub's own
// user). Settings it cannot read as JSON (a user's hand-edited file with
// comments) are left alone.
func brandWindow(home, name string, owner *account) error {
	root, err := os.OpenRoot(home)
	if err != nil {
		return err
	}
	defer root.Close()
	settings := map[string]any{}
	raw, err := root.ReadFile(machineSettings)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(raw, &settings); err != nil || settings == nil {
			return fmt.Errorf("machine settings %s are not plain JSON; window title not set", machineSettings)
		}
	}
	title := windowTitle(name)
	if settings["window.title"] == title {
		return nil
	}
	settings["window.title"] = title
	out, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return err
	}
	dir := path.Dir(machineSettings)
	if err := root.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := machineSettings + ".codehub"
	if err := root.WriteFile(tmp, append(out, '\n'), 0o600); err != nil {
		return err
	}
	if owner != nil {
		for p := dir; p != "."; p = path.Dir(p) {
			if err := root.Lchown(p, owner.uid, owner.gid); err != nil {
				return err
			}
		}
		if err := root.Lchown(tmp, owner.uid, owner.gid); err != nil {
			return err
		}
	}
	return root.Rename(tmp, machineSettings)
}

// emptyDir reports whether dir has no entries (or cannot be read, when
// leaving it alone is the safe answer).
func emptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return true
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}
