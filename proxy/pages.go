package proxy

import (
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"
)

// Error codes of the proxy's JSON answers (docs/api.md).
const (
	CodeUnauthenticated     = "UNAUTHENTICATED"
	CodeForbidden           = "FORBIDDEN"
	CodeNotFound            = "NOT_FOUND"
	CodeStarting            = "STARTING"
	CodeArchived            = "ARCHIVED"
	CodeNotStarted          = "NOT_STARTED"
	CodeNotRunning          = "NOT_RUNNING"
	CodeUnavailable         = "UNAVAILABLE"
	CodeWorkspaceError      = "WORKSPACE_ERROR"
	CodeLimitExceeded       = "LIMIT_EXCEEDED"
	CodeUpstreamUnavailable = "UPSTREAM_UNAVAILABLE"
	CodeInternal            = "INTERNAL"
)

// startAction is the form field the archived and not-started pages post to
// ask for the workspace to be started.
const startAction = "codehub_action"

// page is what a status page shows.
type page struct {
	Status  int
	Code    string
	Title   string
	Message string
	// Detail is a second, smaller line (an error reason, the phase).
	Detail string
	// Poll makes the page ask again every two seconds and reload once the
	// answer is no longer "starting".
	Poll bool
	// StartButton offers a form that posts startAction to this URL.
	StartButton string
	// Failure is the failed attempt of a start the engine retries.
	Failure *startFailure
	Running []runningLink
	// SignIn, when set, offers a login on this host at that address.
	SignIn    string
	Dashboard string
}

type runningLink struct {
	Name string
	URL  string
	// StopURL asks the dashboard to stop the workspace (see limitPage).
	StopURL string
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · CodeHub</title>
<style>
body{font-family:system-ui,-apple-system,sans-serif;background:#f6f7f9;color:#1d2330;margin:0;display:flex;min-height:100vh;align-items:center;justify-content:center;padding:1rem;box-sizing:border-box}
main{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:2rem 2.5rem;max-width:32rem;width:100%;box-sizing:border-box;overflow-wrap:anywhere}
@media (max-width:480px){main{padding:1.25rem}}
h1{font-size:1.3rem;margin:0 0 .75rem} p{line-height:1.5} .detail{color:#5b6474;font-size:.9rem}
button,.button{font:inherit;padding:.5rem 1.2rem;border-radius:6px;border:1px solid #2f6fde;background:#2f6fde;color:#fff;cursor:pointer;text-decoration:none;display:inline-block}
.button.quiet{background:#fff;color:#1d2330;border-color:#c9d0db;padding:.25rem .8rem;font-size:.9rem}
a{color:#2f6fde} .running{list-style:none;padding:0;margin:1rem 0}
.running li{display:flex;align-items:center;justify-content:space-between;gap:.75rem;padding:.5rem 0;border-top:1px solid #eceef2}
.failure{background:#fbe9e7;color:#6b1812;border-radius:6px;padding:.75rem 1rem;margin:0 0 1rem}
.failure p{margin:.25rem 0}
.spinner{display:inline-block;width:1rem;height:1rem;border:2px solid #c9d2e0;border-top-color:#2f6fde;border-radius:50%;animation:spin 1s linear infinite;vertical-align:middle;margin-right:.5rem}
@keyframes spin{to{transform:rotate(360deg)}}
</style></head><body><main>
<h1>{{if .Poll}}<span class="spinner"></span>{{end}}{{.Title}}</h1>
{{with .Failure}}<div class="failure" role="alert">
<p><strong>Attempt {{.Attempt}} of {{.Of}} failed{{.Step}}: {{.Reason}}</strong></p>
{{if .Message}}<p>{{.Message}}</p>{{end}}
<p>{{if .Next}}Next attempt at <time datetime="{{.Next.UTC.Format "2006-01-02T15:04:05Z07:00"}}">{{.Next.UTC.Format "15:04:05"}} UTC</time>.{{else}}Trying again shortly.{{end}}</p>
</div>{{else}}<p id="message">{{.Message}}</p>{{end}}
{{if .Detail}}<p class="detail">{{.Detail}}</p>{{end}}
{{if .Running}}<ul class="running">{{range .Running}}<li><a href="{{.URL}}">{{.Name}}</a><a class="button quiet" href="{{.StopURL}}">Stop…</a></li>{{end}}</ul>{{end}}
{{if .SignIn}}<p>Is it yours? <a href="{{.SignIn}}">Log in</a> to start it.</p>{{end}}
{{if .StartButton}}<form method="post"><input type="hidden" name="` + startAction + `" value="start"><button type="submit">{{.StartButton}}</button></form>{{end}}
<p><a href="{{.Dashboard}}">Back to the dashboard</a></p>
</main>
{{if .Poll}}<script>
(function(){
  const shown = {{.Message}};
  for (const t of document.querySelectorAll("time[datetime]")) t.textContent = new Date(t.dateTime).toLocaleTimeString();
  async function poll(){
    try{
      const r = await fetch(location.href,{headers:{Accept:"application/json"},credentials:"same-origin",cache:"no-store"});
      if(r.status===503){
        const body = await r.json().catch(()=>null);
        // The same message means nothing changed; another one is a new
        // step or a failure, which the page shows in full.
        if(body && body.error && body.error.code==="` + CodeStarting + `" && body.error.message===shown){
          setTimeout(poll,2000); return;
        }
      }
      location.reload();
    }catch(e){ setTimeout(poll,2000); }
  }
  setTimeout(poll,2000);
})();
</script>{{end}}
</body></html>
`))

// render answers with the page as HTML to browsers and as the JSON error
// envelope to every other client.
func render(w http.ResponseWriter, r *http.Request, p page) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusServiceUnavailable || p.Status == http.StatusTooManyRequests {
		h.Set("Retry-After", strconv.Itoa(2))
	}
	if wantsHTML(r) {
		h.Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(p.Status)
		if r.Method != http.MethodHead {
			_ = pageTemplate.Execute(w, p)
		}
		return
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": p.Code, "message": p.Message}})
}
