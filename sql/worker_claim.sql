-- Claims up to $1 queued runs of this machine's pool: id, start, pipeline,
-- args and the pipeline's spec of each.
SELECT id, start, pipeline, args, spec FROM orca.worker_claim($1)
