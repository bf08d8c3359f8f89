-- Prebuilt homes (docs/templates.md, "Prebuilt homes").

-- The owner of the workspaces that build them. It is disabled and has no
-- password (an empty hash, which no password matches), so nobody logs in
-- as it.
INSERT INTO users (id, username, password_hash, disabled)
VALUES ('codehub-prebuilds', 'codehub.prebuilds', '', true);

-- One prebuild of a template at a version: REQUESTED (an admin asked),
-- BUILDING (its workspace is cloning, running init, then archiving),
-- READY (archive_key holds the prebuilt home) or FAILED (error says why).
CREATE TABLE prebuilds (
    id           text PRIMARY KEY CHECK (id ~ '^[0-9a-hjkmnp-tv-z]{26}$'),
    template     text NOT NULL,
    version      text NOT NULL,
    status       text NOT NULL CHECK (status IN ('REQUESTED', 'BUILDING', 'READY', 'FAILED')),
    workspace_id text REFERENCES workspaces (id),
    archive_key  text,
    error        text NOT NULL DEFAULT '',
    requested_by text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz,
    CHECK ((status = 'READY') = (archive_key IS NOT NULL))
);
CREATE INDEX prebuilds_template_idx ON prebuilds (template, created_at DESC);

-- prebuild_of: the prebuild a workspace builds (its first start marks the
-- home prebuilt). from_prebuild: the prebuild a workspace started from.
-- pool_of: the template whose warm pool holds the workspace, until a
-- creation claims it (owner, name and pool_of change in one statement).
ALTER TABLE workspaces
    ADD COLUMN prebuild_of   text,
    ADD COLUMN from_prebuild text,
    ADD COLUMN pool_of       text;
CREATE INDEX workspaces_pool_idx ON workspaces (pool_of, created_at) WHERE pool_of IS NOT NULL AND deleted_at IS NULL;

-- The prebuild runner archives a builder once its home is prebuilt.
ALTER TABLE workspaces
    DROP CONSTRAINT workspaces_desired_by_check,
    ADD CONSTRAINT workspaces_desired_by_check CHECK (desired_by IN ('user', 'idle', 'schedule', 'admin', 'prebuild'));
