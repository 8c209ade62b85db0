-- A worker's wake channel: its pool's (orca.worker_wake, migration 27).
SELECT orca.worker_wake() AS channel
