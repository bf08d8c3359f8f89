-- How widely each port of a workspace is shared. A port without a row is
-- shared with its owner only, the default; setting a port back to "owner"
-- deletes its row. The rows go with their workspace.
CREATE TABLE port_shares (
    workspace_id text NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    port         integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    level        text NOT NULL CHECK (level IN ('authenticated', 'public')),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, port)
);
