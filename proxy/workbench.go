package proxy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"html"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

// The proxy answers these paths of every workspace itself; the program
// never sees them (HandoffPath is one of them).
const (
	ownPrefix = "/_codehub/"
	// noticeScriptPath is the script the proxy adds to a VS Code
	// workbench: it shows why the workspace went away (see noticeFor).
	noticeScriptPath = "/_codehub/workbench.js"
	// statusPath answers noticeFor's notice as JSON.
	statusPath = "/_codehub/status"
)

//go:embed workbench.js
var noticeScript []byte

// maxWorkbenchPage bounds the page read into memory to brand it; a larger
// one passes through as it is.
const maxWorkbenchPage = 1 << 20

// workbenchConfig opens the attribute in which a VS Code workbench page
// carries its construction options as HTML-escaped JSON.
var workbenchConfig = []byte(`id="vscode-workbench-web-configuration" data-settings="`)

// brandWorkbench adds what CodeHub shows in a VS Code workbench page: the
// workspace's name as the default window title (configurationDefaults,
// which the user's and the folder's own settings still override, so it
// works for every backend without writing into the home), and the script
// at scriptURL that tells the user why the workspace went away. It
// reports false, and page is to be served as it is, when page is not a
// workbench or its options are not the JSON object they should be.
func brandWorkbench(page []byte, name, scriptURL string) ([]byte, bool) {
	at := bytes.Index(page, workbenchConfig)
	if at < 0 {
		return nil, false
	}
	start := at + len(workbenchConfig)
	end := bytes.IndexByte(page[start:], '"')
	if end < 0 {
		return nil, false
	}
	end += start
	head := bytes.Index(page[end:], []byte("</head>"))
	if head < 0 {
		return nil, false
	}
	head += end
	var opts map[string]json.RawMessage
	if err := json.Unmarshal([]byte(html.UnescapeString(string(page[start:end]))), &opts); err != nil || opts == nil {
		return nil, false
	}
	defaults := map[string]any{}
	if raw, ok := opts["configurationDefaults"]; ok {
		if err := json.Unmarshal(raw, &defaults); err != nil || defaults == nil {
			return nil, false
		}
	}
	if _, set := defaults["window.title"]; !set && name != "" {
		defaults["window.title"] = windowTitle(name)
	}
	raw, err := json.Marshal(defaults)
	if err != nil {
		return nil, false
	}
	opts["configurationDefaults"] = raw
	settings, err := json.Marshal(opts)
	if err != nil {
		return nil, false
	}
	script := `<script defer src="` + html.EscapeString(scriptURL) + `"></script>` + "\n"
	out := make([]byte, 0, len(page)+len(settings)/4+len(script))
	out = append(out, page[:start]...)
	out = append(out, html.EscapeString(string(settings))...)
	out = append(out, page[end:head]...)
	out = append(out, script...)
	return append(out, page[head:]...), true
}

// windowTitle is VS Code's window.title with the workspace's name where
// the folder's would be: the home's folder is named after its volume,
// which means nothing to the user, and code-server's --app-name does not
// reach the title.
func windowTitle(name string) string {
	// "${" in a name would read as a variable of VS Code's.
	name = strings.ReplaceAll(name, "${", "$ {")
	return "${dirty}${activeEditorShort}${separator}" + name
}

// isWorkbenchLoad reports a request that may load a workbench page: a
// person opening a page of the workspace.
func isWorkbenchLoad(r *http.Request) bool {
	return r.Method == http.MethodGet && isNavigation(r)
}

// brandResponse brands the workbench page in res, the answer to a
// workbench load sent without Accept-Encoding. Anything else (an error,
// another type, a compressed or oversized body) is left as it came.
func brandResponse(res *http.Response, t target) error {
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Encoding") != "" {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(res.Header.Get("Content-Type")); err != nil || mt != "text/html" {
		return nil
	}
	page, err := io.ReadAll(io.LimitReader(res.Body, maxWorkbenchPage+1))
	if err != nil {
		return err
	}
	if len(page) > maxWorkbenchPage {
		res.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(page), res.Body), res.Body}
		return nil
	}
	_ = res.Body.Close()
	if branded, ok := brandWorkbench(page, t.name, t.prefix+noticeScriptPath); ok {
		page = branded
	}
	res.Body = io.NopCloser(bytes.NewReader(page))
	res.ContentLength = int64(len(page))
	res.Header.Set("Content-Length", strconv.Itoa(len(page)))
	res.Header.Del("Transfer-Encoding")
	return nil
}

// notice is what the workbench script shows: nothing while the workspace
// runs, else why it went away and what a reload does.
type notice struct {
	Running bool   `json:"running"`
	Title   string `json:"title,omitempty"`
	Message string `json:"message,omitempty"`
}

// noticeFor says, from the stored row, whether the workbench of ws still
// has its workspace and, if not, why: who stopped or archived it and
// when, a move, a node that is away, a failure, a deletion.
func noticeFor(ws workspace.Workspace, v verdict, now time.Time) notice {
	if v == verdictGone {
		return notice{Title: "Deleted", Message: "This workspace was deleted."}
	}
	if ws.Phase == workspace.PhaseRunning && ws.DesiredState == workspace.DesiredRunning && ws.Operation == workspace.OpNone {
		return notice{Running: true}
	}
	if move, ok := workspace.Moving(ws); ok {
		return notice{Title: "Moving to another machine", Message: "This workspace is moving to another machine (" + move + "). Reload the window to open it there."}
	}
	if msg, away := workspace.Unavailable(ws); away {
		return notice{Title: "Unavailable", Message: "This workspace's files are on a machine that cannot serve them right now (" + msg + "). Nothing is lost."}
	}
	switch {
	case v == verdictError:
		reason := "unknown"
		if ws.ErrorReason != nil {
			reason = *ws.ErrorReason
		}
		return notice{Title: "Failed", Message: "This workspace failed (" + reason + "). Reload the window for details."}
	case ws.DesiredState == workspace.DesiredArchived || v == verdictArchived:
		return notice{Title: "Archived", Message: "This workspace was archived. " + stoppedWords(ws, now) + " Reload the window to restore it."}
	case ws.DesiredState == workspace.DesiredStandby:
		return notice{Title: "Stopped", Message: "This workspace was stopped. " + stoppedWords(ws, now) + " Reload the window to start it again."}
	}
	// Wanted running but not up: a new run, which this window's session
	// is not part of.
	return notice{Title: "Restarting", Message: "This workspace is starting again; the session of this window has ended. Reload the window to open it."}
}

// own answers the paths under ownPrefix for the user the request was
// authenticated as.
func (p *Proxy) own(w *responseRecorder, r *http.Request, t target) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		p.notFound(w, r)
		return
	}
	switch t.path {
	case noticeScriptPath:
		h := w.Header()
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Length", strconv.Itoa(len(noticeScript)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(noticeScript)
		}
	case statusPath:
		ws, err := p.lookup(r.Context(), t.id)
		v := verdictGone
		switch {
		case errors.Is(err, workspace.ErrNotFound):
		case err != nil:
			p.internal(w, r, "get workspace", err)
			return
		case ws.OwnerID != t.user:
			p.forbidden(w, r)
			return
		default:
			v = decideFor(ws, false)
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(noticeFor(ws, v, time.Now()))
		}
	default:
		p.notFound(w, r)
	}
}
