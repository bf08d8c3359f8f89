-- Why a workspace last stopped or was archived: who set its desired state
-- ("user" through the API or by opening it, "idle" by the TTL runner) and
-- when. keep_until is the owner's "keep running until": the idle stop waits
-- for it.
ALTER TABLE workspaces
    ADD COLUMN desired_by text NOT NULL DEFAULT 'user' CHECK (desired_by IN ('user', 'idle')),
    ADD COLUMN desired_at timestamptz,
    ADD COLUMN keep_until timestamptz;
