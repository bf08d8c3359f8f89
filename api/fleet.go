package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// nodeView is a node as the admin API shows it (docs/api.md, "Nodes").
type nodeView struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Datacenter string `json:"datacenter"`
	NodePool   string `json:"node_pool"`
	Status     string `json:"status"`
	Eligible   bool   `json:"eligible"`
	Draining   bool   `json:"draining"`
	// Evacuation is the admin's request to move every home off the node.
	Evacuation *evacuationView `json:"evacuation"`
	Homes      int             `json:"homes"`
	// DiskUsedBytes sums what the backend reports of the volumes; null
	// when it reports none (Nomad's mkdir plugin).
	DiskUsedBytes *int64       `json:"disk_used_bytes"`
	Volumes       []volumeView `json:"volumes"`
}

type evacuationView struct {
	RequestedBy string    `json:"requested_by"`
	RequestedAt time.Time `json:"requested_at"`
}

// volumeView is a home volume and its workspace.
type volumeView struct {
	VolumeID      string `json:"volume_id"`
	State         string `json:"state"`
	CapacityBytes *int64 `json:"capacity_bytes"`
	WorkspaceID   string `json:"workspace_id"`
	// Known is false for a volume of no live workspace (an orphan).
	Known     bool                 `json:"known"`
	Name      string               `json:"workspace_name,omitempty"`
	OwnerID   string               `json:"owner_id,omitempty"`
	Phase     string               `json:"phase,omitempty"`
	Operation workspace.Operation  `json:"operation,omitempty"`
	Moving    *workspace.Condition `json:"moving,omitempty"`
	// Unavailable says why the home waits for its node (a drained node
	// holding its only copy, one that is down); empty otherwise.
	Unavailable string `json:"unavailable,omitempty"`
	// RecoveryPoint is what losing the node would cost the home, as on
	// the workspace.
	RecoveryPoint *workspace.Recovery `json:"recovery_point,omitempty"`
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.requireAdmin(w, r); !ok {
		return
	}
	views, e := s.nodeViews(r.Context())
	if e != nil {
		WriteError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Nodes []nodeView `json:"nodes"`
	}{views})
}

// nodeViews joins the backend's nodes with the evacuations and the
// workspaces whose homes they hold.
func (s *Server) nodeViews(ctx context.Context) ([]nodeView, *Error) {
	if s.fleet == nil {
		return nil, newError(http.StatusNotFound, CodeNotFound, "this backend runs workspaces on one machine: it has no nodes")
	}
	nodes, err := s.fleet.Nodes(ctx)
	if err != nil {
		logFailure(s.logger, "list nodes", err)
		return nil, newError(http.StatusBadGateway, CodeBackendUnavailable, "the backend did not answer: "+err.Error())
	}
	evacs, err := store.ListEvacuations(ctx, s.pool)
	if err != nil {
		logFailure(s.logger, "list evacuations", err)
		return nil, internalError()
	}
	byNode := make(map[string]store.Evacuation, len(evacs))
	for _, e := range evacs {
		byNode[e.NodeID] = e
	}
	views := make([]nodeView, 0, len(nodes))
	for _, n := range nodes {
		v := nodeView{ID: n.ID, Name: n.Name, Datacenter: n.Datacenter, NodePool: n.Pool, Status: n.Status,
			Eligible: n.Eligible, Draining: n.Draining, Homes: len(n.Volumes), Volumes: make([]volumeView, 0, len(n.Volumes))}
		if e, ok := byNode[n.ID]; ok {
			v.Evacuation = &evacuationView{RequestedBy: e.RequestedBy, RequestedAt: e.RequestedAt.UTC()}
		}
		for _, vol := range n.Volumes {
			vv, e := s.volumeView(ctx, vol)
			if e != nil {
				return nil, e
			}
			if vv.CapacityBytes != nil {
				v.DiskUsedBytes = ptrTo(deref64(v.DiskUsedBytes) + *vv.CapacityBytes)
			}
			v.Volumes = append(v.Volumes, vv)
		}
		views = append(views, v)
	}
	return views, nil
}

func (s *Server) volumeView(ctx context.Context, vol controller.FleetVolume) (volumeView, *Error) {
	v := volumeView{VolumeID: vol.VolumeID, State: vol.State, WorkspaceID: vol.WorkspaceID}
	if vol.CapacityBytes > 0 {
		v.CapacityBytes = ptrTo(vol.CapacityBytes)
	}
	ws, err := s.workspaces.Get(ctx, vol.WorkspaceID)
	if err == nil {
		v.Known, v.Name, v.OwnerID = true, ws.Name, ws.OwnerID
		v.Phase, v.Operation = workspace.DisplayPhase(ws), ws.Operation
		if c, ok := ws.Conditions[workspace.CondMoving]; ok {
			v.Moving = &c
		}
		v.Unavailable, _ = workspace.Unavailable(ws)
		rp := workspace.RecoveryOf(ws)
		if rp.ArchivedAt != nil {
			rp.ArchivedAt = utc(rp.ArchivedAt)
		}
		v.RecoveryPoint = &rp
		return v, nil
	}
	if serviceError(s.logger, err).Code == CodeNotFound {
		return v, nil
	}
	return v, internalError()
}

// evacuateNode asks for every home on the node (named by id or name) to
// move to other nodes; asking again changes nothing.
func (s *Server) evacuateNode(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireAdmin(w, r)
	if !ok {
		return
	}
	n, e := s.findNode(r.Context(), r.PathValue("node"))
	if e != nil {
		WriteError(w, e)
		return
	}
	if n.Status == controller.NodeGone {
		WriteError(w, newError(http.StatusConflict, CodeInvalidState,
			"node "+n.Name+" has left the cluster: nothing can run there to archive its homes; restore their archives instead"))
		return
	}
	if _, err := store.StartEvacuation(r.Context(), s.pool, store.Evacuation{NodeID: n.ID, NodeName: n.Name, RequestedBy: sess.Username}); err != nil {
		logFailure(s.logger, "start evacuation", err)
		WriteError(w, internalError())
		return
	}
	s.logger.Info("node evacuation requested", "node_id", n.ID, "node", n.Name, "admin", sess.Username)
	s.writeNode(w, r, n.ID)
}

// cancelEvacuation stops moving homes off the node: moves under way finish
// (their homes are archived by then), no new one starts, and the node
// takes new homes again.
func (s *Server) cancelEvacuation(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireAdmin(w, r)
	if !ok {
		return
	}
	n, e := s.findNode(r.Context(), r.PathValue("node"))
	if e != nil {
		WriteError(w, e)
		return
	}
	if _, err := store.CancelEvacuation(r.Context(), s.pool, n.ID); err != nil {
		logFailure(s.logger, "cancel evacuation", err)
		WriteError(w, internalError())
		return
	}
	s.logger.Info("node evacuation cancelled", "node_id", n.ID, "node", n.Name, "admin", sess.Username)
	s.writeNode(w, r, n.ID)
}

// findNode resolves a node id or name; a name two nodes share is refused.
func (s *Server) findNode(ctx context.Context, ref string) (controller.FleetNode, *Error) {
	if s.fleet == nil {
		return controller.FleetNode{}, newError(http.StatusNotFound, CodeNotFound, "this backend runs workspaces on one machine: it has no nodes")
	}
	nodes, err := s.fleet.Nodes(ctx)
	if err != nil {
		logFailure(s.logger, "list nodes", err)
		return controller.FleetNode{}, newError(http.StatusBadGateway, CodeBackendUnavailable, "the backend did not answer: "+err.Error())
	}
	var found []controller.FleetNode
	for _, n := range nodes {
		if n.ID == ref || n.Name == ref {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 0:
		return controller.FleetNode{}, newError(http.StatusNotFound, CodeNotFound, "no node "+ref)
	case 1:
		return found[0], nil
	}
	return controller.FleetNode{}, newError(http.StatusConflict, CodeInvalidInput, "several nodes are named "+ref+": give its id")
}

func (s *Server) writeNode(w http.ResponseWriter, r *http.Request, id string) {
	views, e := s.nodeViews(r.Context())
	if e != nil {
		WriteError(w, e)
		return
	}
	for _, v := range views {
		if v.ID == id {
			writeJSON(w, http.StatusOK, v)
			return
		}
	}
	WriteError(w, newError(http.StatusNotFound, CodeNotFound, "no node "+id))
}

func ptrTo[T any](v T) *T { return &v }

func deref64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

type restoreElsewhereRequest struct {
	// ConfirmArchiveKey must be the workspace's archive key: the admin
	// accepts losing every change made since that archive.
	ConfirmArchiveKey string `json:"confirm_archive_key"`
}

// restoreElsewhere gives up a home on a node that is down or gone for the
// workspace's last archive, restored on another node. Without the right
// confirmation it changes nothing and says what would be lost.
func (s *Server) restoreElsewhere(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireAdmin(w, r)
	if !ok {
		return
	}
	id, ok := pathID(w, r, "workspace")
	if !ok {
		return
	}
	var req restoreElsewhereRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	ws, err := s.workspaces.RestoreElsewhere(r.Context(), id, req.ConfirmArchiveKey)
	var loss *workspace.LossError
	if errors.As(err, &loss) {
		WriteError(w, &Error{Status: http.StatusConflict, Code: CodeConfirmationRequired, Field: "confirm_archive_key", Message: loss.Error()})
		return
	}
	if err != nil {
		WriteError(w, serviceError(s.logger, err))
		return
	}
	s.logger.Info("workspace restored elsewhere by admin", "workspace_id", id, "archive_key", req.ConfirmArchiveKey, "admin", sess.Username)
	writeJSON(w, http.StatusOK, s.view(ws))
}
