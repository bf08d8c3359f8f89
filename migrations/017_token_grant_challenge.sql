-- A CLI login's code is bound to the codehub login run that asked for it:
-- the run sends the S256 challenge of a verifier only it knows, the
-- dashboard stores the challenge with the code, and redeeming the code
-- needs the verifier (as PKCE binds an OAuth code). Codes made before
-- this have no challenge and redeem nothing.
ALTER TABLE api_token_grants ADD COLUMN code_challenge text NOT NULL DEFAULT '';
