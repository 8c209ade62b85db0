-- A worker starting: its machine's pool, name and slots (the machine is the
-- one whose credentials this session logged in with).
SELECT pool, name, slots FROM orca.worker_hello()
