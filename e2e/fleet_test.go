package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/codehub-io/codehub/internal/nomadtest"
)

type apiNode struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Homes      int    `json:"homes"`
	Evacuation *struct {
		RequestedBy string `json:"requested_by"`
	} `json:"evacuation"`
}

// TestNomadFleetEvacuate is an operator's evacuation of a node, on the
// dashboard's Nodes page of a server started from its configuration file,
// on a loopback cluster of two clients with the real code-server: a
// running and a stopped workspace on node-a move to node-b with their
// files, the running one's user sees the "moving to another machine" page
// meanwhile, and the node listing (API and page) shows node-a empty.
func TestNomadFleetEvacuate(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	cluster := nomadtest.StartCluster(t, "node-a", "node-b")
	agent := &nomadtest.Agent{Addr: cluster.Addr, Client: cluster.Client}
	srv := startServer(t, nomadConfig(t, agent))
	c := login(t, srv)
	b := cluster.Node(t, "node-b")
	// Both homes start on node-a: node-b takes none meanwhile.
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	running, stopped := c.create("running"), c.create("stopped")
	c.setDesired(stopped, "STANDBY")
	c.settle(running, "RUNNING", time.Now())
	c.settle(stopped, "STANDBY", time.Now())
	files := map[string][]byte{}
	for _, id := range []string{running, stopped} {
		content := make([]byte, 1<<20)
		if _, err := rand.Read(content); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(volumePath(t, agent, id), "notes.bin"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		files[id] = content
	}
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}

	br := newBrowser(t, chromium, srv)
	br.step("log in", br.logIn(srv.url+"/", "app-view"))
	nodeRow := `document.querySelector('#nodes-body tr[data-node="node-a"]')`
	br.step("the Nodes page lists node-a's two homes", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#admin-nav a[href="/admin/nodes"]`)), chromedp.WaitVisible(chromedp.ID("admin-nodes"))); err != nil {
			return err
		}
		return br.waitJS(ctx, 30*time.Second, `(r => r && r.cells[1].textContent === "ready" && r.cells[3].textContent === "2" &&
			["`+running+`", "`+stopped+`"].every(id => document.querySelector('#nodes-body tr[data-workspace="' + id + '"]')))(`+nodeRow+`)`)
	})
	t.Logf("nodes page: %s", br.screenshot("nodes before"))
	br.step("evacuate node-a from the page", func(ctx context.Context) error {
		return br.acceptDialogsWhile(ctx, "node-a", func() error {
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...`+nodeRow+`.querySelectorAll("button")].find(b => b.textContent === "Evacuate").click() || true`)); err != nil {
				return err
			}
			return br.waitJS(ctx, 30*time.Second, `(r => r && r.cells[5].textContent.startsWith("asked by admin"))(`+nodeRow+`)`)
		})
	})
	sawMoving := false
	nomadtest.Eventually(t, 5*time.Minute, "node-a empty", func() bool {
		resp := browserGet(t, c, "/w/"+running+"/")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "moving to another machine") {
			sawMoving = true
		}
		var list struct {
			Nodes []apiNode `json:"nodes"`
		}
		if code := c.do("GET", "/api/v1/admin/nodes", nil, &list); code != http.StatusOK {
			t.Fatalf("list nodes: %d", code)
		}
		for _, n := range list.Nodes {
			if n.Name == "node-a" {
				return n.Homes == 0
			}
		}
		return false
	})
	if !sawMoving {
		t.Error("the running workspace's user never saw the moving page")
	}
	br.step("the Nodes page shows node-a empty", func(ctx context.Context) error {
		return br.waitJS(ctx, 30*time.Second, `(r => r && r.cells[3].textContent === "0")(`+nodeRow+`)`)
	})
	t.Logf("nodes page: %s", br.screenshot("nodes after"))
	c.settle(running, "RUNNING", time.Now())
	c.settle(stopped, "STANDBY", time.Now())
	for _, id := range []string{running, stopped} {
		vols := volumes(t, agent, id)
		if len(vols) != 1 || vols[0].NodeID != b.NodeID {
			t.Fatalf("workspace %s volumes %+v, want one on node-b", id, vols)
		}
		got, err := os.ReadFile(filepath.Join(volumePath(t, agent, id), "notes.bin"))
		if err != nil || !bytes.Equal(got, files[id]) {
			t.Fatalf("workspace %s: moved file differs (%v)", id, err)
		}
	}
}
