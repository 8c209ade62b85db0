-- Whether the newest live scheduler leads (true when none is live). $1: stale
-- s. $2: the image it must run ('' for any): so a wait started before the new
-- scheduler joined doesn't take the old leader for it.
SELECT coalesce((SELECT leads AND ($2 = '' OR image = $2) FROM orca.schedulers
                 WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1)
                 ORDER BY id DESC LIMIT 1), true) AS newest_leads
