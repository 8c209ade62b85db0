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
CREATE FUNCTION orca.output_put(p_id bigint, p_start integer, p_at bigint, p_bytes bytea)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_upto bigint;
    v_stored bigint;
BEGIN
    IF p_at IS NULL OR p_at < 0 OR coalesce(octet_length(p_bytes), 0) = 0 THEN
        RETURN;
    END IF;
    v_upto := p_at + octet_length(p_bytes);
    IF octet_length(p_bytes) > 65536 THEN
        p_bytes := orca.bounded_output(p_bytes);
        p_at := v_upto - 65536;
    END IF;
    SELECT max(c.upto) INTO v_stored FROM orca.output_chunks c
    WHERE c.run = p_id AND c.start = p_start;
    IF v_stored >= v_upto THEN
        RETURN;
    ELSIF v_stored > p_at THEN
        p_bytes := substring(p_bytes FROM (v_stored - p_at + 1)::integer);
        p_at := v_stored;
    END IF;
    INSERT INTO orca.output_chunks (run, start, at, upto, bytes)
    VALUES (p_id, p_start, p_at, v_upto, p_bytes);
    DELETE FROM orca.output_chunks c
    WHERE c.run = p_id AND c.start = p_start AND c.upto <= v_upto - 65536;
END
$$;

-- The appends of a beat (attempt, start, where the bytes begin, the
-- bytes): those of attempts among p_beaten (beaten in this transaction,
-- their rows locked, by their supervisor's own function) that run at that
-- start. At most 1024, as a beat's attempts.
CREATE FUNCTION orca.outputs_put(p_beaten bigint[], p_ids bigint[], p_starts integer[],
    p_at bigint[], p_bytes bytea[])
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) > 1024 OR coalesce(cardinality(p_starts), 0) > 1024
       OR coalesce(cardinality(p_at), 0) > 1024 OR coalesce(cardinality(p_bytes), 0) > 1024 THEN
        RAISE EXCEPTION 'a beat appends to at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
    PERFORM orca.output_put(o.id, o.start, o.at, o.bytes)
    FROM unnest(p_ids, p_starts, p_at, p_bytes) AS o(id, start, at, bytes)
    JOIN orca.runs r ON r.id = o.id AND r.start = o.start AND r.state = 'running'
    WHERE o.id = ANY(p_beaten);
END
$$;

-- What attempt (p_id, p_start)'s output is now: p_output (its
-- runs.output) followed by its chunks, the last 64 KiB of that.
CREATE FUNCTION orca.output_tail(p_id bigint, p_start integer, p_output bytea) RETURNS bytea
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT orca.bounded_output(coalesce(p_output, ''::bytea) || coalesce(
        (SELECT string_agg(c.bytes, ''::bytea ORDER BY c.at) FROM orca.output_chunks c
         WHERE c.run = p_id AND c.start = p_start), ''::bytea))
$$;

-- An attempt that stops running keeps its output in runs.output: its
-- chunks are folded in, unless the end writes an output of its own, and
-- deleted.
CREATE FUNCTION orca.output_fold() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.output IS NOT DISTINCT FROM OLD.output THEN
        NEW.output := orca.output_tail(OLD.id, OLD.start, OLD.output);
    END IF;
    DELETE FROM orca.output_chunks c WHERE c.run = OLD.id AND c.start = OLD.start;
    RETURN NEW;
END
$$;
CREATE TRIGGER runs_output_fold BEFORE UPDATE ON orca.runs FOR EACH ROW
WHEN (OLD.state = 'running' AND (NEW.state <> 'running' OR NEW.start <> OLD.start))
EXECUTE FUNCTION orca.output_fold();

-- The scheduler beats the attempts it supervises (their heartbeat and pid) and
-- appends their new output (p_out_*, as orca.outputs_put); returns those
-- still running at their start, with whether a cancel was asked for.
CREATE FUNCTION orca.runs_beat(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    beaten bigint[];
    cancels boolean[];
BEGIN
    WITH b AS (
        UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = x.pid
        FROM unnest(p_ids, p_starts, p_pids) AS x(id, start, pid)
        WHERE r.id = x.id AND r.start = x.start AND r.state = 'running'
        RETURNING r.id, r.cancel
    )
    SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(b.cancel), '{}')
    INTO beaten, cancels FROM b;
    PERFORM orca.outputs_put(beaten, p_out_ids, p_out_starts, p_out_at, p_out_bytes);
    RETURN QUERY SELECT b.id, b.cancel FROM unnest(beaten, cancels) AS b(id, cancel);
END
$$;

-- A worker's round trip: beats its machine and the attempts it runs (as
-- orca.worker_beat), appends their new output (p_out_*, as
-- orca.outputs_put), and with p_room > 0 claims runs (as
-- orca.worker_claim), in one transaction. A row for each attempt beaten
-- (claimed false: id and cancel) and each run claimed (claimed true: id,
-- start, pipeline, args, spec).
CREATE FUNCTION orca.worker_round(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[],
    p_room integer)
RETURNS TABLE (id bigint, start integer, cancel boolean, claimed boolean, pipeline text,
    args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    beaten bigint[];
    cancels boolean[];
BEGIN
    SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(b.cancel), '{}')
    INTO beaten, cancels FROM orca.worker_beat(p_ids, p_starts, p_pids) b;
    PERFORM orca.outputs_put(beaten, p_out_ids, p_out_starts, p_out_at, p_out_bytes);
    RETURN QUERY SELECT b.id, NULL::integer, b.cancel, false, NULL::text, NULL::text[], NULL::jsonb
    FROM unnest(beaten, cancels) AS b(id, cancel);
    IF p_room > 0 THEN
        RETURN QUERY SELECT c.id, c.start, false, true, c.pipeline, c.args, c.spec
        FROM orca.worker_claim(p_room) c;
    END IF;
END
$$;

-- The head beats the attempt it heads (as orca.instance_head_beat) and
-- appends its new output (p_out_*, as orca.outputs_put).
CREATE FUNCTION orca.instance_head_round(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    beaten bigint[];
    cancels boolean[];
BEGIN
    SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(b.cancel), '{}')
    INTO beaten, cancels FROM orca.instance_head_beat(p_ids, p_starts, p_pids) b;
    PERFORM orca.outputs_put(beaten, p_out_ids, p_out_starts, p_out_at, p_out_bytes);
    RETURN QUERY SELECT b.id, b.cancel FROM unnest(beaten, cancels) AS b(id, cancel);
END
$$;

REVOKE ALL ON FUNCTION orca.output_put(bigint, integer, bigint, bytea),
    orca.outputs_put(bigint[], bigint[], integer[], bigint[], bytea[]),
    orca.output_tail(bigint, integer, bytea), orca.output_fold(),
    orca.runs_beat(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[]),
    orca.worker_round(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[], integer),
    orca.instance_head_round(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    orca.worker_round(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[], integer)
    TO orca_worker;
GRANT EXECUTE ON FUNCTION
    orca.instance_head_round(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[])
    TO orca_instance;
