-- What `orca deploy check` needs: whether a live scheduler leads, the live
-- schedulers that know fewer migrations than $2 (this binary's floor: each
-- named, and how many it knows, in the same order), and
-- whether any scheduler is live at all, whether any live one is not
-- draining nor asked to (one that may lead), and the live ones draining or
-- asked to, each named.
-- $1: the stale limit (s).
SELECT
    EXISTS (SELECT 1 FROM orca.schedulers
            WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1) AND leads) AS led,
    ARRAY(SELECT format('scheduler %s on %s pid %s', id, host, pid)
          FROM orca.schedulers
          WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1) AND migrations < $2
          ORDER BY id) AS names,
    ARRAY(SELECT migrations
          FROM orca.schedulers
          WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1) AND migrations < $2
          ORDER BY id) AS known,
    EXISTS (SELECT 1 FROM orca.schedulers
            WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1)) AS any_live,
    EXISTS (SELECT 1 FROM orca.schedulers
            WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1)
              AND NOT draining AND NOT drain_asked) AS any_undrained,
    ARRAY(SELECT format('scheduler %s on %s pid %s', id, host, pid)
          FROM orca.schedulers
          WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1)
            AND (draining OR drain_asked)
          ORDER BY id) AS draining
