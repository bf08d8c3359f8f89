-- Users, sessions and workspaces. Column ownership (docs/architecture.md, "State model"):
-- the API service layer writes desired_state, deleted_at, the TTL overrides
-- and last_access_at; the controller writes every other workspace column.

CREATE TABLE users (
    id            text PRIMARY KEY,
    username      text NOT NULL UNIQUE CHECK (username ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    password_hash text NOT NULL,
    is_admin      boolean NOT NULL DEFAULT false,
    failed_logins integer NOT NULL DEFAULT 0,
    locked_until  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sessions (
    token_hash   bytea PRIMARY KEY,
    user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_user_idx ON sessions (user_id);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);

CREATE TABLE workspaces (
    id               text PRIMARY KEY CHECK (id ~ '^[0-9a-hjkmnp-tv-z]{26}$'),
    owner_id         text NOT NULL REFERENCES users (id),
    name             text NOT NULL,
    description      text NOT NULL DEFAULT '',
    image            text NOT NULL,

    desired_state    text NOT NULL DEFAULT 'RUNNING'
                     CHECK (desired_state IN ('RUNNING', 'STANDBY', 'ARCHIVED', 'DELETED')),
    phase            text NOT NULL DEFAULT 'PENDING'
                     CHECK (phase IN ('PENDING', 'ARCHIVED', 'STANDBY', 'RUNNING', 'ERROR', 'DELETING', 'DELETED')),
    operation        text NOT NULL DEFAULT 'NONE'
                     CHECK (operation IN ('NONE', 'PROVISIONING', 'RESTORING', 'STARTING', 'STOPPING',
                                          'ARCHIVING', 'CREATE_EMPTY_ARCHIVE', 'DELETING')),
    op_id            text,
    op_started_at    timestamptz,
    op_attempt       integer NOT NULL DEFAULT 0,
    conditions       jsonb NOT NULL DEFAULT '{}'::jsonb,
    archive_key      text,
    restore_marker   text,
    error_reason     text,
    error_message    text,
    error_count      integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    observed_at      timestamptz,
    phase_changed_at timestamptz NOT NULL DEFAULT now(),
    last_access_at   timestamptz NOT NULL DEFAULT now(),
    standby_ttl      interval,
    archive_ttl      interval,

    version          bigint NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    deleted_at       timestamptz
);

-- Names are unique among an owner's live workspaces.
CREATE UNIQUE INDEX workspaces_owner_name_idx ON workspaces (owner_id, name) WHERE deleted_at IS NULL;
-- Dashboard and limit queries: an owner's live workspaces.
CREATE INDEX workspaces_owner_idx ON workspaces (owner_id) WHERE deleted_at IS NULL;
-- Global running limit.
CREATE INDEX workspaces_desired_running_idx ON workspaces (id) WHERE desired_state = 'RUNNING' AND deleted_at IS NULL;
-- Controller: everything not yet fully deleted.
CREATE INDEX workspaces_active_idx ON workspaces (id) WHERE phase <> 'DELETED';
-- TTL runner: idle RUNNING and STANDBY workspaces without an operation.
CREATE INDEX workspaces_ttl_idx ON workspaces (phase, last_access_at) WHERE operation = 'NONE' AND deleted_at IS NULL;
-- GC: soft-deleted workspaces by deletion time.
CREATE INDEX workspaces_deleted_idx ON workspaces (deleted_at) WHERE deleted_at IS NOT NULL;

-- Leader fencing: the coordinator that holds the advisory lock bumps the
-- epoch; controller writes carry the epoch they were planned under and fail
-- once a newer leader exists.
CREATE TABLE coordinator_epoch (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch       bigint NOT NULL,
    holder      text NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO coordinator_epoch (epoch, holder) VALUES (0, '');

CREATE FUNCTION workspaces_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := OLD.version + 1;
    NEW.updated_at := now();
    IF NEW.phase IS DISTINCT FROM OLD.phase THEN
        NEW.phase_changed_at := now();
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER workspaces_touch BEFORE UPDATE ON workspaces
    FOR EACH ROW WHEN (OLD IS DISTINCT FROM NEW) EXECUTE FUNCTION workspaces_touch();

-- Every change is announced on channel codehub_workspace; the payload is a
-- hint (id, owner, version, kind), never the state itself.
CREATE FUNCTION workspaces_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text := 'updated';
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'desired';
    ELSIF NEW.deleted_at IS NOT NULL AND OLD.deleted_at IS NULL THEN
        kind := 'deleted';
    ELSIF NEW.desired_state IS DISTINCT FROM OLD.desired_state
       OR NEW.error_count < OLD.error_count THEN
        kind := 'desired';
    END IF;
    PERFORM pg_notify('codehub_workspace', json_build_object(
        'id', NEW.id, 'owner_id', NEW.owner_id, 'version', NEW.version, 'kind', kind)::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER workspaces_notify AFTER INSERT OR UPDATE ON workspaces
    FOR EACH ROW EXECUTE FUNCTION workspaces_notify();
