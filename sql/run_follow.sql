-- What `orca logs -f` and `orca run --wait` look at: run $1's state, its
-- attempt, its output (the last 64 KiB, as its supervisor last wrote it:
-- only when $2, logs -f, wants it, and only when it is not the output whose
-- md5 is $3, the one already read) and why it is in its state; then the
-- output's md5 (when $2).
SELECT state, start,
       CASE WHEN $2 AND md5(output) IS DISTINCT FROM $3 THEN output END AS output,
       why,
       CASE WHEN $2 THEN md5(output) END AS md5
FROM orca.runs WHERE id = $1
