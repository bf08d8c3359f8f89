package proxy

import (
	"encoding/json"
	"html"
	"regexp"
	"strings"
	"testing"
)

// workbenchPage has the shape of code-server's workbench page: its
// construction options as HTML-escaped JSON in a meta tag's attribute.
func workbenchPage(options string) string {
	return "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\" />\n" +
		`<meta id="vscode-workbench-web-configuration" data-settings="` + html.EscapeString(options) + `">` + "\n" +
		`<meta id="vscode-workbench-auth-session" data-settings="">` + "\n</head>\n<body></body>\n</html>\n"
}

var settingsAttr = regexp.MustCompile(`id="vscode-workbench-web-configuration" data-settings="([^"]*)"`)

// options reads the construction options back as the workbench does.
func options(t *testing.T, page string) map[string]any {
	t.Helper()
	m := settingsAttr.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no options in %s", page)
	}
	var opts map[string]any
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &opts); err != nil {
		t.Fatalf("options %s: %v", m[1], err)
	}
	return opts
}

func TestBrandWorkbench(t *testing.T) {
	const script = "/w/01jz0000000000000000000000/_codehub/workbench.js"
	t.Run("title and script", func(t *testing.T) {
		page := workbenchPage(`{"remoteAuthority":"remote","productConfiguration":{"codeServerVersion":"4.100.3"}}`)
		out, ok := brandWorkbench([]byte(page), `my "app" <dev> & ${env:HOME}`, script)
		if !ok {
			t.Fatal("not branded")
		}
		opts := options(t, string(out))
		defaults, _ := opts["configurationDefaults"].(map[string]any)
		if got := defaults["window.title"]; got != `${dirty}${activeEditorShort}${separator}my "app" <dev> & $ {env:HOME}` {
			t.Errorf("window.title %q", got)
		}
		if opts["remoteAuthority"] != "remote" || opts["productConfiguration"].(map[string]any)["codeServerVersion"] != "4.100.3" {
			t.Errorf("other options changed: %v", opts)
		}
		if !strings.Contains(string(out), `<script defer src="`+script+`"></script>`+"\n</head>") {
			t.Errorf("script not at the end of the head:\n%s", out)
		}
		if strings.Count(string(out), "<dev>") != 0 {
			t.Errorf("the name reached the page unescaped:\n%s", out)
		}
	})
	t.Run("the page's own defaults stay", func(t *testing.T) {
		page := workbenchPage(`{"configurationDefaults":{"editor.fontSize":15,"window.title":"theirs"}}`)
		out, ok := brandWorkbench([]byte(page), "mine", script)
		if !ok {
			t.Fatal("not branded")
		}
		defaults := options(t, string(out))["configurationDefaults"].(map[string]any)
		if defaults["window.title"] != "theirs" || defaults["editor.fontSize"] != 15.0 {
			t.Errorf("defaults %v", defaults)
		}
	})
	for name, page := range map[string]string{
		"not a workbench":       "<html><head></head><body>hello</body></html>",
		"options not an object": workbenchPage(`[1,2]`),
		"options not JSON":      workbenchPage(`{"remoteAuthority":`),
		"defaults not a map":    workbenchPage(`{"configurationDefaults":"x"}`),
		"unterminated":          `<meta id="vscode-workbench-web-configuration" data-settings="{}`,
		"no head end":           strings.Replace(workbenchPage(`{}`), "</head>", "", 1),
	} {
		if out, ok := brandWorkbench([]byte(page), "mine", script); ok {
			t.Errorf("%s: branded as\n%s", name, out)
		}
	}
}
