package nomad

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/doctor"
)

// minVersion is the oldest Nomad codehub supports (docs/nomad.md,
// "Required Nomad version and settings"): dynamic host volumes and their
// events, per-allocation check results.
var minVersion = [3]int{1, 10, 0}

// probeName names what the doctor's probes address: a job, a volume and a
// variable no workspace has. The probes are built so that Nomad refuses
// each after its ACL check and before changing anything.
const probeName = "ws-codehub-doctor"

// Preflight checks the Nomad cluster cfg names the way codehub uses it,
// changing nothing: the cluster answers and is new enough, enforces ACLs,
// accepts the token, lets it do each thing codehub does (each tried with a
// request Nomad refuses after its ACL check), and has eligible nodes with
// the driver and the volume plugin. clockTolerance bounds the servers'
// clock skew.
func Preflight(ctx context.Context, cfg *config.Config, clockTolerance time.Duration) []doctor.Finding {
	n := cfg.Backend.Nomad
	o := Options{Namespace: n.Namespace, NodePool: n.NodePool, Datacenters: n.Datacenters, Driver: n.Driver, VolumePlugin: n.VolumePlugin}.withDefaults()
	c := clientConfig(n)
	client, err := api.NewClient(c)
	if err != nil {
		return []doctor.Finding{{Check: "nomad", Status: doctor.Fail, Detail: err.Error(),
			Fix: "set backend \"nomad\" { address } (or NOMAD_ADDR) to a Nomad server's HTTP address", Doc: doctor.DocRequired}}
	}
	p := &preflight{client: client, addr: c.Address, ns: o.Namespace, region: c.Region, opts: o, n: n}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	reach, clock := p.reach(ctx, clockTolerance)
	out := []doctor.Finding{reach, clock}
	if reach.Status != doctor.OK {
		return out
	}
	out = append(out, p.acls(ctx))
	enforced := out[len(out)-1].Status == doctor.OK
	out = append(out, p.token(ctx, enforced))
	out = append(out, p.capabilities(ctx, enforced)...)
	nodes, err := p.nodes(ctx)
	out = append(out, p.version(ctx, nodes, err))
	return append(out, p.placement(ctx, nodes, err)...)
}

type preflight struct {
	client *api.Client
	addr   string
	ns     string
	region string
	opts   Options
	n      *config.NomadBackend
}

func (p *preflight) query(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: p.ns, Region: p.region}).WithContext(ctx)
}

func (p *preflight) write(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: p.ns, Region: p.region}).WithContext(ctx)
}

// reach asks for the cluster's leader, which needs no token, and reads
// the server's clock from the answer's Date header.
func (p *preflight) reach(ctx context.Context, tolerance time.Duration) (doctor.Finding, doctor.Finding) {
	fix := "set backend \"nomad\" { address } (or NOMAD_ADDR) to a Nomad server's HTTP address this machine reaches, with its TLS settings"
	noClock := doctor.Finding{Check: "clock.nomad", Status: doctor.Skip, Detail: "Nomad not reachable"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(p.addr, "/")+"/v1/status/leader", nil)
	if err != nil {
		return doctor.Finding{Check: "nomad", Status: doctor.Fail, Detail: err.Error(), Fix: fix, Doc: doctor.DocRequired}, noClock
	}
	if p.region != "" {
		req.URL.RawQuery = url.Values{"region": {p.region}}.Encode()
	}
	sent := time.Now()
	resp, err := p.client.Raw().Do(req)
	received := time.Now()
	if err != nil {
		return doctor.Finding{Check: "nomad", Status: doctor.Fail, Detail: fmt.Sprintf("%s does not answer: %v", p.addr, err), Fix: fix, Doc: doctor.DocRequired}, noClock
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	clock := doctor.Finding{Check: "clock.nomad", Status: doctor.Skip}
	if remote, err := doctor.DateOf(resp); err != nil {
		clock.Detail = err.Error()
	} else {
		clock = doctor.Clock("nomad", sent, received, remote, doctor.HTTPDatePrecision, tolerance)
	}
	var leader string
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &leader) != nil {
		return doctor.Finding{Check: "nomad", Status: doctor.Fail,
			Detail: fmt.Sprintf("%s is not a Nomad HTTP API: %s %q", p.addr, resp.Status, strings.TrimSpace(string(body))), Fix: fix, Doc: doctor.DocRequired}, clock
	}
	if leader == "" {
		return doctor.Finding{Check: "nomad", Status: doctor.Fail, Detail: "the cluster has no leader",
			Fix: "bring a quorum of Nomad servers up", Doc: doctor.DocRequired}, clock
	}
	return doctor.Finding{Check: "nomad", Status: doctor.OK, Detail: fmt.Sprintf("%s answers, leader %s", p.addr, leader)}, clock
}

// acls asks without a token for a workspace variable, as RequireACLs does
// before every start.
func (p *preflight) acls(ctx context.Context) doctor.Finding {
	c := clientConfig(p.n)
	c.SecretID = ""
	anonymous, err := api.NewClient(c)
	if err != nil {
		return doctor.Finding{Check: "nomad.acls", Status: doctor.Fail, Detail: err.Error()}
	}
	_, _, readErr := anonymous.Variables().Peek(aclProbePath, (&api.QueryOptions{Namespace: p.ns, Region: p.region}).WithContext(ctx))
	enforced, err := aclsEnforced(readErr)
	switch {
	case err != nil:
		return doctor.Finding{Check: "nomad.acls", Status: doctor.Fail, Detail: err.Error(),
			Fix: "enable ACLs on every Nomad agent", Doc: doctor.DocACLs}
	case enforced:
		return doctor.Finding{Check: "nomad.acls", Status: doctor.OK, Detail: "a request without a token is refused"}
	case p.n.InsecureAllowNoACLs:
		return doctor.Finding{Check: "nomad.acls", Status: doctor.Warn, Detail: "ACLs not enforced; insecure_allow_no_acls lets codehub run anyway",
			Fix: "enable ACLs: every workspace can read all Nomad Variables (upstream tokens, S3 keys) and register jobs", Doc: doctor.DocACLs}
	}
	return doctor.Finding{Check: "nomad.acls", Status: doctor.Fail, Detail: ErrACLsNotEnforced.Error(),
		Fix: "enable ACLs on every Nomad agent (codehub refuses to start otherwise)", Doc: doctor.DocACLs}
}

func (p *preflight) token(ctx context.Context, enforced bool) doctor.Finding {
	if !enforced {
		return doctor.Finding{Check: "nomad.token", Status: doctor.Skip, Detail: "ACLs not enforced: any token is accepted"}
	}
	tok, _, err := p.client.ACLTokens().Self(p.query(ctx))
	if err != nil {
		return doctor.Finding{Check: "nomad.token", Status: doctor.Fail, Detail: "the token is not accepted: " + err.Error(),
			Fix: "set NOMAD_TOKEN (or backend \"nomad\" { token }) to the secret of a token holding the documented policy", Doc: doctor.DocPolicy}
	}
	if tok.Type == "management" {
		return doctor.Finding{Check: "nomad.token", Status: doctor.Warn, Detail: fmt.Sprintf("management token %q: it may do anything on the cluster", tok.Name),
			Fix: "give codehub a client token holding only the documented policy", Doc: doctor.DocPolicy}
	}
	return doctor.Finding{Check: "nomad.token", Status: doctor.OK, Detail: fmt.Sprintf("client token %q, policies %v, roles %d", tok.Name, tok.Policies, len(tok.Roles))}
}

// allowedBy judges a probe's answer: Nomad's 403 means the token may not;
// any other answer from Nomad (a check-and-set conflict included) came
// after the ACL check, so it may. A transport error decides nothing.
func allowedBy(err error) (allowed, decided bool) {
	var conflict api.ErrCASConflict
	if err == nil || errors.As(err, &conflict) {
		return true, true
	}
	code, ok := statusCode(err)
	if !ok {
		return false, false
	}
	return code != http.StatusForbidden && code != http.StatusUnauthorized, true
}

// answeredBadRequest judges a log read: Nomad's client answers 400 for
// the task the probe names, which the allocation does not have, once the
// right is granted. A refusal comes back as 403, or as a 500 when the
// server refuses the stream it forwards.
func answeredBadRequest(err error) (allowed, decided bool) {
	code, ok := statusCode(err)
	if !ok {
		return false, err == nil
	}
	return code == http.StatusBadRequest, true
}

// probe is one thing codehub's token must be allowed to do, tried with a
// request Nomad refuses after its ACL check; undo removes what an
// unexpected success made.
type probe struct {
	capability string
	try        func(ctx context.Context) error
	undo       func(ctx context.Context)
	// judge reads try's answer; allowedBy if nil.
	judge func(error) (allowed, decided bool)
}

// probeJob is a job Nomad validates, checks the token's rights for, and
// then refuses to register: EnforceRegister with index 1 on a job that
// does not exist. With volume it claims a host volume as a workspace job
// does, which also needs the host_volume rule's mount-readwrite.
func (p *preflight) probeJob(volume bool) *api.Job {
	job := api.NewServiceJob(probeName, probeName, p.region, 50)
	job.Namespace = &p.ns
	job.NodePool = &p.opts.NodePool
	job.Datacenters = p.opts.Datacenters
	tg := api.NewTaskGroup("doctor", 1)
	task := api.NewTask("doctor", p.opts.Driver)
	task.Config = map[string]any{"command": "/bin/true"}
	if volume {
		tg.Volumes = map[string]*api.VolumeRequest{"home": {
			Name: "home", Type: "host", Source: probeName + "-home",
			AccessMode: "single-node-writer", AttachmentMode: "file-system",
		}}
		task.VolumeMounts = []*api.VolumeMount{{Volume: new("home"), Destination: new("/home/coder")}}
	}
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	return job
}

func (p *preflight) probes(alloc string) []probe {
	vars, vols, jobs := p.client.Variables(), p.client.HostVolumes(), p.client.Jobs()
	varPath := "nomad/jobs/" + probeName
	register := func(volume bool) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, _, err := jobs.EnforceRegister(p.probeJob(volume), 1, p.write(ctx))
			return err
		}
	}
	deregister := func(ctx context.Context) { _, _, _ = jobs.Deregister(probeName, true, p.write(ctx)) }
	var createdVolume string
	out := []probe{
		{"list-jobs", func(ctx context.Context) error {
			q := p.query(ctx)
			q.Prefix = probeName
			_, _, err := jobs.List(q)
			return err
		}, nil, nil},
		{"read-job", func(ctx context.Context) error {
			_, _, err := jobs.Info(probeName, p.query(ctx))
			return err
		}, nil, nil},
		{"submit-job", register(false), deregister, nil},
		{"host_volume mount-readwrite", register(true), deregister, nil},
		{"host-volume-read", func(ctx context.Context) error {
			_, _, err := vols.List(&api.HostVolumeListRequest{}, p.query(ctx))
			return err
		}, nil, nil},
		// An invalid volume (no name, an id that is not a UUID) is refused
		// after the ACL check.
		{"host-volume-create", func(ctx context.Context) error {
			resp, _, err := vols.Create(&api.HostVolumeCreateRequest{Volume: &api.HostVolume{ID: probeName, Namespace: p.ns}}, p.write(ctx))
			if err == nil && resp != nil && resp.Volume != nil {
				createdVolume = resp.Volume.ID
			}
			return err
		}, func(ctx context.Context) {
			if createdVolume != "" {
				_, _, _ = vols.Delete(&api.HostVolumeDeleteRequest{ID: createdVolume}, p.write(ctx))
			}
		}, nil},
		{"host-volume-delete", func(ctx context.Context) error {
			_, _, err := vols.Delete(&api.HostVolumeDeleteRequest{ID: randomUUID()}, p.write(ctx))
			return err
		}, nil, nil},
		// A write whose check index cannot match writes nothing.
		{"variables write", func(ctx context.Context) error {
			_, _, err := vars.CheckedUpdate(&api.Variable{Namespace: p.ns, Path: varPath, Items: api.VariableItems{"probe": "codehub doctor"}, ModifyIndex: 1}, p.write(ctx))
			return err
		}, func(ctx context.Context) { _, _ = vars.Delete(varPath, p.write(ctx)) }, nil},
		// A delete whose check index cannot match removes nothing.
		{"variables destroy", func(ctx context.Context) error {
			_, err := vars.CheckedDelete(varPath, 1, p.write(ctx))
			return err
		}, nil, nil},
		{"node read", func(ctx context.Context) error {
			_, _, err := p.client.Nodes().List(p.query(ctx))
			return err
		}, nil, nil},
	}
	if alloc == "" {
		return out
	}
	// Both address a task the allocation does not have: Nomad checks the
	// right, then the client finds no such task.
	return append(out,
		probe{"read-logs", func(ctx context.Context) error {
			q := p.query(ctx)
			q.Params = map[string]string{"task": probeName, "type": "stderr", "plain": "true", "origin": "end"}
			r, err := p.client.Raw().Response("/v1/client/fs/logs/"+alloc, q)
			if err == nil {
				r.Close()
			}
			return err
		}, nil, answeredBadRequest},
		probe{"alloc-lifecycle", func(ctx context.Context) error {
			return p.client.Allocations().Signal(&api.Allocation{ID: alloc}, p.query(ctx), probeName, "SIGUSR1")
		}, nil, nil},
	)
}

// capabilities tries each capability of docs/nomad.md's policy. The two
// an allocation's client answers need a running allocation in the
// namespace; without one they are reported as not tried.
func (p *preflight) capabilities(ctx context.Context, enforced bool) []doctor.Finding {
	alloc := ""
	if allocs, _, err := p.client.Allocations().List(p.queryFiltered(ctx, `ClientStatus == "running"`)); err == nil && len(allocs) > 0 {
		alloc = allocs[0].ID
	}
	var out []doctor.Finding
	for _, pr := range p.probes(alloc) {
		check := "nomad.capability." + strings.ReplaceAll(pr.capability, " ", ".")
		if !enforced {
			out = append(out, doctor.Finding{Check: check, Status: doctor.Skip, Detail: "ACLs not enforced: everything is allowed"})
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := pr.try(pctx)
		cancel()
		judge := pr.judge
		if judge == nil {
			judge = allowedBy
		}
		allowed, decided := judge(err)
		f := doctor.Finding{Check: check, Status: doctor.OK, Detail: "allowed"}
		if err != nil {
			f.Detail = "allowed (Nomad refused the probe after its ACL check: " + err.Error() + ")"
		}
		switch {
		case !decided:
			f = doctor.Finding{Check: check, Status: doctor.Fail, Detail: "could not be tried: " + err.Error(),
				Fix: "make sure Nomad answers; then run the doctor again", Doc: doctor.DocRequired}
		case !allowed:
			f = doctor.Finding{Check: check, Status: doctor.Fail, Detail: "refused: " + err.Error(),
				Fix: fmt.Sprintf("add %s to codehub's policy as docs/nomad.md shows, in namespace %q", pr.capability, p.ns), Doc: doctor.DocPolicy}
		case err == nil && pr.undo != nil:
			// Nomad accepted what it should have refused after its ACL
			// check: the right is there, and what it made is removed.
			pr.undo(context.WithoutCancel(ctx))
			f.Detail = "allowed (Nomad accepted the probe; what it made was removed)"
		}
		out = append(out, f)
	}
	if alloc == "" {
		for _, c := range []string{"read-logs", "alloc-lifecycle"} {
			detail := "not tried: no running allocation in namespace " + strconv.Quote(p.ns) + " to try it on; run the doctor again once a workspace runs"
			status := doctor.Skip
			if !enforced {
				detail = "ACLs not enforced: everything is allowed"
			}
			out = append(out, doctor.Finding{Check: "nomad.capability." + c, Status: status, Detail: detail})
		}
	}
	return out
}

func (p *preflight) queryFiltered(ctx context.Context, filter string) *api.QueryOptions {
	q := p.query(ctx)
	q.Filter = filter
	q.PerPage = 1
	return q
}

func (p *preflight) nodes(ctx context.Context) ([]*api.NodeListStub, error) {
	nodes, _, err := p.client.Nodes().List(p.query(ctx))
	return nodes, err
}

// version checks the servers' and the home nodes' Nomad versions.
func (p *preflight) version(ctx context.Context, nodes []*api.NodeListStub, nodesErr error) doctor.Finding {
	f := doctor.Finding{Check: "nomad.version"}
	members, err := p.client.Agent().MembersOpts(p.query(ctx))
	if err != nil || nodesErr != nil {
		f.Status, f.Detail = doctor.Skip, fmt.Sprintf("cannot read versions without node read: %v", errors.Join(err, nodesErr))
		return f
	}
	seen := map[string][]string{}
	for _, m := range members.Members {
		v := m.Tags["build"]
		seen[v] = append(seen[v], "server "+m.Name)
	}
	for _, n := range homeNodes(nodes, p.opts.NodePool, p.opts.Datacenters) {
		seen[n.Version] = append(seen[n.Version], "client "+n.Name)
	}
	f.Status, f.Detail, f.Fix, f.Doc = judgeVersions(seen)
	return f
}

// judgeVersions takes the agents of each version and says whether all are
// new enough.
func judgeVersions(seen map[string][]string) (doctor.Status, string, string, string) {
	versions := make([]string, 0, len(seen))
	for v := range seen {
		versions = append(versions, v)
	}
	slices.Sort(versions)
	var old []string
	for _, v := range versions {
		if !supportedVersion(v) {
			old = append(old, fmt.Sprintf("%s (%s)", v, strings.Join(seen[v], ", ")))
		}
	}
	if len(old) > 0 {
		return doctor.Fail, "too old or unknown: " + strings.Join(old, "; "),
			fmt.Sprintf("upgrade Nomad to %d.%d.%d or newer", minVersion[0], minVersion[1], minVersion[2]), doctor.DocRequired
	}
	return doctor.OK, "Nomad " + strings.Join(versions, ", "), "", ""
}

// supportedVersion reports whether a Nomad version ("2.0.6-dev",
// "1.10.1+ent") is at least minVersion.
func supportedVersion(v string) bool {
	core, _, _ := strings.Cut(v, "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return false
	}
	var got [3]int
	for i, s := range parts {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return false
		}
		got[i] = n
	}
	return slices.Compare(got[:], minVersion[:]) >= 0
}

// placement checks the nodes homes may go to: eligible ones exist, run
// the configured driver and have the volume plugin; where they already hold
// homes, it says in which directory.
func (p *preflight) placement(ctx context.Context, nodes []*api.NodeListStub, err error) []doctor.Finding {
	if err != nil {
		return []doctor.Finding{
			{Check: "nomad.driver", Status: doctor.Skip, Detail: "cannot list nodes: " + err.Error()},
			{Check: "nomad.volume_plugin", Status: doctor.Skip, Detail: "cannot list nodes"},
		}
	}
	eligible := homeNodes(nodes, p.opts.NodePool, p.opts.Datacenters)
	driver := judgeDriver(eligible, p.opts.Driver, p.opts.NodePool, p.opts.Datacenters)
	if driver.Status == doctor.Fail {
		return []doctor.Finding{driver, {Check: "nomad.volume_plugin", Status: doctor.Skip, Detail: "no node to look at"}}
	}
	var missing, dirs []string
	attr := "plugins.host_volume." + p.opts.VolumePlugin + ".version"
	for _, n := range eligible {
		node, _, err := p.client.Nodes().Info(n.ID, p.query(ctx))
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", n.Name, err))
			continue
		}
		if node.Attributes[attr] == "" {
			missing = append(missing, n.Name)
		}
		for name, hv := range node.HostVolumes {
			if _, home := controller.ParseVolumeName(name); home && hv.Path != "" {
				dirs = append(dirs, fmt.Sprintf("%s: %s", n.Name, hv.Path[:strings.LastIndex(hv.Path, "/")+1]))
				break
			}
		}
	}
	plugin := doctor.Finding{Check: "nomad.volume_plugin", Status: doctor.OK,
		Detail: fmt.Sprintf("volume plugin %q on all %d eligible nodes", p.opts.VolumePlugin, len(eligible))}
	if len(dirs) > 0 {
		plugin.Detail += "; homes under " + strings.Join(dirs, ", ")
	}
	if len(missing) > 0 {
		plugin.Status = doctor.Fail
		if len(missing) < len(eligible) {
			plugin.Status = doctor.Warn
		}
		plugin.Detail = fmt.Sprintf("volume plugin %q missing on %s", p.opts.VolumePlugin, strings.Join(missing, ", "))
		plugin.Fix = "install the plugin in the client's host_volume_plugin_dir (mkdir is built in), or set backend \"nomad\" { volume_plugin }; homes go under the client's host_volumes_dir"
		plugin.Doc = doctor.DocRequired
	}
	return []doctor.Finding{driver, plugin}
}

// judgeDriver says whether the eligible nodes run driver.
func judgeDriver(eligible []*api.NodeListStub, driver, pool string, datacenters []string) doctor.Finding {
	f := doctor.Finding{Check: "nomad.driver"}
	if len(eligible) == 0 {
		f.Status = doctor.Fail
		f.Detail = fmt.Sprintf("no ready, eligible node in node pool %q and datacenters %v", pool, datacenters)
		f.Fix = "start Nomad clients there, or set backend \"nomad\" { node_pool, datacenters } to where they are"
		f.Doc = doctor.DocRequired
		return f
	}
	var without []string
	for _, n := range eligible {
		d := n.Drivers[driver]
		switch {
		case d == nil || !d.Detected:
			without = append(without, n.Name+" (not detected)")
		case !d.Healthy:
			without = append(without, fmt.Sprintf("%s (unhealthy: %s)", n.Name, d.HealthDescription))
		}
	}
	switch {
	case len(without) == 0:
		f.Status, f.Detail = doctor.OK, fmt.Sprintf("%s healthy on all %d eligible nodes", driver, len(eligible))
		return f
	case len(without) == len(eligible):
		f.Status = doctor.Fail
	default:
		f.Status = doctor.Warn
	}
	f.Detail = fmt.Sprintf("%s not usable on %s", driver, strings.Join(without, ", "))
	f.Fix = fmt.Sprintf("enable and fix the %s driver on every client of node pool %q, or set backend \"nomad\" { driver }", driver, pool)
	f.Doc = doctor.DocRequired
	return f
}

// randomUUID names a volume that does not exist.
func randomUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
