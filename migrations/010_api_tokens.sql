-- Personal API tokens: a user's (or, with is_admin, an administrator's)
-- credential for scripts and the CLI, sent as a bearer token to /api/v1
-- only. The secret is never stored, only its keyed hash (deployment key
-- "api-tokens"). Revoking a token deletes its row.
CREATE TABLE api_tokens (
    id           text PRIMARY KEY,
    user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    secret_hash  bytea NOT NULL UNIQUE,
    scope        text NOT NULL CHECK (scope IN ('read', 'read-write')),
    is_admin     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    last_used_at timestamptz
);
CREATE INDEX api_tokens_user_idx ON api_tokens (user_id);

-- The CLI's browser login: the dashboard approves and gets a one-time
-- code, which the CLI, on the same machine, exchanges for a token. The
-- code is good for a minute and stored hashed like every secret.
CREATE TABLE api_token_grants (
    code_hash  bytea PRIMARY KEY,
    user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    expires_at timestamptz NOT NULL
);
CREATE INDEX api_token_grants_expires_idx ON api_token_grants (expires_at);
