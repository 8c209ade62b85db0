-- `orca run P --each FILE`: queues one run of pipeline $1 (registered, not
-- retired) per element of $3, each element a line whose tab-separated
-- fields are its run's arguments (checked by `commands::each::lines`: none
-- empty, no NUL, no CR), all in this one statement. $2: --fill. Each run's
-- `queued` event says $4 and its line's number. Ids are taken in the
-- lines' order (the sorted subquery is not flattened, so nextval follows
-- it). Returns the runs' ids in the lines' order (NULL when there is no
-- such pipeline: nothing queued) and whether the pipeline is paused.
WITH p AS (
    SELECT name, paused FROM orca.pipelines WHERE name = $1 AND NOT retired
), l AS (
    SELECT nextval('orca.runs_id_seq') AS id, s.n, s.line
    FROM (
        SELECT u.line, u.n
        FROM p CROSS JOIN unnest($3::text[]) WITH ORDINALITY AS u (line, n)
        ORDER BY u.n
    ) s
), r AS (
    INSERT INTO orca.runs (id, pipeline, fill, args, origin)
    SELECT l.id, p.name, $2, string_to_array(l.line, E'\t'), 'manual'
    FROM l CROSS JOIN p
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT l.id, p.name, 'queued', $4::text || l.n
    FROM l CROSS JOIN p
)
SELECT (SELECT array_agg(id ORDER BY n) FROM l) AS ids, (SELECT paused FROM p) AS paused
