package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/codehub-io/codehub/internal/nomadtest"
)

// backupSettings turn backups on with a short interval, and run the GC
// often, keeping one archive, so a test sees retention at work.
const backupSettings = `  backup_interval = "4s"
`
const backupGC = `gc {
  interval      = "2s"
  keep_archives = 1
}
`

// TestBackups: on the single-machine backend, a home changed while its
// workspace ran is archived again once stopped, keeping its volume; an
// unchanged one is not; the GC keeps one archive; each archive downloads
// through the API with the home's files.
func TestBackups(t *testing.T) {
	cfg := localConfig(t)
	cfg.workspace = "workspace {\n" + backupSettings + "}\n" + backupGC
	srv := startServer(t, cfg)
	backupLifecycle(t, srv, func(t *testing.T, id string) string {
		return filepath.Join(srv.dataDir, "volumes", "ws-"+id+"-home")
	})
}

// TestNomadBackups is TestBackups on real Nomad under raw_exec: the backup
// is the archive batch job on the volume.
func TestNomadBackups(t *testing.T) {
	agent := nomadtest.Start(t, "")
	cfg := nomadConfig(t, agent)
	cfg.backend = strings.Replace(cfg.backend, "workspace {\n", "workspace {\n"+backupSettings, 1) + backupGC
	srv := startServer(t, cfg)
	backupLifecycle(t, srv, func(t *testing.T, id string) string { return volumePath(t, agent, id) })
}

type apiArchive struct {
	ID       string `json:"id"`
	Size     int64  `json:"size_bytes"`
	Current  bool   `json:"current"`
	BuildsOn string `json:"builds_on"`
}

func backupLifecycle(t *testing.T, srv *server, home func(t *testing.T, id string) string) {
	c := login(t, srv)
	var ws apiWorkspace
	if code := c.do("POST", "/api/v1/workspaces", map[string]string{"name": "backups"}, &ws); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	c.settle(ws.ID, "RUNNING", time.Now())

	// run writes a new file into the running home and stops the workspace.
	run := func(content []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(home(t, ws.ID), "notes.bin"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		c.setDesired(ws.ID, "STANDBY")
		c.settle(ws.ID, "STANDBY", time.Now())
	}
	first := randomBytes(t)
	run(first)
	backup := waitArchives(t, c, ws.ID, func(as []apiArchive) bool { return len(as) == 1 && as[0].Current })
	checkKeptHome(t, c, ws.ID, home(t, ws.ID), first)
	checkDownload(t, c, ws.ID, backup[0], first)

	// Unchanged: no new archive over several intervals.
	time.Sleep(12 * time.Second)
	if as := archives(t, c, ws.ID); len(as) != 1 || as[0].ID != backup[0].ID {
		t.Fatalf("archives of an unchanged home: %+v", as)
	}

	c.setDesired(ws.ID, "RUNNING")
	c.settle(ws.ID, "RUNNING", time.Now())
	second := randomBytes(t)
	run(second)
	// A new current archive, incremental on the first: with
	// keep_archives = 1 the GC keeps the current one and the first, which
	// it builds on, and nothing else.
	latest := waitArchives(t, c, ws.ID, func(as []apiArchive) bool {
		return len(as) >= 1 && as[0].Current && as[0].ID != backup[0].ID
	})
	if len(latest) != 2 || latest[0].BuildsOn != backup[0].ID || latest[1].ID != backup[0].ID {
		t.Fatalf("archives after the second backup: %+v, want the new one building on the first %s", latest, backup[0].ID)
	}
	checkKeptHome(t, c, ws.ID, home(t, ws.ID), second)
	checkDownload(t, c, ws.ID, latest[0], second)
}

func randomBytes(t *testing.T) []byte {
	b := make([]byte, 128<<10)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func archives(t *testing.T, c *apiClient, id string) []apiArchive {
	t.Helper()
	var list struct {
		Archives []apiArchive `json:"archives"`
	}
	if code := c.do("GET", "/api/v1/workspaces/"+id+"/archives", nil, &list); code != http.StatusOK {
		t.Fatalf("list archives: %d", code)
	}
	return list.Archives
}

// waitArchives polls the archive list until done holds and no backup runs.
func waitArchives(t *testing.T, c *apiClient, id string, done func([]apiArchive) bool) []apiArchive {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		as := archives(t, c, id)
		var ws apiWorkspace
		c.do("GET", "/api/v1/workspaces/"+id, nil, &ws)
		if done(as) && ws.Operation == "NONE" {
			return as
		}
		if ws.Phase == "ERROR" || time.Now().After(deadline) {
			t.Fatalf("archives %+v, workspace %+v", as, ws)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkKeptHome: the backed-up workspace is in standby with its volume and
// its file, and starts from it.
func checkKeptHome(t *testing.T, c *apiClient, id, home string, content []byte) {
	t.Helper()
	var ws apiWorkspace
	if code := c.do("GET", "/api/v1/workspaces/"+id, nil, &ws); code != http.StatusOK || ws.Phase != "STANDBY" || ws.Reason != "" {
		t.Fatalf("after the backup: %d %+v", code, ws)
	}
	if got, err := os.ReadFile(filepath.Join(home, "notes.bin")); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the volume lost its file after the backup: %v", err)
	}
}

// checkDownload downloads the archive through the API and finds the file
// in it.
func checkDownload(t *testing.T, c *apiClient, id string, a apiArchive, content []byte) {
	t.Helper()
	resp, err := c.http.Get(c.base + "/api/v1/workspaces/" + id + "/archives/" + a.ID + "/home.tar.zst")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	// An incremental archive downloads as the whole home of its chain,
	// larger than the changes it stores.
	if err != nil || resp.StatusCode != http.StatusOK || a.BuildsOn == "" && int64(len(body)) != a.Size {
		t.Fatalf("download: %d, %d of %d bytes, %v", resp.StatusCode, len(body), a.Size, err)
	}
	got, err := fileInArchive(body, "notes.bin")
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("notes.bin in the downloaded archive: %v", err)
	}
}

func fileInArchive(archive []byte, name string) ([]byte, error) {
	zr, err := zstd.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s not in the archive", name)
		}
		if err != nil {
			return nil, err
		}
		if h.Name == name {
			return io.ReadAll(tr)
		}
	}
}
