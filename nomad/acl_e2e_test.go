package nomad

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/workspace"
)

// policyMarker is the first line of the documented policy's code block.
const policyMarker = "# codehub-control-plane.policy.hcl"

// documentedPolicy returns the ACL policy docs/nomad.md tells operators to
// apply, so the documentation itself is what the test exercises.
func documentedPolicy(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/nomad.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(doc), "```hcl\n"+policyMarker+"\n")
	if !found {
		t.Fatalf("docs/nomad.md has no ```hcl block starting with %q", policyMarker)
	}
	policy, _, found := strings.Cut(rest, "\n```")
	if !found {
		t.Fatalf("the %q block in docs/nomad.md is not closed", policyMarker)
	}
	return policy + "\n"
}

// deniedRecorder notes every request Nomad refused for lack of permission,
// including the ones the backend only logs (check and log reads) and the
// event stream, whose refusal Watch turns into a reconnect.
type deniedRecorder struct {
	next   http.RoundTripper
	mu     sync.Mutex
	denied []string
}

func (d *deniedRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized) {
		d.mu.Lock()
		d.denied = append(d.denied, fmt.Sprintf("%s %s: %d", req.Method, req.URL.Path, resp.StatusCode))
		d.mu.Unlock()
	}
	return resp, err
}

func (d *deniedRecorder) requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.denied...)
}

// tokenClient is a client of a's HTTP API sending secretID (none when
// empty) and recording refusals.
func tokenClient(t *testing.T, a *nomadtest.Agent, secretID string) (*api.Client, *deniedRecorder) {
	t.Helper()
	rec := &deniedRecorder{next: http.DefaultTransport}
	c, err := api.NewClient(&api.Config{Address: a.Addr, SecretID: secretID, HttpClient: &http.Client{Transport: rec}})
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

// streamWatch runs b's Watch until the test ends, so b's observations
// come from the mirror the stream keeps. It returns a channel of
// (coalesced) wakes and what b logged, which is only ever the end of a
// stream: a refused stream ends in-band after a 200 and then wakes like
// any reconnect, so a wake only counts while nothing is logged.
func streamWatch(t *testing.T, b *Backend) (<-chan struct{}, *nomadtest.LockedBuffer) {
	t.Helper()
	logged := &nomadtest.LockedBuffer{}
	// Only the stream's ends are kept: the prober's lines are no sign of one.
	b.logger = hclog.New(&hclog.LoggerOptions{Name: "watch", Level: hclog.Debug, Output: logged,
		Exclude: func(_ hclog.Level, msg string, _ ...any) bool { return msg != msgStreamEnded }})
	wakes := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Watch(ctx, func() {
			select {
			case wakes <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return wakes, logged
}

// awaitEvent waits for a wake that an event caused, not a reconnect.
func awaitEvent(t *testing.T, wakes <-chan struct{}, ended *nomadtest.LockedBuffer, after string) {
	t.Helper()
	select {
	case <-wakes:
	case <-time.After(30 * time.Second):
		t.Fatalf("no wake from Watch after %s", after)
	}
	if s := ended.String(); s != "" {
		t.Fatalf("the event stream ended instead of delivering events:\n%s", s)
	}
}

// TestE2EACLPolicy runs the backend's lifecycle against an agent that
// enforces ACLs, with a token holding nothing but the policy documented in
// docs/nomad.md; an anonymous client must be refused at the first step.
func TestE2EACLPolicy(t *testing.T) {
	nomadtest.Binary(t)
	rules := documentedPolicy(t)
	s3 := testenv.NewS3(t)
	bins := t.TempDir()
	nomadtest.BuildProgram(t, bins, "./testdata/wsserver", "wsserver")
	nomadtest.BuildProgram(t, bins, "../cmd/codehub", "codehub")
	a := nomadtest.Start(t, "acl {\n  enabled = true\n}\n")
	if a.ManagementToken == "" {
		t.Fatal("the agent started without enforcing ACLs")
	}
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0tac1a"
	spec := controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}

	// Without a token the first step is refused, and the controller sees a
	// backend error (not an outage to wait out).
	anonymous, anonymousDenied := tokenClient(t, a, "")
	nobody := e2eBackend(t, a, bins, e2eConfig{s3: s3, client: anonymous})
	err := nobody.ProvisionVolume(ctx, spec)
	var f *controller.Failure
	if !errors.As(err, &f) || f.Reason != workspace.ReasonBackendError || f.Terminal {
		t.Fatalf("anonymous provision: %v, want a non-terminal %s failure", err, workspace.ReasonBackendError)
	}
	if len(anonymousDenied.requests()) == 0 {
		t.Fatalf("anonymous provision failed without a refused request: %v", err)
	}
	t.Logf("anonymous client refused: %v", anonymousDenied.requests())

	if _, err := a.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "codehub", Rules: rules}, nil); err != nil {
		t.Fatalf("apply the documented policy: %v", err)
	}
	token, _, err := a.Client.ACLTokens().Create(&api.ACLToken{Name: "codehub", Type: "client", Policies: []string{"codehub"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted, denied := tokenClient(t, a, token.SecretID)
	t.Cleanup(func() {
		if d := denied.requests(); len(d) > 0 {
			t.Errorf("the documented policy let Nomad refuse:\n%s", strings.Join(d, "\n"))
		}
	})
	upstreamToken := func(id, run string) string { return "tok-" + id + "-" + run }
	b := e2eBackend(t, a, bins, e2eConfig{s3: s3, client: restricted, upstreamToken: upstreamToken})
	wakes, ended := streamWatch(t, b)

	if err := b.ProvisionVolume(ctx, spec); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	awaitEvent(t, wakes, ended, "a volume was created")

	// A run, as every start the controller makes has: its stop-archive
	// variable is written and removed under the policy too.
	const run = "01jb3x7k9q2m5n8p4r6s0t1run"
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: wsID, RunID: run, OwnerID: "01owner0000000000000000000"}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "upstream ready", func(o controller.Observed) bool { return o.UpstreamReady })
	cfg := &config.Config{Backend: &config.Backend{Kind: "nomad", Nomad: &config.NomadBackend{Namespace: "default"}}}
	upstreams, stop, err := NewUpstreams(hclog.NewNullLogger(), cfg, restricted)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	addr, err := upstreams.Resolve(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	fetchWithToken(t, "http://"+addr+"/files/.wsserver-started", upstreamToken(wsID, run))

	if _, _, err := a.Client.Variables().Read(stopVariablePath(wsID), nil); err != nil {
		t.Fatalf("read %s after the start: %v", stopVariablePath(wsID), err)
	}
	if err := b.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	// The stop archive reads its variable as the program stops, under
	// the least-privilege policy, and saves the home.
	if _, _, err := a.Client.Variables().Read(stopVariablePath(wsID), nil); err != nil {
		t.Fatalf("read %s after a stop that saves: %v", stopVariablePath(wsID), err)
	}
	observeUntil(t, b, wsID, "container gone, its home saved", func(o controller.Observed) bool {
		return !o.ContainerLive && o.StopArchive != nil && o.StopArchive.Status == controller.JobSucceeded
	})

	archiveHome(t, b, s3, wsID, "01jb3xa00000000000000000op")
	if err := b.PurgeJob(ctx, wsID, controller.JobArchive); err != nil {
		t.Fatal(err)
	}

	// A failed batch job's error code comes from its log.
	missing := controller.JobSpec{WorkspaceID: wsID, OpID: "01jb3xb00000000000000000op", ArchiveKey: "archives/" + wsID + "/none/home.tar.zst", Attempt: 1}
	if err := b.SubmitRestore(ctx, missing); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "failed restore", func(o controller.Observed) bool {
		return o.Restore != nil && o.Restore.Status == controller.JobFailed
	})
	if o.Restore.ErrorCode != "ARCHIVE_NOT_FOUND" {
		t.Fatalf("failed restore = %+v, want ARCHIVE_NOT_FOUND read from its log", o.Restore)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobRestore); err != nil {
		t.Fatal(err)
	}

	tokenVar := variablePath(jobID(wsID))
	if v, _, err := a.Client.Variables().Read(tokenVar, nil); err != nil || v.Items["token"] != upstreamToken(wsID, run) {
		t.Fatalf("read %s before purge: %v, %v", tokenVar, v, err)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobWorkspace); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Client.Variables().Read(tokenVar, nil); !errors.Is(err, api.ErrVariablePathNotFound) {
		t.Fatalf("read %s after purge: %v, want not found", tokenVar, err)
	}
	deleteVolume(t, b, wsID)
	observeUntil(t, b, wsID, "volume gone", func(o controller.Observed) bool { return !o.VolumeExists && !o.ContainerLive })
	if s := ended.String(); s != "" {
		t.Fatalf("the event stream ended during the lifecycle:\n%s", s)
	}
}
