-- The run of a workspace's program: a new id at every start, from which
-- its upstream token is derived, so each start gets a new token. Empty for
-- workspaces last started before runs were recorded.
ALTER TABLE workspaces ADD COLUMN run_id text NOT NULL DEFAULT '';
