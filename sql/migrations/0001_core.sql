-- orca:raises-floor
-- The core: pipelines, runs, events and the alert outbox.

CREATE TABLE orca.pipelines (
    name        text PRIMARY KEY,
    spec        jsonb NOT NULL,               -- the pipeline as orca.toml declares it
    placement   text NOT NULL DEFAULT 'local',
    max_runs    integer NOT NULL DEFAULT 1 CHECK (max_runs >= 1),
    schedule    text,                          -- cron, UTC
    next_fire   timestamptz,                   -- the next scheduled slot not yet fired
    paused      boolean NOT NULL DEFAULT false,
    retired     boolean NOT NULL DEFAULT false, -- no longer in orca.toml: fires and starts nothing
    registered  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orca.runs (
    id              bigserial PRIMARY KEY,
    pipeline        text NOT NULL REFERENCES orca.pipelines (name),
    state           text NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    start           integer NOT NULL DEFAULT 0,  -- the attempt: +1 each time the run is started
    fill            boolean NOT NULL DEFAULT false,
    args            text[] NOT NULL DEFAULT '{}',
    origin          text NOT NULL DEFAULT 'manual', -- manual, schedule, sensor
    scheduled_for   timestamptz,                 -- the slot a scheduled run was fired for
    failures        integer NOT NULL DEFAULT 0,  -- failed attempts so far (for retries)
    queued_at       timestamptz NOT NULL DEFAULT now(),
    not_before      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    ended_at        timestamptz,
    heartbeat       timestamptz,
    instance        bigint,                      -- the scheduler instance that started it
    host            text,
    pid             integer,
    cancel          boolean NOT NULL DEFAULT false, -- cancel asked for a running run
    exit_code       integer,
    exit_signal     integer,
    why             text,
    output          bytea NOT NULL DEFAULT ''::bytea -- the last 64 KiB of its output
);

-- The tick's hot paths look only at live runs: partial indexes keep their cost
-- independent of finished history.
CREATE INDEX runs_queued ON orca.runs (pipeline, id) WHERE state = 'queued';
CREATE INDEX runs_running ON orca.runs (pipeline) WHERE state = 'running';
CREATE INDEX runs_queued_fill ON orca.runs (pipeline, id) WHERE state = 'queued' AND fill;
CREATE UNIQUE INDEX runs_slot ON orca.runs (pipeline, scheduled_for) WHERE scheduled_for IS NOT NULL;
CREATE INDEX runs_sensor_queued ON orca.runs (pipeline) WHERE state = 'queued' AND origin = 'sensor';
CREATE INDEX runs_pipeline_id ON orca.runs (pipeline, id);

CREATE TABLE orca.events (
    id        bigserial PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    run       bigint,
    pipeline  text,
    kind      text NOT NULL,
    why       text NOT NULL DEFAULT ''
);
CREATE INDEX events_run ON orca.events (run, id) WHERE run IS NOT NULL;

-- Alerts to send: written in the same transaction as the final failure, so none is lost.
CREATE TABLE orca.alerts (
    id        bigserial PRIMARY KEY,
    run       bigint NOT NULL,
    pipeline  text NOT NULL,
    url       text NOT NULL,
    body      jsonb NOT NULL,
    attempts  integer NOT NULL DEFAULT 0,
    next_try  timestamptz NOT NULL DEFAULT now(),
    done      boolean NOT NULL DEFAULT false
);
CREATE INDEX alerts_due ON orca.alerts (next_try) WHERE NOT done;
