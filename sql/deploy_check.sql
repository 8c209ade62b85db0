-- What `orca deploy check` needs: whether a live instance leads, the live
-- instances that know fewer migrations than $2 (this binary's floor), and
-- whether any instance is live at all.
-- $1: the stale limit (s).
SELECT
    EXISTS (SELECT 1 FROM orca.schedulers
            WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1) AND leads),
    (SELECT string_agg(format('scheduler %s on %s pid %s knows %s', id, host, pid, migrations), '; ' ORDER BY id)
     FROM orca.schedulers
     WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1) AND migrations < $2),
    EXISTS (SELECT 1 FROM orca.schedulers
            WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1))
