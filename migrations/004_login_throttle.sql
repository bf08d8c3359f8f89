-- Failed logins per user and client address. The strict backoff is kept
-- here, so one address guessing a password cannot lock the user out from
-- everywhere; users.failed_logins and locked_until hold a looser limit
-- over all addresses together.
CREATE TABLE login_throttle (
    user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    client       text NOT NULL,
    failures     integer NOT NULL DEFAULT 0,
    locked_until timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, client)
);
