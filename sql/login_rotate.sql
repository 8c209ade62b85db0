-- This machine's or instance's login replaces its secret: $1 is the new
-- secret's SCRAM verifier (see orca.login_rotate in migration 0005).
SELECT orca.login_rotate($1)
