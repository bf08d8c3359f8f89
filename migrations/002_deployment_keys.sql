-- Random keys every replica of one deployment shares, created on first use
-- and never rotated in place. "upstream" derives each workspace's token for
-- its code-server.
CREATE TABLE deployment_keys (
    name       text PRIMARY KEY,
    key        bytea NOT NULL CHECK (length(key) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
