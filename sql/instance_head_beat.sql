-- The head beats the attempts it heads ($1 ids, $2 starts, $3 pids).
SELECT id, cancel FROM orca.instance_head_beat($1, $2, $3)
