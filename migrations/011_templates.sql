-- What a workspace is made of: its template, the version of the template
-- it was last started from (a hash of what the template renders; empty
-- before its first start under templates) and the parameter values its
-- owner chose. Existing workspaces are of the template the workspace
-- block makes.
ALTER TABLE workspaces
    ADD COLUMN template         text  NOT NULL DEFAULT 'default',
    ADD COLUMN template_version text  NOT NULL DEFAULT '',
    ADD COLUMN parameters       jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(parameters) = 'object');


-- A user's first-start settings: a dotfiles repository cloned into every
-- new home, and a git credential (a token) for private repositories,
-- which the API never returns.
ALTER TABLE users
    ADD COLUMN dotfiles_repository text NOT NULL DEFAULT '',
    ADD COLUMN git_credential      text NOT NULL DEFAULT '';
