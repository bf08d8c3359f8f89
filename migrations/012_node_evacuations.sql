-- Nodes an admin asked CodeHub to move every workspace home off (through
-- the archive), by the backend's node id. The row stays until the admin
-- cancels it: an evacuated node takes no new home while it exists.
CREATE TABLE node_evacuations (
    node_id      text PRIMARY KEY CHECK (node_id <> ''),
    node_name    text NOT NULL,
    requested_by text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now()
);
