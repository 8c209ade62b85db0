-- Puts attempt ($1, $2) back in the queue: its process was stopped, not
-- failed (cancelled instead, if a cancel was asked for). $3: why; $4: output.
SELECT orca.requeue_attempt($1, $2, $3, $4)
