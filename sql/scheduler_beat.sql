-- Marks scheduler $1 seen (clock_timestamp: a beat that waited out a stall
-- is not stale on landing), with $2 the runs its processes are, and this
-- session as its deciding one. Returns whether it was asked to drain, and the
-- newest live scheduler after it that isn't draining (NULL if none). $3: the
-- stale limit (s). NULL row: the scheduler has ended (or was never there).
UPDATE orca.schedulers SET seen_at = clock_timestamp(), running = $2, backend = pg_backend_pid()
WHERE id = $1 AND ended_at IS NULL
RETURNING drain_asked,
    (SELECT max(n.id) FROM orca.schedulers n
     WHERE n.ended_at IS NULL AND NOT n.draining
       -- Newer: a binary that knows more migrations, or a later join of one
       -- that knows as many; an older binary never takes the lead back.
       AND (n.migrations > orca.schedulers.migrations
            OR (n.migrations = orca.schedulers.migrations AND n.id > $1))
       AND n.seen_at > now() - make_interval(secs => $3)) AS newer
