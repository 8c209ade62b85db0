-- The head beats the attempt it heads ($1 ids, $2 starts, $3 pids) and
-- appends its new output ($4 ids, $5 starts, $6 where each piece begins in
-- its attempt's output, $7 the bytes); returns it while it runs at its
-- start, with whether a cancel was asked for.
SELECT id, cancel FROM orca.instance_head_round($1, $2, $3, $4, $5, $6, $7)
