-- The run a start replaced (workspace.Workspace.PreviousRunID): a start
-- whose program never ran, because its node was drained before Nomad
-- placed it, gives the home its previous run back, so a home its archive
-- held before the start still counts as unchanged and leaves the node.
ALTER TABLE workspaces ADD COLUMN previous_run_id text NOT NULL DEFAULT '';
