-- Beats the attempts this scheduler supervises ($1 ids, $2 starts, $3 pids)
-- and appends their new output ($4 ids, $5 starts, $6 where each piece
-- begins in its attempt's output, $7 the bytes); returns those still
-- running at their start, with whether a cancel was asked for.
SELECT id, cancel FROM orca.runs_beat($1, $2, $3, $4, $5, $6, $7)
