-- What `orca logs -f` and `orca run --wait` look at: run $1's state, its
-- attempt, its output (the last 64 KiB, as its supervisor last wrote it:
-- orca.output_tail; only when $2, logs -f, wants it, and only when it is
-- not the output whose md5 is $3, the one already read) and why it is in
-- its state; then the output's md5 (when $2).
SELECT r.state, r.start,
       CASE WHEN md5(t.output) IS DISTINCT FROM $3 THEN t.output END AS output,
       r.why, md5(t.output) AS md5
FROM orca.runs r
CROSS JOIN LATERAL (
    SELECT CASE WHEN $2 THEN orca.output_tail(r.id, r.start, r.output) END AS output
) t
WHERE r.id = $1
