-- Users signed in through an OpenID Provider are keyed by the provider's
-- issuer and their subject there; they have no password (an empty hash,
-- which no password matches). A disabled user cannot log in and has no
-- live session.
ALTER TABLE users
    ADD COLUMN disabled     boolean NOT NULL DEFAULT false,
    ADD COLUMN oidc_issuer  text,
    ADD COLUMN oidc_subject text,
    ADD CONSTRAINT users_oidc_identity_key UNIQUE (oidc_issuer, oidc_subject),
    ADD CONSTRAINT users_oidc_identity_check CHECK ((oidc_issuer IS NULL) = (oidc_subject IS NULL));

-- A login through the OpenID Provider between the redirect there and the
-- callback: the state names it, the nonce and PKCE verifier travel with it.
CREATE TABLE oidc_logins (
    state_hash    bytea PRIMARY KEY,
    nonce         text NOT NULL,
    code_verifier text NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX oidc_logins_expires_idx ON oidc_logins (expires_at);

-- Who did what, when, from where, and how it ended. Actors and targets are
-- kept by value, without foreign keys: the record outlives the user, token
-- or workspace it names.
CREATE TABLE audit_events (
    id             bigserial PRIMARY KEY,
    at             timestamptz NOT NULL DEFAULT now(),
    actor_user_id  text NOT NULL DEFAULT '',
    actor_username text NOT NULL DEFAULT '',
    actor_token_id text NOT NULL DEFAULT '',
    actor_address  text NOT NULL DEFAULT '',
    action         text NOT NULL,
    target_type    text NOT NULL DEFAULT '',
    target_id      text NOT NULL DEFAULT '',
    target_name    text NOT NULL DEFAULT '',
    outcome        text NOT NULL CHECK (outcome IN ('success', 'failure')),
    detail         text NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_at_idx ON audit_events (at);
CREATE INDEX audit_events_actor_idx ON audit_events (actor_user_id, at);
CREATE INDEX audit_events_target_idx ON audit_events (target_type, target_id, at);
