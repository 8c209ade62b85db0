//! The command line: every command, its arguments and its help.

use clap::{Args, Parser, Subcommand};

/// orca: a pipeline scheduler and EC2 fleet manager. Postgres is its only
/// channel: set ORCA_DATABASE_URL.
#[derive(Parser, Debug)]
/// `orca` alone prints this help on stderr and exits 2 (clap's
/// `arg_required_else_help`).
#[command(name = "orca", version = VERSION, about, long_about = None, arg_required_else_help = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// What `orca --version` says after `orca `: the crate's version, the
/// commit it was built from (`build.rs`: `unknown` outside a git checkout)
/// and the architecture it was built for (`x86_64`, `aarch64`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("ORCA_COMMIT"),
    ", ",
    env!("ORCA_ARCH"),
    ")"
);

/// Options every one-shot command that talks to the database takes.
#[derive(Args, Debug, Clone)]
pub struct DbOpts {
    /// Seconds to wait for the database before giving up (a login it
    /// refuses is given up at once). `--wait` is its old name, still taken.
    #[arg(
        long = "db-wait",
        alias = "wait",
        default_value_t = 10.0,
        value_name = "S"
    )]
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
    /// Queue a run of a pipeline; prints its id (--wait: and waits for its end).
    ///
    /// With --wait, it waits for the run's final outcome, after its retries:
    /// exit 0 if it succeeded, 1 if it failed, timed out or was cancelled.
    /// With --each FILE, one run per line of FILE (- : standard input), its
    /// tab-separated fields the run's arguments, all queued or none; prints
    /// the first and last id (--json: every id).
    Run {
        /// The pipeline.
        pipeline: String,
        /// A backfill run: not held to max_runs.
        #[arg(long)]
        fill: bool,
        /// Wait for the run to end: exit 0 if it succeeded, 1 if it failed,
        /// timed out or was cancelled.
        #[arg(long)]
        wait: bool,
        /// Seconds to wait for the database before giving up (--wait S of
        /// the other commands).
        #[arg(long = "db-wait", default_value_t = 10.0, value_name = "S")]
        db_wait: f64,
        /// One run per line of FILE (- : standard input), the line's
        /// tab-separated fields its arguments, in one transaction: a bad
        /// line (empty, a CR or NUL, not UTF-8, over 65536 bytes or 256
        /// fields) is named by its number and nothing is queued; at most
        /// 100000 lines and 64 MiB. --wait: waits for them all (exit 1 if
        /// any did not succeed).
        #[arg(long, value_name = "FILE", conflicts_with = "args")]
        each: Option<String>,
        /// With --each: print every id, in the lines' order, as a JSON
        /// array (not the first and last).
        #[arg(long, requires = "each")]
        json: bool,
        /// Arguments for the run's command.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// List runs, newest first.
    Runs {
        /// Only this pipeline's.
        #[arg(long)]
        pipeline: Option<String>,
        /// Only runs in this state (queued, running, succeeded, failed, cancelled).
        #[arg(long)]
        state: Option<String>,
        /// Only runs due to start at least S seconds ago (queued, and past any
        /// retry delay; the database's clock): with --state queued, the runs
        /// that have waited that long, whatever else --limit leaves out.
        #[arg(long, value_name = "S")]
        older_than: Option<f64>,
        /// How many at most.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// A JSON array of runs.
        #[arg(long)]
        json: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Print a run's output, each attempt's (its last 64 KiB) under a line
    /// naming it; with -f, follow it until the run ends.
    Logs {
        /// The run's id.
        run: i64,
        /// Keep printing the run's output as it arrives until the run has
        /// ended (across its retries, each attempt under its line), then
        /// exit 0.
        #[arg(short = 'f', long, conflicts_with = "attempt")]
        follow: bool,
        /// Only attempt N's output (1 is the first), under its line.
        #[arg(long, value_name = "N")]
        attempt: Option<i32>,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// What orca decided, and why; oldest first (-f: and then as it comes).
    Events {
        /// Only this run's.
        #[arg(long)]
        run: Option<i64>,
        /// Only this pipeline's.
        #[arg(long, value_name = "P")]
        pipeline: Option<String>,
        /// Only events of this kind (queued, started, failed, retried, ...).
        #[arg(long, value_name = "K")]
        kind: Option<String>,
        /// Only events since then: a duration back from now (30s, 10m, 2h,
        /// 1d) or an RFC 3339 time (2026-01-31T09:00:00Z).
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// How many (the newest) at most.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Then print new events as they come (every half second) until
        /// Ctrl-C or until the reader of its output goes.
        #[arg(short = 'f', long, conflicts_with = "json")]
        follow: bool,
        /// A JSON array of events.
        #[arg(long)]
        json: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Cancel a run: a queued one at once, a running one by SIGTERM then
    /// SIGKILL; or, with --pipeline P --queued, every queued run of P.
    Cancel {
        /// The run's id.
        #[arg(required_unless_present = "pipeline", conflicts_with = "pipeline")]
        run: Option<i64>,
        /// With --queued: the pipeline whose queued runs to cancel.
        #[arg(long, value_name = "P", requires = "queued")]
        pipeline: Option<String>,
        /// With --pipeline: cancel every queued run of it (running ones go on).
        #[arg(long, requires = "pipeline")]
        queued: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Queue a new run of an ended run's pipeline with the same arguments
    /// (and --fill); prints its id.
    Retry {
        /// The ended run's id.
        run: i64,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Each pipeline: placement, schedule and next fire, paused, max_runs,
    /// on_lost, runs running and queued, the last ended run.
    Pipelines {
        /// Retired pipelines too.
        #[arg(long)]
        all: bool,
        /// A JSON array of pipelines.
        #[arg(long)]
        json: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// One screen: who leads, the queue, each pool's machines, the last
    /// failures; exit 0 when a live scheduler leads, else 1 (a health check).
    Status {
        /// One JSON object.
        #[arg(long)]
        json: bool,
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
    /// Run the scheduler until SIGTERM or SIGINT (ORCA_OVERLAP=on: SIGTERM drains).
    Scheduler {
        /// Register this config file once it leads (by default the database's pipelines are used as they are).
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: Option<String>,
        /// Act on running schedulers instead.
        #[command(subcommand)]
        action: Option<SchedulerCmd>,
    },
    /// A pool machine's worker: takes runs of its pool and runs them, with the
    /// machine's own credentials (ORCA_TOKEN, given when the machine is made).
    Worker {
        /// The pool this machine belongs to.
        #[arg(long)]
        pool: String,
    },
    /// Each pool: its machines, its demand, and what the last attempt to make
    /// a machine came to.
    Pools {
        /// A JSON array of pools.
        #[arg(long)]
        json: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// An EC2 run's instance serves its run: the head runs the driver beside
    /// head_service; a worker runs worker_service until the run is over.
    #[command(name = "ec2-serve")]
    Ec2Serve {
        /// The provider's id for this instance.
        instance: String,
        /// The run it serves.
        run: i64,
        /// The run's start (attempt) it serves.
        start: i32,
    },
    /// An EC2 run's worker instance: waits until its run is over (exit 0).
    #[command(name = "pool-wait")]
    PoolWait {
        /// The provider's id for this instance.
        instance: String,
        /// The run it serves.
        run: i64,
        /// The run's start (attempt) it serves.
        start: i32,
    },
    /// An EC2 run's instance, idle: waits to be handed another run; prints
    /// `next <run> <start> <head address> <0|1>` and exits 0, or exits 1
    /// when shut down or after SECONDS and a minute.
    #[command(name = "pool-next")]
    PoolNext {
        /// The provider's id for this instance.
        instance: String,
        /// The run it served.
        run: i64,
        /// The run's start (attempt) it served.
        start: i32,
        /// How long to stay warm (ORCA_EC2_POOL_SECONDS).
        seconds: f64,
    },
    /// The schedulers, oldest first: live ones and those gone within the
    /// last hour (--all: every one); with ORCA_OVERLAP=off, the one leading.
    // `orca instances`, its old name, is still taken (scripts use it).
    #[command(visible_alias = "instances")]
    Schedulers {
        /// Every scheduler, however long gone.
        #[arg(long)]
        all: bool,
        /// A JSON array of schedulers.
        #[arg(long)]
        json: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Deploying a new scheduler beside the running one (docs/deploy.md).
    Deploy {
        /// What to do.
        #[command(subcommand)]
        action: DeployCmd,
    },
}

/// `orca scheduler ...` actions.
#[derive(Subcommand, Debug)]
pub enum SchedulerCmd {
    /// Ask a live scheduler (default: the leader) to drain: it starts nothing
    /// more, lets its runs end, and exits.
    Drain {
        /// The scheduler's id (see orca schedulers).
        id: Option<i64>,
        /// Drain it even when it is the only live scheduler (none will lead).
        #[arg(long)]
        force: bool,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
}

/// `orca deploy ...` actions.
#[derive(Subcommand, Debug)]
pub enum DeployCmd {
    /// Why this binary can't start beside the scheduler going now (exit 1);
    /// exit 0 when nothing blocks a start (saying so when no scheduler runs).
    Check {
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
    /// Wait for the newest live scheduler to lead (exit 1 on timeout).
    Wait {
        /// Seconds to wait at most.
        #[arg(long, default_value_t = 60.0, value_name = "S")]
        timeout: f64,
        /// Database options.
        #[command(flatten)]
        db: DbOpts,
    },
}

impl Cmd {
    /// Whether this is a long-lived process (the scheduler, a worker, an EC2
    /// run's instance's `ec2-serve`, `pool-wait`, `pool-next`) rather than a
    /// one-shot command an operator runs.
    pub fn is_long_lived(&self) -> bool {
        matches!(
            self,
            Cmd::Scheduler { action: None, .. }
                | Cmd::Worker { .. }
                | Cmd::Ec2Serve { .. }
                | Cmd::PoolWait { .. }
                | Cmd::PoolNext { .. }
        )
    }
}

/// clap's error text as the one line orca prints: its first line, the
/// indented lines right under it that name what it is about (the missing
/// `<PIPELINE>`), and its hints (`tip: a similar subcommand exists: 'logs'`,
/// `tip: to pass '-x' as a value, use '-- -x'`), without clap's `error: `
/// and its usage.
pub fn error_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("bad arguments");
    let mut line = first.trim_start_matches("error: ").trim_end().to_string();
    let mut under = true;
    for more in lines {
        if more.starts_with("Usage:") || more.starts_with("For more information") {
            break;
        }
        let hint = more.trim();
        if hint.starts_with("tip:") {
            line.push_str(if line.contains("(tip: ") { "; " } else { " (" });
            line.push_str(hint);
            under = false;
        } else if under && !hint.is_empty() && more.starts_with(char::is_whitespace) {
            line.push(' ');
            line.push_str(hint);
        } else {
            under = false;
        }
    }
    if line.contains("(tip: ") {
        line.push(')');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_argument_is_named_on_the_one_line() {
        let e = Cli::try_parse_from(["orca", "run"]).unwrap_err();
        assert_eq!(
            error_line(&e.to_string()),
            "the following required arguments were not provided: <PIPELINE>"
        );
        let e = Cli::try_parse_from(["orca", "logs"]).unwrap_err();
        assert_eq!(
            error_line(&e.to_string()),
            "the following required arguments were not provided: <RUN>"
        );
        let e = Cli::try_parse_from(["orca", "frobnicate"]).unwrap_err();
        assert_eq!(
            error_line(&e.to_string()),
            "unrecognized subcommand 'frobnicate'"
        );
    }

    #[test]
    fn clap_s_hints_stay_on_the_one_line() {
        let e = Cli::try_parse_from(["orca", "log", "5"]).unwrap_err();
        assert_eq!(
            error_line(&e.to_string()),
            "unrecognized subcommand 'log' (tip: a similar subcommand exists: 'logs')"
        );
        let e = Cli::try_parse_from(["orca", "run", "a", "-x"]).unwrap_err();
        assert_eq!(
            error_line(&e.to_string()),
            "unexpected argument '-x' found (tip: to pass '-x' as a value, use '-- -x')"
        );
    }

    #[test]
    fn the_database_wait_is_db_wait_and_still_takes_wait() {
        for (flag, secs) in [("--db-wait", 3.0), ("--wait", 4.0)] {
            let cli = Cli::try_parse_from(["orca", "runs", flag, &secs.to_string()]).unwrap();
            let Cmd::Runs { db, .. } = cli.command else {
                panic!("orca runs");
            };
            assert_eq!(db.wait, secs, "{flag}");
        }
        let help = Cli::try_parse_from(["orca", "runs", "--help"])
            .unwrap_err()
            .to_string();
        assert!(help.contains("--db-wait <S>"), "{help}");
        assert!(!help.contains("--wait <S>"), "{help}");
        // On `orca run`, --wait is the run's.
        let cli = Cli::try_parse_from(["orca", "run", "p", "--wait", "--db-wait", "5"]).unwrap();
        let Cmd::Run { wait, db_wait, .. } = cli.command else {
            panic!("orca run");
        };
        assert!(wait);
        assert_eq!(db_wait, 5.0);
    }
}
