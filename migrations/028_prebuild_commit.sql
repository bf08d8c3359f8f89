-- The repository's commit a READY prebuild holds, as its build checked it
-- out (also named in its archive's key). Prebuilds made before it was
-- recorded have none.
ALTER TABLE prebuilds
    ADD COLUMN commit text CHECK (commit ~ '^[0-9a-f]{40}([0-9a-f]{24})?$');
