-- The ID token a single sign-on session was started with, kept on the
-- server only: logging out at the provider (OpenID Connect RP-Initiated
-- Logout) sends it back as id_token_hint. It ends with its session.
CREATE TABLE oidc_sessions (
    session_hash bytea PRIMARY KEY REFERENCES sessions (token_hash) ON DELETE CASCADE,
    id_token     text NOT NULL
);
