-- Marks this machine seen and beats its attempts ($1 ids, $2 starts, $3
-- pids); returns those still running here, with whether a cancel was asked.
SELECT id, cancel FROM orca.worker_beat($1, $2, $3)
