-- Large objects (at most $1) and default privileges owned by machine and
-- instance logins or their groups, removed (migration 21): each one's
-- owner, what it was, and whether it is gone.
SELECT owner, what, removed FROM orca.login_objects_sweep($1)
