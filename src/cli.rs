//! The command line: every command, its arguments and its help.

use clap::{Args, Parser, Subcommand};

/// orca: a pipeline scheduler and EC2 fleet manager. Postgres is its only
/// channel: set ORCA_DATABASE_URL.
#[derive(Parser, Debug)]
#[command(name = "orca", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// Options every one-shot command that talks to the database takes.
#[derive(Args, Debug, Clone)]
pub struct DbOpts {
    /// Seconds to wait for the database before giving up.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    pub wait: f64,
}

/// The path to orca.toml.
#[derive(Args, Debug, Clone)]
pub struct ConfigOpts {
    /// The config file [default: $ORCA_CONFIG, else ./orca.toml].
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<String>,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Apply the embedded migrations (idempotent, safe to run twice at once).
    Migrate(DbOpts),
    /// Validate orca.toml: every problem as FILE:LINE: message (exit 2).
    Check(ConfigOpts),
    /// Write orca.toml's pipelines to the database; retire those gone from it.
    Register {
        /// The config file.
        #[command(flatten)]
        config: ConfigOpts,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Queue a run of a pipeline; prints its id.
    Run {
        /// The pipeline.
        pipeline: String,
        /// A backfill run: not held to max_runs.
        #[arg(long)]
        fill: bool,
        /// Arguments for the run's command.
        #[arg(last = true)]
        args: Vec<String>,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// List runs, newest first.
    Runs {
        /// Only this pipeline's.
        #[arg(long)]
        pipeline: Option<String>,
        /// Only runs in this state (queued, running, succeeded, failed, cancelled).
        #[arg(long)]
        state: Option<String>,
        /// How many at most.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// One JSON document.
        #[arg(long)]
        json: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Print a run's output (its last 64 KiB).
    Logs {
        /// The run's id.
        run: i64,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// What orca decided, and why; oldest first.
    Events {
        /// Only this run's.
        #[arg(long)]
        run: Option<i64>,
        /// How many (the newest) at most.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// One JSON document.
        #[arg(long)]
        json: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Cancel a run: a queued one at once, a running one by SIGTERM then SIGKILL.
    Cancel {
        /// The run's id.
        run: i64,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Pause a pipeline: it fires and starts nothing until resumed.
    Pause {
        /// The pipeline.
        pipeline: String,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Resume a paused pipeline.
    Resume {
        /// The pipeline.
        pipeline: String,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Run the scheduler until SIGTERM or SIGINT.
    Scheduler {
        /// Register this config file first (by default the database's pipelines are used as they are).
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: Option<String>,
    },
}
