-- The scaler's pass over pool $1: $2 demand, $3 what the last attempt came
-- to, $4 the type the walk is on; $5 what becomes of the walk's start:
-- 'now' (it started on that type now), 'clear' (it starts again from the
-- first type) or 'keep'; $6 true: an attempt was made now.
UPDATE orca.pools SET demand = $2,
    status_at = CASE WHEN status IS DISTINCT FROM $3 THEN now() ELSE status_at END,
    status = $3,
    walk_type = $4,
    walk_since = CASE $5::text WHEN 'now' THEN now() WHEN 'clear' THEN NULL ELSE walk_since END,
    tried_at = CASE WHEN $6 THEN now() ELSE tried_at END
WHERE name = $1
