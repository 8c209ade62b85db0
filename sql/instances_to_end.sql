-- Live instance rows the scheduler ends now ($1: the warm pool's seconds, 0:
-- none; $2: a poll older than this many seconds means the instance is gone;
-- $3: the lost limit): rows of runs no longer running at their start (with
-- no warm pool at once; with one, once their run is a lost limit over and
-- they never went idle); idle ones whose polls stopped, whose kind no
-- pipeline uses any more, more of a kind than its recent demand (the
-- instances in use, or used within the last $1 seconds; the longest idle go
-- first), or whose warm time is over. Ended with why (rows a login holds
-- locked are skipped this time); the
-- instances (name, provider, provider id, region, login, true) returned to
-- be deleted and their logins revoked. COLLATE "C": a row's run looked up
-- by its key, not through a partial index on state (migration 0011).
WITH kinds AS (
    SELECT DISTINCT md5(coalesce(spec -> 'ec2', 'null'::jsonb)::text) AS kind
    FROM orca.pipelines WHERE placement = 'ec2' AND NOT retired
), recent AS (
    SELECT kind, count(DISTINCT instance) AS n FROM orca.instances
    WHERE made_at > now() - make_interval(secs => $1::float8)
       OR idle_at > now() - make_interval(secs => $1::float8)
       OR (ended_at IS NULL AND state <> 'idle')
    GROUP BY kind
), ranked AS (
    SELECT id, row_number() OVER (PARTITION BY kind ORDER BY idle_at DESC) AS rank
    FROM orca.instances WHERE state = 'idle' AND ended_at IS NULL
), doomed AS (
    SELECT i.id,
        CASE
            WHEN i.state = 'idle' AND i.polled < now() - make_interval(secs => $2) THEN 'its polls stopped'
            WHEN i.state = 'idle' AND i.kind NOT IN (SELECT kind FROM kinds) THEN 'no pipeline uses its kind any more'
            WHEN i.state = 'idle'
                 AND (SELECT rank FROM ranked WHERE ranked.id = i.id)
                     > coalesce((SELECT n FROM recent WHERE recent.kind = i.kind), 0)
                THEN 'more idle instances of its kind than its recent demand'
            WHEN i.state = 'idle' AND i.idle_at < now() - make_interval(secs => $1::float8 + 60) THEN 'its warm time is over'
            WHEN i.state <> 'idle' AND NOT EXISTS (
                     SELECT 1 FROM orca.runs r WHERE r.id = i.run AND r.start = i.start
                       AND r.state = 'running' COLLATE "C")
                 AND ($1::float8 = 0 OR coalesce((SELECT r.ended_at FROM orca.runs r WHERE r.id = i.run), now())
                                < now() - make_interval(secs => $3))
                THEN 'its run is over'
        END AS why
    FROM orca.instances i
    WHERE i.ended_at IS NULL
), free AS (
    -- A row its instance's login holds locked (a transaction left open)
    -- waits for a later pass: it holds up no other.
    SELECT i.id FROM orca.instances i JOIN doomed d ON d.id = i.id
    WHERE d.why IS NOT NULL
    FOR UPDATE OF i SKIP LOCKED
), ended AS (
    UPDATE orca.instances i SET state = 'ended', ended_at = now(), why = d.why
    FROM doomed d WHERE i.id = d.id AND d.why IS NOT NULL AND d.id IN (SELECT id FROM free)
    RETURNING i.instance, i.provider, i.provider_id, i.region, i.login, i.run, d.why
), e AS (
    INSERT INTO orca.events (run, kind, why)
    SELECT run, 'instance ended', format('%s: %s', instance, why) FROM ended
)
SELECT instance, provider, provider_id, region, login, true AS ended FROM ended
UNION ALL
-- Doomed, but its login holds the row: that login is revoked (its sessions
-- ended) so the row is free on a later pass, however the login cycles.
SELECT i.instance, i.provider, i.provider_id, i.region, i.login, false
FROM orca.instances i JOIN doomed d ON d.id = i.id
WHERE d.why IS NOT NULL AND i.id NOT IN (SELECT id FROM free)
