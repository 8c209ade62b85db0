-- Asks live instance $1 (NULL: the leader) to drain. $2: the stale limit (s).
WITH s AS (
    UPDATE orca.schedulers SET drain_asked = true
    WHERE id = (SELECT id FROM orca.schedulers
                WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $2)
                  AND CASE WHEN $1::bigint IS NULL THEN leads ELSE id = $1 END
                ORDER BY id DESC LIMIT 1)
    RETURNING id, host, pid
), e AS (
    INSERT INTO orca.events (kind, why)
    SELECT 'drain asked', format('scheduler %s on %s pid %s, by %s', id, host, pid, $3::text) FROM s
)
SELECT id FROM s
