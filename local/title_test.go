package local

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func readSettings(t *testing.T, home string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(home, machineSettings))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("settings %s: %v", raw, err)
	}
	return m
}

func TestBrandWindow(t *testing.T) {
	t.Run("a new home", func(t *testing.T) {
		home := t.TempDir()
		if err := brandWindow(home, "my project", nil); err != nil {
			t.Fatal(err)
		}
		if got := readSettings(t, home)["window.title"]; got != "${dirty}${activeEditorShort}${separator}my project" {
			t.Fatalf("title %q", got)
		}
	})
	t.Run("other settings are kept and a rename is followed", func(t *testing.T) {
		home := t.TempDir()
		path := filepath.Join(home, machineSettings)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(`{"editor.fontSize": 15, "window.title": "old"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := brandWindow(home, "renamed", nil); err != nil {
			t.Fatal(err)
		}
		m := readSettings(t, home)
		if m["editor.fontSize"] != 15.0 || m["window.title"] != "${dirty}${activeEditorShort}${separator}renamed" {
			t.Fatalf("settings %v", m)
		}
	})
	t.Run("a name cannot pose as a variable", func(t *testing.T) {
		home := t.TempDir()
		if err := brandWindow(home, "a${rootPath}", nil); err != nil {
			t.Fatal(err)
		}
		if got := readSettings(t, home)["window.title"]; got != "${dirty}${activeEditorShort}${separator}a$ {rootPath}" {
			t.Fatalf("title %q", got)
		}
	})
	t.Run("settings with comments are left alone", func(t *testing.T) {
		home := t.TempDir()
		path := filepath.Join(home, machineSettings)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		const jsonc = "{\n  // mine\n  \"editor.fontSize\": 15\n}\n"
		if err := os.WriteFile(path, []byte(jsonc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := brandWindow(home, "x", nil); err == nil {
			t.Fatal("hand-edited settings overwritten without an error")
		}
		if raw, _ := os.ReadFile(path); string(raw) != jsonc {
			t.Fatalf("settings changed: %s", raw)
		}
	})
	t.Run("a symlink out of the home is not followed", func(t *testing.T) {
		home, elsewhere := t.TempDir(), t.TempDir()
		if err := os.MkdirAll(filepath.Join(home, ".local", "share", "code-server"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, filepath.Join(home, ".local", "share", "code-server", "Machine")); err != nil {
			t.Fatal(err)
		}
		if err := brandWindow(home, "x", nil); err == nil {
			t.Fatal("wrote through a symlink that leaves the home")
		}
		if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
			t.Fatalf("wrote outside the home: %v", entries)
		}
	})
}
