-- This machine heard a spot notice: $1 kind ('interrupted' or 'draining'),
-- $2 the action, $3 EC2's time for it. Returns `left`: seconds until $3 by
-- the database's clock.
SELECT orca.worker_notice($1, $2, $3) AS left
