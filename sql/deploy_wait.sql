-- Whether the newest live instance leads (true when none is live). $1: stale s.
SELECT coalesce((SELECT leads FROM orca.schedulers
                 WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $1)
                 ORDER BY id DESC LIMIT 1), true)
