-- Beats the attempts this process supervises; returns those asked to cancel.
UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = b.pid
FROM unnest($1::bigint[], $2::int[], $3::int[]) AS b(id, start, pid)
WHERE r.id = b.id AND r.start = b.start AND r.state = 'running'
RETURNING r.id, r.cancel
