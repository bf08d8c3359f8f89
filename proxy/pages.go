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
	Running     []runningLink
	Dashboard   string
}

type runningLink struct {
	Name string
	URL  string
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · CodeHub</title>
<style>
body{font-family:system-ui,-apple-system,sans-serif;background:#f6f7f9;color:#1d2330;margin:0;display:flex;min-height:100vh;align-items:center;justify-content:center}
main{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:2rem 2.5rem;max-width:32rem}
h1{font-size:1.3rem;margin:0 0 .75rem} p{line-height:1.5} .detail{color:#5b6474;font-size:.9rem}
button{font:inherit;padding:.5rem 1.2rem;border-radius:6px;border:1px solid #2f6fde;background:#2f6fde;color:#fff;cursor:pointer}
a{color:#2f6fde} ul{padding-left:1.2rem}
.spinner{display:inline-block;width:1rem;height:1rem;border:2px solid #c9d2e0;border-top-color:#2f6fde;border-radius:50%;animation:spin 1s linear infinite;vertical-align:middle;margin-right:.5rem}
@keyframes spin{to{transform:rotate(360deg)}}
</style></head><body><main>
<h1>{{if .Poll}}<span class="spinner"></span>{{end}}{{.Title}}</h1>
<p id="message">{{.Message}}</p>
{{if .Detail}}<p class="detail">{{.Detail}}</p>{{end}}
{{if .Running}}<ul>{{range .Running}}<li><a href="{{.URL}}">{{.Name}}</a></li>{{end}}</ul>{{end}}
{{if .StartButton}}<form method="post"><input type="hidden" name="` + startAction + `" value="start"><button type="submit">{{.StartButton}}</button></form>{{end}}
<p><a href="{{.Dashboard}}">Back to the dashboard</a></p>
</main>
{{if .Poll}}<script>
(function(){
  async function poll(){
    try{
      const r = await fetch(location.href,{headers:{Accept:"application/json"},credentials:"same-origin",cache:"no-store"});
      if(r.status===503){
        const body = await r.json().catch(()=>null);
        if(body && body.error && body.error.code==="` + CodeStarting + `"){
          document.getElementById("message").textContent=body.error.message;
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
