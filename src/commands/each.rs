//! `orca run PIPELINE --each FILE`: one run per line of FILE (`-`: standard
//! input), the line's tab-separated fields its arguments, all queued in one
//! statement (all or none). Its lines are checked first, by [`lines`]
//! (pure), so a bad line is named by its number and nothing is queued;
//! `--wait` then follows the batch with one count a look
//! (`sql/runs_each_going.sql`), however many runs it has.

use std::fmt;
use std::io::{Read, Write};

use crate::cli::DbOpts;
use crate::db::{Db, Fault, sql};
use crate::exit::{self, Failure, Outcome, bad, no};
use crate::plural::count;
use crate::printable;
use crate::runs;

use super::{POLL, catch_interrupt, connect, interrupted, pg, target, unknown_pipeline};

/// The most lines (runs) one `--each` queues: one transaction that should
/// take at most 2 s (`make bench`'s `batch` figure).
pub const MAX_LINES: usize = 100_000;

/// The most bytes `--each` reads (at most this and a byte is read).
pub const MAX_BYTES: usize = 64 << 20;

/// The most bytes of one line, its tabs included (as a command's strings
/// together in `orca check`).
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// The most fields (arguments) of one line.
pub const MAX_FIELDS: usize = 256;

/// How many of the runs that did not succeed `--wait` names.
const NAMED: i32 = 5;

/// Why a batch's text was refused (nothing was queued).
#[derive(Debug, PartialEq, Eq)]
pub enum BadBatch {
    /// Over [`MAX_BYTES`].
    TooBig,
    /// More than [`MAX_LINES`] lines.
    TooManyLines,
    /// No line at all.
    NoLines,
    /// Line `number` (1 is the first) is bad.
    Line {
        /// The line's number, from 1.
        number: usize,
        /// What is wrong with it.
        why: BadLine,
    },
}

/// What is wrong with one line.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum BadLine {
    /// Nothing on it: a run with no arguments is `orca run P`, and a blank
    /// line is more often a slip than a run.
    Empty,
    /// A carriage return (a file with Windows line ends).
    Cr,
    /// A NUL byte: Postgres can't store it.
    Nul,
    /// Not UTF-8.
    NotUtf8,
    /// Over [`MAX_LINE_BYTES`].
    TooLong,
    /// More than [`MAX_FIELDS`] fields.
    TooManyFields,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadLine::Empty => write!(
                f,
                "an empty line (each line is a run's arguments; a run with none is `orca run P`)"
            ),
            BadLine::Cr => write!(
                f,
                "a carriage return (CR: Windows line ends? `tr -d '\\r'` drops them)"
            ),
            BadLine::Nul => write!(f, "a NUL byte (Postgres can't store it)"),
            BadLine::NotUtf8 => write!(f, "not UTF-8"),
            BadLine::TooLong => write!(f, "over {MAX_LINE_BYTES} bytes (a line's bound)"),
            BadLine::TooManyFields => write!(
                f,
                "more than {MAX_FIELDS} tab-separated fields (a line's bound)"
            ),
        }
    }
}

impl BadBatch {
    /// The one line saying so, `source` naming the input (its path, or
    /// `stdin`).
    pub fn said(&self, source: &str) -> String {
        match self {
            BadBatch::TooBig => format!(
                "{source}: over {} MiB (a batch is at most {} MiB and {MAX_LINES} lines): nothing queued",
                MAX_BYTES >> 20,
                MAX_BYTES >> 20
            ),
            BadBatch::TooManyLines => format!(
                "{source}: more than {MAX_LINES} lines (a batch's bound; `split -l {MAX_LINES}` makes smaller ones): nothing queued"
            ),
            BadBatch::NoLines => format!("{source}: no lines: nothing queued"),
            BadBatch::Line { number, why } => {
                format!("{source}:{number}: {why}: nothing queued")
            }
        }
    }
}

/// The lines of a batch's text, each a run's arguments joined by tabs, in
/// order; or why the text is refused. A newline ends each line (the last
/// may lack it); nothing else is special: a field may be empty (two tabs
/// in a row, a tab at the line's end) and holds any character but tab,
/// newline, CR and NUL.
pub fn lines(text: &[u8]) -> Result<Vec<&str>, BadBatch> {
    if text.len() > MAX_BYTES {
        return Err(BadBatch::TooBig);
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    if text.is_empty() {
        return Err(BadBatch::NoLines);
    }
    let mut out = Vec::new();
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        if out.len() == MAX_LINES {
            return Err(BadBatch::TooManyLines);
        }
        let line = one_line(line).map_err(|why| BadBatch::Line { number: i + 1, why })?;
        out.push(line);
    }
    Ok(out)
}

/// One line checked.
fn one_line(line: &[u8]) -> Result<&str, BadLine> {
    if line.is_empty() {
        return Err(BadLine::Empty);
    }
    if line.len() > MAX_LINE_BYTES {
        return Err(BadLine::TooLong);
    }
    if line.contains(&0) {
        return Err(BadLine::Nul);
    }
    if line.contains(&b'\r') {
        return Err(BadLine::Cr);
    }
    let text = std::str::from_utf8(line).map_err(|_| BadLine::NotUtf8)?;
    if text.bytes().filter(|b| *b == b'\t').count() >= MAX_FIELDS {
        return Err(BadLine::TooManyFields);
    }
    Ok(text)
}

/// Reads `path` (`-`: standard input), at most [`MAX_BYTES`] and a byte.
fn read(path: &str) -> Result<Vec<u8>, Failure> {
    let mut text = Vec::new();
    let limit = MAX_BYTES as u64 + 1;
    let read = if path == "-" {
        std::io::stdin().lock().take(limit).read_to_end(&mut text)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut text))
    };
    read.map_err(|e| bad(format!("{}: {e}", source(path))))?;
    Ok(text)
}

/// How messages name the input.
fn source(path: &str) -> String {
    if path == "-" {
        "stdin".into()
    } else {
        printable::line(path).into_owned()
    }
}

/// `orca run PIPELINE --each FILE [--fill] [--json] [--wait]`: prints the
/// first and last id on one line (`--json`: every id, in the lines'
/// order); with `wait`, waits for every run's final outcome: exit 0 if all
/// succeeded, 1 if any did not.
pub fn run(
    pipeline: &str,
    path: &str,
    fill: bool,
    json: bool,
    wait: bool,
    opts: &DbOpts,
) -> Outcome {
    // Settings first: a bad one refuses before standard input is read.
    let target = target(opts, "orca")?;
    let text = read(path)?;
    let lines = lines(&text).map_err(|b| bad(b.said(&source(path))))?;
    let mut client = connect(opts)?;
    if wait {
        catch_interrupt();
        if interrupted() {
            return Err(Failure::new(
                exit::INTERRUPTED,
                "interrupted: nothing queued",
            ));
        }
    }
    let why = format!("orca run --each by {}, line ", runs::whoami());
    let row = client
        .query_one(sql::RUNS_QUEUE_EACH, &[&pipeline, &fill, &lines, &why])
        .map_err(pg)?;
    drop(text);
    let Some(ids) = row.get::<_, Option<Vec<i64>>>("ids") else {
        return Err(unknown_pipeline(&mut client, pipeline));
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = if json {
            writeln!(out, "{}", serde_json::to_string(&ids).expect("json"))
        } else {
            writeln!(out, "{} {}", ids[0], ids[ids.len() - 1])
        };
        let _ = out.flush();
    }
    if row.get::<_, Option<bool>>("paused") == Some(true) {
        eprintln!(
            "orca: pipeline {pipeline} is paused: its {} wait for `orca resume {pipeline}`",
            count(ids.len() as i64, "run")
        );
    }
    if !wait {
        return Ok(());
    }
    drop(client);
    let batch = Batch::of(pipeline, &ids);
    let mut db = Db::new(
        target.with_application_name("orca run --wait"),
        "orca run --wait",
    )
    .ending_when_refused();
    loop {
        if interrupted() {
            return Err(Failure::new(exit::INTERRUPTED, batch.interrupted()));
        }
        match db.prepared(sql::RUNS_EACH_GOING, |c, s| {
            c.query_one(
                s,
                &[&batch.pipeline, &batch.first, &batch.last, &batch.gaps],
            )
        }) {
            Ok(row) if row.get::<_, i64>("going") == 0 => break,
            Ok(_) | Err(Fault::Down) => {}
            Err(Fault::Refused(r)) => return Err(no(r.to_string())),
            Err(e) => return Err(no(e.to_string())),
        }
        std::thread::sleep(pace(ids.len()));
    }
    let tally = loop {
        match db.run(|c| {
            c.query_one(
                sql::RUNS_EACH_TALLY,
                &[
                    &batch.pipeline,
                    &batch.first,
                    &batch.last,
                    &batch.gaps,
                    &NAMED,
                ],
            )
        }) {
            Ok(row) => break row,
            Err(Fault::Down) => std::thread::sleep(POLL),
            Err(Fault::Refused(r)) => return Err(no(r.to_string())),
            Err(e) => return Err(no(e.to_string())),
        }
    };
    let found: i64 = tally.get("found");
    let succeeded: i64 = tally.get("succeeded");
    let bad: Vec<(i64, String)> = tally
        .get::<_, Option<Vec<i64>>>("bad_ids")
        .unwrap_or_default()
        .into_iter()
        .zip(
            tally
                .get::<_, Option<Vec<String>>>("bad_states")
                .unwrap_or_default(),
        )
        .collect();
    outcome(ids.len() as i64, found, succeeded, &bad)
}

/// How often `--wait` looks at a batch of `n` runs: as `orca run --wait`
/// at a run ([`POLL`]), and less often the more runs a look counts (a
/// look at 100,000 reads them all: every 3 s), never less than every 5 s.
fn pace(n: usize) -> std::time::Duration {
    (POLL * (1 + (n / 20_000).min(9) as u32)).min(std::time::Duration::from_secs(5))
}

/// A batch as `--wait` looks it up: its pipeline's runs with ids from
/// `first` to `last`, but for `gaps`.
struct Batch<'a> {
    pipeline: &'a str,
    first: i64,
    last: i64,
    /// The ids from `first` to `last` that are not the batch's (runs queued
    /// at the same moment by others): usually none.
    gaps: Vec<i64>,
}

impl<'a> Batch<'a> {
    fn of(pipeline: &'a str, ids: &[i64]) -> Batch<'a> {
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        let gaps = sorted.windows(2).flat_map(|w| (w[0] + 1)..w[1]).collect();
        Batch {
            pipeline,
            first: sorted[0],
            last: sorted[sorted.len() - 1],
            gaps,
        }
    }

    fn interrupted(&self) -> String {
        format!(
            "interrupted: the runs go on (ids {} to {} of {}; orca cancel RUN stops one)",
            self.first, self.last, self.pipeline
        )
    }
}

/// `--wait`'s outcome once none of the batch's `n` runs is queued or
/// running: `found` of them are still in the database, `succeeded` of
/// those succeeded, `bad` the first that did not (id, state).
fn outcome(n: i64, found: i64, succeeded: i64, bad: &[(i64, String)]) -> Outcome {
    if found == n && succeeded == n {
        return Ok(());
    }
    let mut line = format!("{} of {} did not succeed", n - succeeded, count(n, "run"));
    if !bad.is_empty() {
        let named: Vec<String> = bad.iter().map(|(id, s)| format!("{id} {s}")).collect();
        let more = if (bad.len() as i64) < found - succeeded {
            ", ..."
        } else {
            ""
        };
        line.push_str(&format!(": {}{more}", named.join(", ")));
    }
    if found < n {
        line.push_str(&format!(
            "; {} gone from the database (pruned)",
            count(n - found, "run")
        ));
    }
    Err(no(line))
}

#[cfg(test)]
mod tests;
