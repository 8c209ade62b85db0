-- Run $1's output: its last 64 KiB, as its supervisor last wrote it (while
-- an attempt runs, what it appended so far: orca.output_tail).
SELECT orca.output_tail(id, start, output) AS output FROM orca.runs WHERE id = $1
