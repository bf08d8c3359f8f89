-- A single sign-on login remembers where the browser was going, so that it
-- lands there (the CLI's approval page, say) once the provider sends it back.
ALTER TABLE oidc_logins ADD COLUMN next text NOT NULL DEFAULT '';
