-- orca:raises-floor
-- Scheduler instances (ORCA_OVERLAP=on): one row per `orca scheduler`, kept
-- fresh every tick with the runs its processes are. A binary that doesn't
-- know this table can't run beside one that does, hence the floor.

CREATE TABLE orca.schedulers (
    id          bigserial PRIMARY KEY,
    host        text NOT NULL,
    pid         integer NOT NULL,
    image       text NOT NULL DEFAULT '',
    migrations  integer NOT NULL,           -- how many migrations its binary knows
    backend     integer,                    -- pg_backend_pid() of its deciding session
    joined_at   timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz,
    running     bigint[] NOT NULL DEFAULT '{}', -- the runs its processes are
    leads       boolean NOT NULL DEFAULT false,
    lead_since  timestamptz,
    draining    boolean NOT NULL DEFAULT false,
    drain_asked boolean NOT NULL DEFAULT false
);
CREATE INDEX schedulers_open ON orca.schedulers (id) WHERE ended_at IS NULL;
CREATE INDEX runs_instance_running ON orca.runs (instance) WHERE state = 'running';
