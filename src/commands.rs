//! The one-shot commands an operator runs in a shell.
//!
//! Each returns an [`Outcome`]: `Ok` is exit 0; a failure is 1 (it ran and
//! the answer is no, or the database can't be reached) or 2 (bad input),
//! with one line on stderr (see [`crate::exit`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::Client;

use crate::attempts;
use crate::cli::{ConfigOpts, DbOpts};
use crate::config::{self, Config};
use crate::db::sql;
use crate::db::{self, Db, Fault, Target};
use crate::exit::{self, Failure, Outcome, bad, no};
use crate::plural::count;
use crate::printable;
use crate::runs::{self, Cancelled, RunState, STATES};
use crate::waits::{self, Waiting};

pub mod each;
pub mod events;
pub mod pipelines;
pub mod retry;
pub mod schedulers;
pub mod status;

/// How often `orca logs -f` and `orca run --wait` look at the run. Its
/// output reaches the database about once a second while it runs.
const POLL: Duration = Duration::from_millis(500);

/// For a one-shot command: a reader of its output that went (`orca runs |
/// head -1`) ends it as it ends any Unix tool, by SIGPIPE, silently, rather
/// than with a panic on a failed print (Rust ignores SIGPIPE by default).
/// Not for long-lived processes, nor the `__keeper`, whose children would
/// inherit it. Sockets are unaffected (Rust sends with `MSG_NOSIGNAL`).
pub fn end_quietly_when_stdout_closes() {
    // SAFETY: setting a signal's disposition to the default, before any
    // thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// A statement that failed. One on a table or schema that isn't there
/// (SQLSTATE 42P01, 3F000: [`connect`] found the schema, so it is older
/// than this binary) says to migrate.
fn pg(e: postgres::Error) -> Failure {
    use postgres::error::SqlState;
    match e.code() {
        Some(c) if *c == SqlState::UNDEFINED_TABLE || *c == SqlState::INVALID_SCHEMA_NAME => {
            no(format!(
                "{}: the database's orca schema is older than this binary: run `orca migrate`",
                db::plain(&e)
            ))
        }
        _ => no(db::plain(&e)),
    }
}

/// Where the database is, for a one-shot command (`app`: its
/// `application_name`).
fn target(opts: &DbOpts, app: &str) -> Result<Target, Failure> {
    if !(opts.wait.is_finite() && (0.0..=86_400.0).contains(&opts.wait)) {
        return Err(bad("--db-wait takes a number of seconds from 0 to 86400"));
    }
    Ok(Target::from_env().map_err(bad)?.with_application_name(app))
}

/// Connects for a one-shot command that needs orca's schema, waiting up to
/// `--db-wait` seconds (a login refused for good is given up at once). Before
/// the first `orca migrate` it fails with [`db::NO_SCHEMA`].
fn connect(opts: &DbOpts) -> Result<Client, Failure> {
    let mut client = connect_as(opts, "orca")?;
    if !db::schema_present(&mut client).map_err(pg)? {
        return Err(no(db::NO_SCHEMA));
    }
    Ok(client)
}

/// Connects, waiting up to `--db-wait` seconds, with `app` as the session's
/// `application_name`; the schema may be missing.
fn connect_as(opts: &DbOpts, app: &str) -> Result<Client, Failure> {
    let target = target(opts, app)?;
    db::connect_waiting(&target, opts.wait).map_err(|e| match e {
        db::ConnectError::Bad(why) => bad(why),
        e => no(e.to_string()),
    })
}

/// `orca migrate`.
pub fn migrate(opts: &DbOpts) -> Outcome {
    let mut client = connect_as(opts, db::MIGRATE_APP)?;
    let m = db::migrate(&mut client).map_err(no)?;
    for (v, name) in &m.applied {
        println!("applied {v:04}_{name}");
    }
    for name in &m.functions {
        println!("applied sql/functions/{name}.sql");
    }
    for w in &m.warnings {
        eprintln!("orca: warning: {w}");
    }
    let newer = if m.before > db::migrations_known() {
        " (the database has newer ones, from a newer binary)"
    } else {
        ""
    };
    println!(
        "{}: this binary knows {} (floor {}); the database had {}{newer}",
        if m.applied.is_empty() && m.functions.is_empty() {
            "nothing to apply"
        } else {
            "done"
        },
        count(db::migrations_known().into(), "migration"),
        db::migration_floor(),
        m.before,
    );
    // The stack's id labels every machine and instance it makes (the
    // `orca-stack` tag an IAM policy conditions on: docs/aws.md).
    let stack = crate::machines::stack::stack_id(&mut client).map_err(no)?;
    println!("stack {stack}");
    Ok(())
}

fn load(opts: &ConfigOpts) -> Result<Config, Failure> {
    let path = opts.config.clone().unwrap_or_else(config::default_path);
    config::load(&path).map_err(Failure::config)
}

/// `orca check`: nothing printed when the file is fine.
pub fn check(opts: &ConfigOpts) -> Outcome {
    load(opts).map(|_| ())
}

/// `orca register`.
pub fn register(config: &ConfigOpts, opts: &DbOpts) -> Outcome {
    let config = load(config)?;
    let mut client = connect(opts)?;
    let retired = config::register::register(&mut client, &config).map_err(pg)?;
    println!(
        "registered {} and {}",
        count(config.pipelines.len() as i64, "pipeline"),
        count(config.pools.len() as i64, "pool")
    );
    for name in retired {
        println!("retired {name} (no longer in the file)");
    }
    Ok(())
}

/// `orca run`; with `wait`, until the run's final outcome: exit 0 if it
/// succeeded, 1 if not.
pub fn run(pipeline: &str, fill: bool, args: &[String], wait: bool, opts: &DbOpts) -> Outcome {
    let target = target(opts, "orca")?;
    let mut client = connect(opts)?;
    let why = format!("orca run by {}", runs::whoami());
    if wait {
        // Ctrl-C while waiting leaves the run going, said with its id.
        catch_interrupt();
        if interrupted() {
            return Err(Failure::new(
                exit::INTERRUPTED,
                "interrupted: nothing queued",
            ));
        }
    }
    let row = client
        .query_opt(sql::RUN_QUEUE, &[&pipeline, &fill, &args, &"manual", &why])
        .map_err(pg)?;
    let Some(row) = row else {
        return Err(unknown_pipeline(&mut client, pipeline));
    };
    let id: i64 = row.get("id");
    println!("{id}");
    let _ = std::io::stdout().flush();
    // (With --wait the follow loop says it, at its first look.)
    if !wait && row.get::<_, bool>("paused") {
        eprintln!("orca: {}", Waiting::Paused(pipeline.to_string()).said(id));
    }
    if !wait {
        return Ok(());
    }
    drop(client);
    follow_run(target, "orca run --wait", id, false, |_, look| {
        let done = look.state.ended()?;
        Some(if done {
            Ok(())
        } else {
            Err(no(format!(
                "run {id} {}{}",
                look.state,
                look.why
                    .map_or(String::new(), |w| format!(": {}", printable::line(&w)))
            )))
        })
    })
}

/// One look at a followed run.
struct Look<'a> {
    state: RunState,
    start: i32,
    /// Its output (only for `logs -f`; empty for `run --wait`).
    output: &'a [u8],
    why: Option<String>,
}

/// Follows run `id` for `orca run --wait` and `orca logs -f` (`who`), every
/// [`POLL`] on a session named `who` (its `application_name`), handing each
/// look to `each` until it returns the outcome.
/// Outages are waited through (the `Db` logs when one starts and ends); a
/// login refused for good ends it at once with exit 1. While the run is
/// queued it says on stderr why, when the database can tell, once each
/// time the cause changes. With `until_reader_gone` (`logs -f`), it reads
/// the run's output, each time it changed, and ends (exit 0) once stdout is
/// a pipe with no reader left.
fn follow_run(
    target: Target,
    who: &'static str,
    id: i64,
    until_reader_gone: bool,
    mut each: impl FnMut(&mut Db, Look<'_>) -> Option<Outcome>,
) -> Outcome {
    let stale = stale()?;
    let mut db = Db::new(target.with_application_name(who), who).ending_when_refused();
    let mut said: Option<Waiting> = None;
    // The output read last and its md5: the database sends it again only
    // once it changed (`logs -f` looks twice a second at up to 64 KiB).
    let (mut output, mut md5): (Vec<u8>, Option<String>) = (Vec::new(), None);
    loop {
        if until_reader_gone && stdout_reader_gone() {
            return Ok(());
        }
        if interrupted() {
            return Err(Failure::new(exit::INTERRUPTED, interrupted_line(id)));
        }
        let row = match db.prepared(sql::RUN_FOLLOW, |c, s| {
            c.query_opt(s, &[&id, &until_reader_gone, &md5])
        }) {
            Ok(Some(row)) => row,
            Ok(None) => return Err(no(format!("run {id} is gone from the database"))),
            Err(Fault::Refused(r)) => return Err(no(r.to_string())),
            Err(Fault::Down) => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => return Err(no(e.to_string())),
        };
        md5 = row.get("md5");
        match row.get::<_, Option<Vec<u8>>>("output") {
            Some(changed) => output = changed,
            // No output (a new attempt's, or `run --wait`): none kept either.
            None if md5.is_none() => output.clear(),
            None => {}
        }
        let look = Look {
            state: row.get("state"),
            start: row.get("start"),
            output: &output,
            why: row.get("why"),
        };
        let queued = look.state == RunState::Queued;
        if let Some(outcome) = each(&mut db, look) {
            return outcome;
        }
        if !queued {
            said = None;
        } else if let Ok(waiting) = db.run(|c| waits::waiting(c, id, stale)) {
            // What couldn't be told (an outage) is told on a later look.
            if waiting != said {
                if let Some(w) = &waiting {
                    // (A pool's status may hold a provider's text.)
                    eprintln!("orca: {}", printable::line(&w.said(id)));
                }
                said = waiting;
            }
        }
        std::thread::sleep(POLL);
    }
}

/// Whether a SIGINT came since [`catch_interrupt`] (never without it).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT (Ctrl-C) no longer kills this process: it is noted, for the
/// follow loop to say what it leaves behind (`orca run --wait`).
fn catch_interrupt() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// What `orca run --wait` says when Ctrl-C ends its wait for run `id`.
fn interrupted_line(id: i64) -> String {
    format!("interrupted: run {id} goes on (orca cancel {id} to stop it)")
}

/// Whether stdout is a pipe whose reader has gone (`orca logs -f N | head
/// -1` after its line): nothing more would be read.
fn stdout_reader_gone() -> bool {
    // SAFETY: fstat(2) and poll(2) on fd 1 with structs of this frame.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(1, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            return false;
        }
        let mut p = libc::pollfd {
            fd: 1,
            events: 0,
            revents: 0,
        };
        libc::poll(&mut p, 1, 0) == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
    }
}

fn unknown_pipeline(client: &mut Client, name: &str) -> Failure {
    match client.query_opt(sql::PIPELINE_GET, &[&name]) {
        Ok(Some(r)) if r.get::<_, bool>("retired") => bad(format!(
            "pipeline {name} is retired (no longer in orca.toml)"
        )),
        _ => bad(format!("unknown pipeline: {name}")),
    }
}

/// `orca runs`.
pub fn list_runs(filter: &runs::Filter, json: bool, opts: &DbOpts) -> Outcome {
    if let Some(s) = filter.state
        && !STATES.contains(&s)
    {
        return Err(bad(format!(
            "unknown state: {s} (one of {})",
            STATES.join(", ")
        )));
    }
    if filter.limit < 1 {
        return Err(bad("--limit must be at least 1"));
    }
    if let Some(s) = filter.older_than
        && !(s.is_finite() && (0.0..=1e9).contains(&s))
    {
        return Err(bad(format!(
            "--older-than {s}: a number of seconds from 0 to 1000000000"
        )));
    }
    let mut client = connect(opts)?;
    if let Some(p) = filter.pipeline
        && client
            .query_opt(sql::PIPELINE_GET, &[&p])
            .map_err(pg)?
            .is_none()
    {
        return Err(bad(format!("unknown pipeline: {p}")));
    }
    let mut rows = runs::list(&mut client, filter).map_err(pg)?;
    if rows.iter().any(|r| r.state == RunState::Queued.as_str()) {
        waits::fill(&mut client, &mut rows, stale()?).map_err(pg)?;
    }
    if json {
        return print_json(&rows);
    }
    println!(
        "{:>8}  {:<20} {:<10} {:>7}  {:<20}  {:<20}  {:<8}  {:<20}  WHY",
        "ID", "PIPELINE", "STATE", "ATTEMPT", "STARTED", "ENDED", "EXIT", "HOST"
    );
    for r in rows {
        let exit = match (r.exit_code, r.exit_signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(s)) => format!("sig {s}"),
            _ => "-".into(),
        };
        println!(
            "{:>8}  {:<20} {:<10} {:>7}  {:<20}  {:<20}  {:<8}  {:<20}  {}{}",
            r.id,
            r.pipeline,
            r.state,
            r.start,
            r.started_at.as_deref().unwrap_or("-"),
            r.ended_at.as_deref().unwrap_or("-"),
            exit,
            match r.host.as_deref() {
                None | Some("") => "-".into(),
                Some(h) => printable::line(h),
            },
            if r.fill { "[fill] " } else { "" },
            printable::line(&r.shown_why()),
        );
    }
    Ok(())
}

/// `orca logs`: each attempt's output under a line naming it (only
/// attempt `only`'s, if given); with `follow`, printing what arrives, each
/// new attempt's line as it starts, until the run has ended (after its
/// retries), then exit 0.
pub fn logs(run: i64, follow: bool, only: Option<i32>, opts: &DbOpts) -> Outcome {
    if only.is_some_and(|n| n < 1) {
        return Err(bad("--attempt takes an attempt's number, 1 or more"));
    }
    let target = target(opts, "orca")?;
    let mut client = connect(opts)?;
    if client
        .query_opt(sql::RUN_STATE, &[&run])
        .map_err(pg)?
        .is_none()
    {
        return Err(bad(format!("unknown run: {run}")));
    }
    if !follow {
        let list = attempts::list(&mut client, run, only, only).map_err(pg)?;
        if let Some(n) = only
            && list.is_empty()
        {
            return Err(bad(format!("run {run} has no attempt {n}")));
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(&attempts::printed(&list));
        let _ = stdout.flush();
        return Ok(());
    }
    drop(client);
    let mut printer = attempts::Printer::default();
    follow_run(target, "orca logs -f", run, true, |db, look| {
        let new = if printer.needs_attempts(look.start) {
            match db.run(|c| attempts::list(c, run, Some(printer.from()), None)) {
                Ok(list) => printer.attempts(&list),
                // Read again on the next look.
                Err(_) => return None,
            }
        } else {
            printer.output(look.start, look.output)
        };
        if !new.is_empty() {
            let mut stdout = std::io::stdout().lock();
            // A reader gone (`| head`): nothing more to do.
            if stdout
                .write_all(&new)
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return Some(Ok(()));
            }
        }
        look.state.ended().map(|_| Ok(()))
    })
}

/// `orca cancel`.
pub fn cancel(run: i64, opts: &DbOpts) -> Outcome {
    let mut client = connect(opts)?;
    match runs::cancel(&mut client, run).map_err(pg)? {
        Cancelled::Unknown => Err(bad(format!("unknown run: {run}"))),
        Cancelled::Now => {
            println!("run {run} cancelled");
            Ok(())
        }
        Cancelled::Asked => {
            println!("run {run} is running: its process group gets SIGTERM, then SIGKILL");
            Ok(())
        }
        Cancelled::AlreadyAsked => {
            println!("run {run} is running: its cancel was already asked and is under way");
            Ok(())
        }
        Cancelled::AlreadyEnded(state) => Err(no(format!("run {run} already ended: {state}"))),
    }
}

/// `orca pause` (`paused` true) and `orca resume`.
pub fn pause(pipeline: &str, paused: bool, opts: &DbOpts) -> Outcome {
    let mut client = connect(opts)?;
    let why = format!("by {}", runs::whoami());
    let row = client
        .query_opt(sql::PIPELINE_PAUSE, &[&pipeline, &paused, &why])
        .map_err(pg)?;
    match row {
        Some(_) => {
            println!("{pipeline} {}", if paused { "paused" } else { "resumed" });
            Ok(())
        }
        None => Err(unknown_pipeline(&mut client, pipeline)),
    }
}

/// The stale limit (`ORCA_STALE_SECONDS`), as the schedulers read it.
fn stale() -> Result<f64, Failure> {
    crate::settings::Timing::from_env()
        .map(|t| t.stale)
        .map_err(bad)
}

/// `orca pools`: per pool, its machines, its demand and what the last
/// attempt to make a machine came to. Tokens are never shown.
pub fn pools(json: bool, opts: &DbOpts) -> Outcome {
    let mut client = connect(opts)?;
    let pools = client.query(sql::POOLS_LIST, &[]).map_err(pg)?;
    let machines = crate::machines::logins::live(&mut client).map_err(pg)?;
    let mut doc = Vec::new();
    if !json {
        println!(
            "{:<24} {:>8}  {:>6}  LAST ATTEMPT",
            "POOL", "MACHINES", "DEMAND"
        );
    }
    for p in &pools {
        let name: String = p.get("name");
        let retired: bool = p.get("retired");
        let demand: i32 = p.get("demand");
        let status: String = p.get("status");
        let since: Option<f64> = p.get("since");
        let mine: Vec<_> = machines.iter().filter(|m| m.pool == name).collect();
        if json {
            doc.push(serde_json::json!({
                "pool": name,
                "retired": retired,
                "demand": demand,
                "status": status,
                "status_for_seconds": since,
                "machines": mine.iter().map(|m| serde_json::json!({
                    "name": m.name,
                    "type": m.type_,
                    "arch": shown_arch(&m.arch),
                    "market": m.market,
                    "location": m.location,
                    "state": m.state(),
                    "runs": m.running,
                    "idle_seconds": if m.running > 0 { 0.0 } else { m.idle },
                    "silent_seconds": m.silent,
                })).collect::<Vec<_>>(),
            }));
            continue;
        }
        println!(
            "{:<24} {:>8}  {:>6}  {}{}",
            if retired {
                format!("{name} (retired)")
            } else {
                name.clone()
            },
            mine.len(),
            demand,
            if status.is_empty() {
                "none yet"
            } else {
                &status
            },
            since.map_or(String::new(), |s| format!(" ({s:.0}s ago)"))
        );
        if !mine.is_empty() {
            println!(
                "    {:<24} {:<14} {:<7} {:<9} {:<14} {:<8} {:>4}  IDLE FOR",
                "MACHINE", "TYPE", "ARCH", "MARKET", "LOCATION", "STATE", "RUNS"
            );
        }
        for m in mine {
            println!(
                "    {:<24} {:<14} {:<7} {:<9} {:<14} {:<8} {:>4}  {}",
                m.name,
                m.type_,
                shown_arch(&m.arch),
                m.market,
                m.location,
                m.state(),
                m.running,
                if m.running > 0 {
                    "-".to_string()
                } else {
                    format!("{:.0}s", m.idle)
                }
            );
        }
    }
    if json {
        return print_json(&doc);
    }
    Ok(())
}

/// A machine's architecture as `orca pools` shows it: EC2's name
/// (`x86_64`, `arm64`), `-` when its row doesn't say.
fn shown_arch(stored: &str) -> &str {
    match stored {
        "" => "-",
        a => crate::providers::ec2_arch(a),
    }
}

/// Prints a listing as `--json` has it: one top-level array of objects.
fn print_json<T: serde::Serialize>(rows: &[T]) -> Outcome {
    println!("{}", serde_json::to_string_pretty(rows).expect("json"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_has_ended_once_it_is_neither_queued_nor_running() {
        for state in RunState::ALL {
            let ended = state.ended();
            assert_eq!(
                ended.is_none(),
                matches!(state, RunState::Queued | RunState::Running),
                "{state}"
            );
            assert_eq!(ended == Some(true), state == RunState::Succeeded, "{state}");
        }
    }
}
