-- `pool-next`, every second: 'next' (run, start, head address, fresh-code
-- flag), 'ended' or 'wait' for instance $1, idle after run $2 at start $3.
SELECT outcome, run, start, address, fresh_code FROM orca.instance_poll($1, $2, $3)
