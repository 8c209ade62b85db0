-- What `orca logs -f` and `orca run --wait` look at: run $1's state, its
-- attempt, its output (the last 64 KiB, as its supervisor last wrote it)
-- and why it is in its state.
SELECT state, start, output, why FROM orca.runs WHERE id = $1
