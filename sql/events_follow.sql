-- `orca events -f`: the events after id $4 that match ($1 run, $2 pipeline,
-- $3 kind, each when given) and were not printed yet (past $6, the last id
-- printed, or up to it and not one of $7, those printed past $4), oldest
-- first, at most $5; and `settled`, the
-- highest id past $4 whose event is over 10 seconds old by the database's
-- clock ($4 if none). Ids are taken as transactions insert, not as they
-- commit, so a follower looks again past the settled id, not past the last
-- id it printed: an event committed after a higher one is still seen (orca
-- writes its events in transactions far shorter than 10 seconds).
SELECT (SELECT coalesce(max(id), $4) FROM orca.events
        WHERE id > $4 AND at < now() - interval '10 seconds') AS settled,
       e.id, to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at,
       e.run, e.pipeline, e.kind, e.why
FROM (SELECT 1) one
LEFT JOIN LATERAL (
    SELECT * FROM orca.events
    WHERE id > $4 AND (id > $6 OR id <> ALL ($7::bigint[]))
      AND ($1::bigint IS NULL OR run = $1)
      AND ($2::text IS NULL OR pipeline = $2)
      AND ($3::text IS NULL OR kind = $3)
    ORDER BY id
    LIMIT $5
) e ON true
ORDER BY e.id
