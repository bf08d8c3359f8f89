-- In subdomain mode each workspace host gets a session of its own, handed
-- over from the dashboard's session through a one-time ticket: the
-- dashboard's cookie never reaches a workspace's origin, and a workspace
-- host's cookie is good on that host only. Ending the dashboard session
-- ends the sessions it handed over.
ALTER TABLE sessions
    ADD COLUMN workspace_id text,
    ADD COLUMN parent_hash  bytea REFERENCES sessions (token_hash) ON DELETE CASCADE;
CREATE INDEX sessions_parent_idx ON sessions (parent_hash) WHERE parent_hash IS NOT NULL;

CREATE TABLE session_handoffs (
    ticket_hash  bytea PRIMARY KEY,
    session_hash bytea NOT NULL REFERENCES sessions (token_hash) ON DELETE CASCADE,
    workspace_id text NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX session_handoffs_expires_idx ON session_handoffs (expires_at);
