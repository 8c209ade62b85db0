//! orca: a pipeline scheduler and EC2 fleet manager whose only channel is
//! Postgres. This file only dispatches; see ARCHITECTURE.md for the map.

mod attempts;
mod aws;
mod cli;
mod commands;
mod config;
mod db;
mod exit;
mod follow;
mod lead;
mod logging;
mod machines;
mod metrics;
mod plural;
mod pools;
mod printable;
mod providers;
mod runs;
mod scheduler;
mod secrets;
mod settings;
mod supervise;
mod url;
mod waits;
mod warm_pool;

use clap::Parser;
use cli::{Cli, Cmd};
use exit::{Failure, Outcome};

fn main() {
    quiet_panics();
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(supervise::keeper::KEEPER) {
        std::process::exit(supervise::keeper::keeper_main(
            argv.get(2..).unwrap_or_default(),
        ));
    }
    secrets::protect();
    logging::init();
    let result = match Cli::try_parse() {
        Ok(cli) => dispatch(&cli),
        Err(e) => unparsed(e),
    };
    // The one exit path: every command's outcome, said and exited here.
    if let Err(f) = result {
        for line in f.lines() {
            eprintln!("{line}");
        }
        std::process::exit(f.code);
    }
}

/// In a build that aborts on panic (the release profile), a panic says its
/// place and message on stderr (`orca: panicked at FILE:LINE:COLUMN:`, then
/// the message) and aborts (SIGABRT, exit status 134), without walking the stack: the static
/// binary carries no unwind tables (`.cargo/no-eh-frame.ld`), so a
/// backtrace (`RUST_BACKTRACE=1`) would find no frames to walk, and a
/// stripped binary has no names to print anyway. Builds that unwind (tests,
/// debug) keep Rust's own hook.
fn quiet_panics() {
    #[cfg(panic = "abort")]
    std::panic::set_hook(Box::new(|info| eprintln!("orca: {info}")));
}

/// A command line clap refused, or asked for help: the help or version
/// (exit 0), the whole usage for `orca` alone (on stderr, exit 2), else the
/// one line saying what is wrong (exit 2).
fn unparsed(e: clap::Error) -> Outcome {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            Ok(())
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            Err(Failure::quiet(2))
        }
        _ => Err(exit::bad(cli::error_line(&e.to_string()))),
    }
}

/// Runs the command `cli` names.
fn dispatch(cli: &Cli) -> Outcome {
    if !cli.command.is_long_lived() {
        commands::end_quietly_when_stdout_closes();
    }
    match &cli.command {
        Cmd::Migrate(db) => commands::migrate(db),
        Cmd::Check(c) => commands::check(c),
        Cmd::Register { config, db } => commands::register(config, db),
        Cmd::Run {
            pipeline,
            fill,
            wait,
            db_wait,
            each: Some(path),
            json,
            ..
        } => commands::each::run(
            pipeline,
            path,
            *fill,
            *json,
            *wait,
            &cli::DbOpts { wait: *db_wait },
        ),
        Cmd::Run {
            pipeline,
            fill,
            wait,
            db_wait,
            args,
            ..
        } => commands::run(
            pipeline,
            *fill,
            args,
            *wait,
            &cli::DbOpts { wait: *db_wait },
        ),
        Cmd::Runs {
            pipeline,
            state,
            older_than,
            limit,
            json,
            db,
        } => commands::list_runs(
            &runs::Filter {
                pipeline: pipeline.as_deref(),
                state: state.as_deref(),
                older_than: *older_than,
                limit: *limit,
            },
            *json,
            db,
        ),
        Cmd::Logs {
            run,
            follow,
            attempt,
            db,
        } => commands::logs(*run, *follow, *attempt, db),
        Cmd::Events {
            run,
            pipeline,
            kind,
            since,
            limit,
            follow,
            json,
            db,
        } => commands::events::events(
            &commands::events::Filter {
                run: *run,
                pipeline: pipeline.as_deref(),
                kind: kind.as_deref(),
                since: since.as_deref(),
                limit: *limit,
            },
            *follow,
            *json,
            db,
        ),
        Cmd::Cancel {
            run: Some(run), db, ..
        } => commands::cancel(*run, db),
        Cmd::Cancel {
            run: None,
            pipeline,
            db,
            ..
        } => commands::retry::cancel_queued(pipeline.as_deref().unwrap_or_default(), db),
        Cmd::Retry { run, db } => commands::retry::retry(*run, db),
        Cmd::Pipelines { all, json, db } => commands::pipelines::pipelines(*all, *json, db),
        Cmd::Status { json, db } => commands::status::status(*json, db),
        Cmd::Pause { pipeline, db } => commands::pause(pipeline, true, db),
        Cmd::Resume { pipeline, db } => commands::pause(pipeline, false, db),
        Cmd::Scheduler {
            action: Some(cli::SchedulerCmd::Drain { id, force, db }),
            ..
        } => commands::schedulers::drain(*id, *force, db),
        Cmd::Scheduler {
            config,
            action: None,
        } => guard(true).and_then(|()| scheduler::main(config.as_deref())),
        Cmd::Schedulers { json, all, db } => commands::schedulers::schedulers(*json, *all, db),
        Cmd::Worker { pool } => guard(true).and_then(|()| pools::worker::main(pool)),
        Cmd::Ec2Serve {
            instance,
            run,
            start,
        } => secrets::guard_one_run()
            .map_err(exit::bad)
            .and_then(|()| warm_pool::instance::ec2_serve(instance, *run, *start)),
        Cmd::PoolWait {
            instance,
            run,
            start,
        } => guard(false).and_then(|()| warm_pool::instance::pool_wait(instance, *run, *start)),
        Cmd::PoolNext {
            instance,
            run,
            start,
            seconds,
        } => guard(false)
            .and_then(|()| warm_pool::instance::pool_next(instance, *run, *start, *seconds)),
        Cmd::Pools { json, db } => commands::pools(*json, db),
        Cmd::Deploy {
            action: cli::DeployCmd::Check { db },
        } => commands::schedulers::deploy_check(db),
        Cmd::Deploy {
            action: cli::DeployCmd::Wait { timeout, db },
        } => commands::schedulers::deploy_wait(*timeout, db),
    }
}

/// A long-lived process's set-up (`secrets::guard`); bad input exits 2.
fn guard(starts_runs: bool) -> Outcome {
    secrets::guard(starts_runs).map_err(exit::bad)
}
