-- Asks live scheduler $1 (NULL: the leader) to drain, unless it is the only
-- live scheduler neither draining nor asked to and $4 (--force) is false:
-- then nobody would lead. $2: the stale limit (s); $3: who asks. Returns
-- the scheduler found (none: no such live scheduler), whether it was asked,
-- and how many other live schedulers neither draining nor asked to there
-- are. Those are locked first (in id order), so two asks at once, of two
-- schedulers, see each other's: the second finds the first's scheduler
-- asked, not one more that may lead.
WITH live AS (
    SELECT id FROM orca.schedulers
    WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $2)
      AND NOT draining AND NOT drain_asked
    ORDER BY id
    FOR UPDATE
), t AS (
    SELECT id FROM orca.schedulers
    WHERE ended_at IS NULL AND seen_at > now() - make_interval(secs => $2)
      AND CASE WHEN $1::bigint IS NULL THEN leads ELSE id = $1 END
    ORDER BY id DESC LIMIT 1
), o AS (
    SELECT count(*)::int AS others FROM live WHERE live.id <> (SELECT id FROM t)
), s AS (
    UPDATE orca.schedulers SET drain_asked = true
    WHERE id = (SELECT id FROM t) AND ($4::boolean OR (SELECT others FROM o) > 0)
    RETURNING id, host, pid
), e AS (
    INSERT INTO orca.events (kind, why)
    SELECT 'drain asked', format('scheduler %s on %s pid %s, by %s%s', id, host, pid, $3::text,
                                 CASE WHEN $4::boolean THEN ' (forced)' ELSE '' END) FROM s
)
SELECT t.id, EXISTS (SELECT 1 FROM s) AS asked, (SELECT others FROM o) AS others FROM t
