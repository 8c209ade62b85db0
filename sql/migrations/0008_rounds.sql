-- What a fleet costs the database (issue 14). A machine's or instance's
-- process holds one connection, whose one round trip a second carries its
-- beat, its runs' new output and (a worker's) its claim; and a running
-- attempt's output is appended, not written whole again every second.
--
-- A running attempt's output is its supervisor's appends, kept in
-- orca.output_chunks where each begins in the attempt's output stream;
-- those wholly before the last 64 KiB are deleted as new ones come. What
-- readers see is orca.output_tail(): runs.output followed by the chunks,
-- its last 64 KiB. When an attempt stops running (whoever ends it: its
-- supervisor, a sweep, a lost machine), its chunks are deleted, folded
-- into runs.output first unless the end writes an output of its own (the
-- complete final tail): runs.output is an ended attempt's tail, as before.
--
-- What older binaries call stays as it was (orca.worker_beat,
-- orca.worker_output, orca.worker_claim, orca.instance_head_beat,
-- orca.instance_head_output; an older scheduler's beats and output are
-- UPDATEs of orca.runs): their output is runs.output itself, which readers
-- still see.

CREATE TABLE orca.output_chunks (
    run    bigint NOT NULL,
    start  integer NOT NULL,
    at     bigint NOT NULL,   -- where its first byte is in the attempt's output
    upto   bigint NOT NULL,   -- where it ends: at + its length
    bytes  bytea NOT NULL,
    PRIMARY KEY (run, start, at)
);
REVOKE ALL ON TABLE orca.output_chunks FROM PUBLIC;

-- Appends p_bytes, which begin at byte p_at of attempt (p_id, p_start)'s
-- output, and deletes what ends before its last 64 KiB. Bytes stored
-- already (sent again after an answer was lost) are not stored twice. The
-- caller has made sure the attempt runs and is its own.
-- orca.output_put(bigint,integer,bigint,bytea) made here: its body is in sql/functions/output_put.sql.

-- The appends of a beat (attempt, start, where the bytes begin, the
-- bytes): those of attempts among p_beaten (beaten in this transaction,
-- their rows locked, by their supervisor's own function) that run at that
-- start. At most 1024, as a beat's attempts.
-- orca.outputs_put(bigint[],bigint[],integer[],bigint[],bytea[]) made here: its body is in sql/functions/outputs_put.sql.

-- What attempt (p_id, p_start)'s output is now: p_output (its
-- runs.output) followed by its chunks, the last 64 KiB of that.
-- orca.output_tail(bigint,integer,bytea) made here: its body is in sql/functions/output_tail.sql.

-- An attempt that stops running keeps its output in runs.output: its
-- chunks are folded in, unless the end writes an output of its own, and
-- deleted.
-- orca.output_fold() made here: its body is in sql/functions/output_fold.sql.
-- A stand-in until that file replaces it as `orca migrate` ends: the
-- trigger below needs its function.
CREATE FUNCTION orca.output_fold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER runs_output_fold BEFORE UPDATE ON orca.runs FOR EACH ROW
WHEN (OLD.state = 'running' AND (NEW.state <> 'running' OR NEW.start <> OLD.start))
EXECUTE FUNCTION orca.output_fold();

-- The scheduler beats the attempts it supervises (their heartbeat and pid) and
-- appends their new output (p_out_*, as orca.outputs_put); returns those
-- still running at their start, with whether a cancel was asked for.
-- orca.runs_beat(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[]) made here: its body is in sql/functions/runs_beat.sql.

-- A worker's round trip: beats its machine and the attempts it runs (as
-- orca.worker_beat), appends their new output (p_out_*, as
-- orca.outputs_put), and with p_room > 0 claims runs (as
-- orca.worker_claim), in one transaction. A row for each attempt beaten
-- (claimed false: id and cancel) and each run claimed (claimed true: id,
-- start, pipeline, args, spec).
-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer) made here: its body is in sql/functions/worker_round.sql.

-- The head beats the attempt it heads (as orca.instance_head_beat) and
-- appends its new output (p_out_*, as orca.outputs_put).
-- orca.instance_head_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[]) made here: its body is in sql/functions/instance_head_round.sql.

