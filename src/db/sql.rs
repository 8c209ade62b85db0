//! Every statement orca runs, one `.sql` file each under `sql/` (the file
//! says what it does and what its parameters are), embedded at build time
//! without its whole-line comments (`sql_file!`, `build.rs`).
//! Values always go in as bind parameters (`$1`, `$2`, ...). Regenerate
//! with `scripts/gen-sql-rs.sh` after adding a file.

/// See `sql/alert_failed.sql`.
pub const ALERT_FAILED: &str = sql_file!("alert_failed.sql");

/// See `sql/alert_sent.sql`.
pub const ALERT_SENT: &str = sql_file!("alert_sent.sql");

/// See `sql/alerts_claim.sql`.
pub const ALERTS_CLAIM: &str = sql_file!("alerts_claim.sql");

/// See `sql/backend_pid.sql`.
pub const BACKEND_PID: &str = sql_file!("backend_pid.sql");

/// See `sql/database_harden.sql`.
pub const DATABASE_HARDEN: &str = sql_file!("database_harden.sql");

/// See `sql/database_warnings.sql`.
pub const DATABASE_WARNINGS: &str = sql_file!("database_warnings.sql");

/// See `sql/deploy_check.sql`.
pub const DEPLOY_CHECK: &str = sql_file!("deploy_check.sql");

/// See `sql/deploy_wait.sql`.
pub const DEPLOY_WAIT: &str = sql_file!("deploy_wait.sql");

/// See `sql/ec2_lost_heads.sql`.
pub const EC2_LOST_HEADS: &str = sql_file!("ec2_lost_heads.sql");

/// See `sql/ec2_providers.sql`.
pub const EC2_PROVIDERS: &str = sql_file!("ec2_providers.sql");

/// See `sql/ec2_runs_short.sql`.
pub const EC2_RUNS_SHORT: &str = sql_file!("ec2_runs_short.sql");

/// See `sql/ec2_upkeep_live.sql`.
pub const EC2_UPKEEP_LIVE: &str = sql_file!("ec2_upkeep_live.sql");

/// See `sql/event_add.sql`.
pub const EVENT_ADD: &str = sql_file!("event_add.sql");

/// See `sql/events_follow.sql`.
pub const EVENTS_FOLLOW: &str = sql_file!("events_follow.sql");

/// See `sql/events_list.sql`.
pub const EVENTS_LIST: &str = sql_file!("events_list.sql");

/// See `sql/events_newest.sql`.
pub const EVENTS_NEWEST: &str = sql_file!("events_newest.sql");

/// See `sql/fire.sql`.
pub const FIRE: &str = sql_file!("fire.sql");

/// See `sql/flood_end.sql`.
pub const FLOOD_END: &str = sql_file!("flood_end.sql");

/// See `sql/flood_find.sql`.
pub const FLOOD_FIND: &str = sql_file!("flood_find.sql");

/// See `sql/flood_holders.sql`.
pub const FLOOD_HOLDERS: &str = sql_file!("flood_holders.sql");

/// See `sql/flood_release.sql`.
pub const FLOOD_RELEASE: &str = sql_file!("flood_release.sql");

/// See `sql/flood_reserve.sql`.
pub const FLOOD_RESERVE: &str = sql_file!("flood_reserve.sql");

/// See `sql/function_file_record.sql`.
pub const FUNCTION_FILE_RECORD: &str = sql_file!("function_file_record.sql");

/// See `sql/function_files.sql`.
pub const FUNCTION_FILES: &str = sql_file!("function_files.sql");

/// See `sql/function_files_forget.sql`.
pub const FUNCTION_FILES_FORGET: &str = sql_file!("function_files_forget.sql");

/// See `sql/instance_add.sql`.
pub const INSTANCE_ADD: &str = sql_file!("instance_add.sql");

/// See `sql/instance_cluster.sql`.
pub const INSTANCE_CLUSTER: &str = sql_file!("instance_cluster.sql");

/// See `sql/instance_hand_over.sql`.
pub const INSTANCE_HAND_OVER: &str = sql_file!("instance_hand_over.sql");

/// See `sql/instance_head_finish.sql`.
pub const INSTANCE_HEAD_FINISH: &str = sql_file!("instance_head_finish.sql");

/// See `sql/instance_head_requeue.sql`.
pub const INSTANCE_HEAD_REQUEUE: &str = sql_file!("instance_head_requeue.sql");

/// See `sql/instance_head_round.sql`.
pub const INSTANCE_HEAD_ROUND: &str = sql_file!("instance_head_round.sql");

/// See `sql/instance_idle.sql`.
pub const INSTANCE_IDLE: &str = sql_file!("instance_idle.sql");

/// See `sql/instance_logins_orphaned.sql`.
pub const INSTANCE_LOGINS_ORPHANED: &str = sql_file!("instance_logins_orphaned.sql");

/// See `sql/instance_next_id.sql`.
pub const INSTANCE_NEXT_ID: &str = sql_file!("instance_next_id.sql");

/// See `sql/instance_poll.sql`.
pub const INSTANCE_POLL: &str = sql_file!("instance_poll.sql");

/// See `sql/instance_role_make.sql`.
pub const INSTANCE_ROLE_MAKE: &str = sql_file!("instance_role_make.sql");

/// See `sql/instance_run_over.sql`.
pub const INSTANCE_RUN_OVER: &str = sql_file!("instance_run_over.sql");

/// See `sql/instance_serve.sql`.
pub const INSTANCE_SERVE: &str = sql_file!("instance_serve.sql");

/// See `sql/instance_wake.sql`.
pub const INSTANCE_WAKE: &str = sql_file!("instance_wake.sql");

/// See `sql/instances_live_names.sql`.
pub const INSTANCES_LIVE_NAMES: &str = sql_file!("instances_live_names.sql");

/// See `sql/instances_of_run_end.sql`.
pub const INSTANCES_OF_RUN_END: &str = sql_file!("instances_of_run_end.sql");

/// See `sql/instances_to_end.sql`.
pub const INSTANCES_TO_END: &str = sql_file!("instances_to_end.sql");

/// See `sql/lead_holder.sql`.
pub const LEAD_HOLDER: &str = sql_file!("lead_holder.sql");

/// See `sql/lead_release.sql`.
pub const LEAD_RELEASE: &str = sql_file!("lead_release.sql");

/// See `sql/lead_takeover.sql`.
pub const LEAD_TAKEOVER: &str = sql_file!("lead_takeover.sql");

/// See `sql/lead_terminate.sql`.
pub const LEAD_TERMINATE: &str = sql_file!("lead_terminate.sql");

/// See `sql/lead_try.sql`.
pub const LEAD_TRY: &str = sql_file!("lead_try.sql");

/// See `sql/lead_wait.sql`.
pub const LEAD_WAIT: &str = sql_file!("lead_wait.sql");

/// See `sql/lock_intruders_end.sql`.
pub const LOCK_INTRUDERS_END: &str = sql_file!("lock_intruders_end.sql");

/// See `sql/lock_prepared_holds.sql`.
pub const LOCK_PREPARED_HOLDS: &str = sql_file!("lock_prepared_holds.sql");

/// See `sql/lock_timeout_local.sql`.
pub const LOCK_TIMEOUT_LOCAL: &str = sql_file!("lock_timeout_local.sql");

/// See `sql/login_objects_sweep.sql`.
pub const LOGIN_OBJECTS_SWEEP: &str = sql_file!("login_objects_sweep.sql");

/// See `sql/login_rotate.sql`.
pub const LOGIN_ROTATE: &str = sql_file!("login_rotate.sql");

/// See `sql/logins_prepared.sql`.
pub const LOGINS_PREPARED: &str = sql_file!("logins_prepared.sql");

/// See `sql/logins_stuck_end.sql`.
pub const LOGINS_STUCK_END: &str = sql_file!("logins_stuck_end.sql");

/// See `sql/machine_add.sql`.
pub const MACHINE_ADD: &str = sql_file!("machine_add.sql");

/// See `sql/machine_end.sql`.
pub const MACHINE_END: &str = sql_file!("machine_end.sql");

/// See `sql/machine_ending.sql`.
pub const MACHINE_ENDING: &str = sql_file!("machine_ending.sql");

/// See `sql/machine_login_shut.sql`.
pub const MACHINE_LOGIN_SHUT: &str = sql_file!("machine_login_shut.sql");

/// See `sql/machine_next_id.sql`.
pub const MACHINE_NEXT_ID: &str = sql_file!("machine_next_id.sql");

/// See `sql/machine_role_drop.sql`.
pub const MACHINE_ROLE_DROP: &str = sql_file!("machine_role_drop.sql");

/// See `sql/machine_role_make.sql`.
pub const MACHINE_ROLE_MAKE: &str = sql_file!("machine_role_make.sql");

/// See `sql/machine_role_revoke.sql`.
pub const MACHINE_ROLE_REVOKE: &str = sql_file!("machine_role_revoke.sql");

/// See `sql/metrics_ends.sql`.
pub const METRICS_ENDS: &str = sql_file!("metrics_ends.sql");

/// See `sql/metrics_read.sql`.
pub const METRICS_READ: &str = sql_file!("metrics_read.sql");

/// See `sql/migrate_lock.sql`.
pub const MIGRATE_LOCK: &str = sql_file!("migrate_lock.sql");

/// See `sql/migration_record.sql`.
pub const MIGRATION_RECORD: &str = sql_file!("migration_record.sql");

/// See `sql/migrations_applied.sql`.
pub const MIGRATIONS_APPLIED: &str = sql_file!("migrations_applied.sql");

/// See `sql/migrations_count.sql`.
pub const MIGRATIONS_COUNT: &str = sql_file!("migrations_count.sql");

/// See `sql/migrations_table.sql`.
pub const MIGRATIONS_TABLE: &str = sql_file!("migrations_table.sql");

/// See `sql/next_fire_set.sql`.
pub const NEXT_FIRE_SET: &str = sql_file!("next_fire_set.sql");

/// See `sql/pipeline_get.sql`.
pub const PIPELINE_GET: &str = sql_file!("pipeline_get.sql");

/// See `sql/pipeline_pause.sql`.
pub const PIPELINE_PAUSE: &str = sql_file!("pipeline_pause.sql");

/// See `sql/pipelines_list.sql`.
pub const PIPELINES_LIST: &str = sql_file!("pipelines_list.sql");

/// See `sql/pool_machines_live.sql`.
pub const POOL_MACHINES_LIVE: &str = sql_file!("pool_machines_live.sql");

/// See `sql/pool_status.sql`.
pub const POOL_STATUS: &str = sql_file!("pool_status.sql");

/// See `sql/pools_list.sql`.
pub const POOLS_LIST: &str = sql_file!("pools_list.sql");

/// See `sql/pools_view.sql`.
pub const POOLS_VIEW: &str = sql_file!("pools_view.sql");

/// See `sql/prune_events.sql`.
pub const PRUNE_EVENTS: &str = sql_file!("prune_events.sql");

/// See `sql/prune_instances.sql`.
pub const PRUNE_INSTANCES: &str = sql_file!("prune_instances.sql");

/// See `sql/prune_machines.sql`.
pub const PRUNE_MACHINES: &str = sql_file!("prune_machines.sql");

/// See `sql/prune_runs.sql`.
pub const PRUNE_RUNS: &str = sql_file!("prune_runs.sql");

/// See `sql/prune_schedulers.sql`.
pub const PRUNE_SCHEDULERS: &str = sql_file!("prune_schedulers.sql");

/// See `sql/register_pipeline.sql`.
pub const REGISTER_PIPELINE: &str = sql_file!("register_pipeline.sql");

/// See `sql/register_pool.sql`.
pub const REGISTER_POOL: &str = sql_file!("register_pool.sql");

/// See `sql/retire_pipelines.sql`.
pub const RETIRE_PIPELINES: &str = sql_file!("retire_pipelines.sql");

/// See `sql/retire_pools.sql`.
pub const RETIRE_POOLS: &str = sql_file!("retire_pools.sql");

/// See `sql/roles_orphaned.sql`.
pub const ROLES_ORPHANED: &str = sql_file!("roles_orphaned.sql");

/// See `sql/run_attempts.sql`.
pub const RUN_ATTEMPTS: &str = sql_file!("run_attempts.sql");

/// See `sql/run_cancel.sql`.
pub const RUN_CANCEL: &str = sql_file!("run_cancel.sql");

/// See `sql/run_finish.sql`.
pub const RUN_FINISH: &str = sql_file!("run_finish.sql");

/// See `sql/run_follow.sql`.
pub const RUN_FOLLOW: &str = sql_file!("run_follow.sql");

/// See `sql/run_queue.sql`.
pub const RUN_QUEUE: &str = sql_file!("run_queue.sql");

/// See `sql/run_requeue.sql`.
pub const RUN_REQUEUE: &str = sql_file!("run_requeue.sql");

/// See `sql/run_retry.sql`.
pub const RUN_RETRY: &str = sql_file!("run_retry.sql");

/// See `sql/run_retry_lock.sql`.
pub const RUN_RETRY_LOCK: &str = sql_file!("run_retry_lock.sql");

/// See `sql/run_state.sql`.
pub const RUN_STATE: &str = sql_file!("run_state.sql");

/// See `sql/run_waits.sql`.
pub const RUN_WAITS: &str = sql_file!("run_waits.sql");

/// See `sql/runs_beat.sql`.
pub const RUNS_BEAT: &str = sql_file!("runs_beat.sql");

/// See `sql/runs_cancel_queued.sql`.
pub const RUNS_CANCEL_QUEUED: &str = sql_file!("runs_cancel_queued.sql");

/// See `sql/runs_each_going.sql`.
pub const RUNS_EACH_GOING: &str = sql_file!("runs_each_going.sql");

/// See `sql/runs_each_tally.sql`.
pub const RUNS_EACH_TALLY: &str = sql_file!("runs_each_tally.sql");

/// See `sql/runs_finish.sql`.
pub const RUNS_FINISH: &str = sql_file!("runs_finish.sql");

/// See `sql/runs_list.sql`.
pub const RUNS_LIST: &str = sql_file!("runs_list.sql");

/// See `sql/runs_queue_each.sql`.
pub const RUNS_QUEUE_EACH: &str = sql_file!("runs_queue_each.sql");

/// See `sql/runs_start.sql`.
pub const RUNS_START: &str = sql_file!("runs_start.sql");

/// See `sql/scheduler_ask_drain.sql`.
pub const SCHEDULER_ASK_DRAIN: &str = sql_file!("scheduler_ask_drain.sql");

/// See `sql/scheduler_beat.sql`.
pub const SCHEDULER_BEAT: &str = sql_file!("scheduler_beat.sql");

/// See `sql/scheduler_drain.sql`.
pub const SCHEDULER_DRAIN: &str = sql_file!("scheduler_drain.sql");

/// See `sql/scheduler_end.sql`.
pub const SCHEDULER_END: &str = sql_file!("scheduler_end.sql");

/// See `sql/scheduler_join.sql`.
pub const SCHEDULER_JOIN: &str = sql_file!("scheduler_join.sql");

/// See `sql/scheduler_lead.sql`.
pub const SCHEDULER_LEAD: &str = sql_file!("scheduler_lead.sql");

/// See `sql/schedulers_list.sql`.
pub const SCHEDULERS_LIST: &str = sql_file!("schedulers_list.sql");

/// See `sql/schema_present.sql`.
pub const SCHEMA_PRESENT: &str = sql_file!("schema_present.sql");

/// See `sql/sensor_queue.sql`.
pub const SENSOR_QUEUE: &str = sql_file!("sensor_queue.sql");

/// See `sql/stack_id.sql`.
pub const STACK_ID: &str = sql_file!("stack_id.sql");

/// See `sql/startable.sql`.
pub const STARTABLE: &str = sql_file!("startable.sql");

/// See `sql/status.sql`.
pub const STATUS: &str = sql_file!("status.sql");

/// See `sql/status_failures.sql`.
pub const STATUS_FAILURES: &str = sql_file!("status_failures.sql");

/// See `sql/sweep.sql`.
pub const SWEEP: &str = sql_file!("sweep.sql");

/// See `sql/tick_pipelines.sql`.
pub const TICK_PIPELINES: &str = sql_file!("tick_pipelines.sql");

/// See `sql/wake_end.sql`.
pub const WAKE_END: &str = sql_file!("wake_end.sql");

/// See `sql/wake_listen.sql`.
pub const WAKE_LISTEN: &str = sql_file!("wake_listen.sql");

/// See `sql/worker_finish.sql`.
pub const WORKER_FINISH: &str = sql_file!("worker_finish.sql");

/// See `sql/worker_hello.sql`.
pub const WORKER_HELLO: &str = sql_file!("worker_hello.sql");

/// See `sql/worker_notice.sql`.
pub const WORKER_NOTICE: &str = sql_file!("worker_notice.sql");

/// See `sql/worker_requeue.sql`.
pub const WORKER_REQUEUE: &str = sql_file!("worker_requeue.sql");

/// See `sql/worker_round.sql`.
pub const WORKER_ROUND: &str = sql_file!("worker_round.sql");

/// See `sql/worker_wake.sql`.
pub const WORKER_WAKE: &str = sql_file!("worker_wake.sql");

/// Every function of schema `orca`, by name: its current definition (every
/// overload, its settings and grants), one file each under `sql/functions/`,
/// applied by `orca migrate` when it changed (`db::migrate`).
pub const FUNCTIONS: &[(&str, &str)] = &[
    ("attempt_keep", sql_file!("functions/attempt_keep.sql")),
    ("bounded_output", sql_file!("functions/bounded_output.sql")),
    ("bounded_why", sql_file!("functions/bounded_why.sql")),
    ("check_beat", sql_file!("functions/check_beat.sql")),
    ("claim_lock_add", sql_file!("functions/claim_lock_add.sql")),
    ("claim_runs", sql_file!("functions/claim_runs.sql")),
    ("ended_when", sql_file!("functions/ended_when.sql")),
    ("finish_attempt", sql_file!("functions/finish_attempt.sql")),
    (
        "finish_attempts",
        sql_file!("functions/finish_attempts.sql"),
    ),
    (
        "instance_cluster",
        sql_file!("functions/instance_cluster.sql"),
    ),
    (
        "instance_head_beat",
        sql_file!("functions/instance_head_beat.sql"),
    ),
    (
        "instance_head_finish",
        sql_file!("functions/instance_head_finish.sql"),
    ),
    (
        "instance_head_output",
        sql_file!("functions/instance_head_output.sql"),
    ),
    (
        "instance_head_requeue",
        sql_file!("functions/instance_head_requeue.sql"),
    ),
    (
        "instance_head_round",
        sql_file!("functions/instance_head_round.sql"),
    ),
    ("instance_heads", sql_file!("functions/instance_heads.sql")),
    ("instance_idle", sql_file!("functions/instance_idle.sql")),
    ("instance_poll", sql_file!("functions/instance_poll.sql")),
    (
        "instance_role_make",
        sql_file!("functions/instance_role_make.sql"),
    ),
    (
        "instance_run_over",
        sql_file!("functions/instance_run_over.sql"),
    ),
    ("instance_serve", sql_file!("functions/instance_serve.sql")),
    ("instance_wake", sql_file!("functions/instance_wake.sql")),
    (
        "instances_wake_next",
        sql_file!("functions/instances_wake_next.sql"),
    ),
    (
        "login_objects_sweep",
        sql_file!("functions/login_objects_sweep.sql"),
    ),
    (
        "login_role_make",
        sql_file!("functions/login_role_make.sql"),
    ),
    ("login_rotate", sql_file!("functions/login_rotate.sql")),
    (
        "machine_role_drop",
        sql_file!("functions/machine_role_drop.sql"),
    ),
    (
        "machine_role_make",
        sql_file!("functions/machine_role_make.sql"),
    ),
    (
        "machine_role_revoke",
        sql_file!("functions/machine_role_revoke.sql"),
    ),
    ("on_lost", sql_file!("functions/on_lost.sql")),
    ("output_fold", sql_file!("functions/output_fold.sql")),
    ("output_put", sql_file!("functions/output_put.sql")),
    ("output_tail", sql_file!("functions/output_tail.sql")),
    ("outputs_put", sql_file!("functions/outputs_put.sql")),
    (
        "requeue_attempt",
        sql_file!("functions/requeue_attempt.sql"),
    ),
    ("requeue_bound", sql_file!("functions/requeue_bound.sql")),
    ("runs_beat", sql_file!("functions/runs_beat.sql")),
    ("runs_wake_pool", sql_file!("functions/runs_wake_pool.sql")),
    (
        "runs_wake_pool_requeue",
        sql_file!("functions/runs_wake_pool_requeue.sql"),
    ),
    (
        "runs_wake_scheduler",
        sql_file!("functions/runs_wake_scheduler.sql"),
    ),
    ("wake_channel", sql_file!("functions/wake_channel.sql")),
    ("worker_beat", sql_file!("functions/worker_beat.sql")),
    ("worker_claim", sql_file!("functions/worker_claim.sql")),
    ("worker_finish", sql_file!("functions/worker_finish.sql")),
    ("worker_hello", sql_file!("functions/worker_hello.sql")),
    ("worker_machine", sql_file!("functions/worker_machine.sql")),
    ("worker_notice", sql_file!("functions/worker_notice.sql")),
    ("worker_output", sql_file!("functions/worker_output.sql")),
    ("worker_requeue", sql_file!("functions/worker_requeue.sql")),
    ("worker_round", sql_file!("functions/worker_round.sql")),
    ("worker_wake", sql_file!("functions/worker_wake.sql")),
];
