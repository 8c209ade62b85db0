-- Marks instance $1 seen, with $2 the runs its processes are, and this
-- session as its deciding one. Returns whether it was asked to drain, and the
-- newest live instance after it that isn't draining (NULL if none). $3: the
-- stale limit (s). NULL row: the instance has ended (or was never there).
UPDATE orca.schedulers SET seen_at = now(), running = $2, backend = pg_backend_pid()
WHERE id = $1 AND ended_at IS NULL
RETURNING drain_asked,
    (SELECT max(n.id) FROM orca.schedulers n
     WHERE n.id > $1 AND n.ended_at IS NULL AND NOT n.draining
       AND n.seen_at > now() - make_interval(secs => $3))
