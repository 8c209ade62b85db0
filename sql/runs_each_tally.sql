-- `orca run --each --wait`, once none of its runs is queued or running:
-- its runs (as in runs_each_going.sql: pipeline $1, ids $2 to $3 but for
-- $4) found, how many succeeded, and the first $5 that did not, by id,
-- with their states (failed: also timed out or lost; cancelled).
SELECT count(*) AS found,
       count(*) FILTER (WHERE state = 'succeeded' COLLATE "C") AS succeeded,
       (array_agg(id ORDER BY id) FILTER (WHERE state <> 'succeeded' COLLATE "C"))[1:$5] AS bad_ids,
       (array_agg(state ORDER BY id) FILTER (WHERE state <> 'succeeded' COLLATE "C"))[1:$5] AS bad_states
FROM orca.runs
WHERE pipeline = $1 AND id BETWEEN $2 AND $3 AND id <> ALL ($4)
