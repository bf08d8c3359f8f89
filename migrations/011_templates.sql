-- What a workspace is made of: its template, the version of the template
-- it was last started from (a hash of what the template renders; empty
-- before its first start under templates) and the parameter values its
-- owner chose. Existing workspaces are of the template the workspace
-- block makes.
ALTER TABLE workspaces
    ADD COLUMN template         text  NOT NULL DEFAULT 'default',
    ADD COLUMN template_version text  NOT NULL DEFAULT '',
    ADD COLUMN parameters       jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(parameters) = 'object');

