//! `orca events`: what orca decided and why, filtered by run, pipeline,
//! kind and time; with `-f`, then each new event as it comes.
//!
//! Following polls by id every half second ([`super::POLL`]) on a `Db`
//! that waits outages through (a login refused for good ends it, exit 1),
//! and ends when the reader of its output goes (`| head -3`), as `orca
//! logs -f` does, or on Ctrl-C. Ids are handed out as transactions insert
//! and become visible as they commit, so it looks again from the last
//! *settled* id (`sql/events_follow.sql`), never printing an event twice.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use postgres::Client;
use serde::Serialize;

use super::{connect, pg, print_json, stdout_reader_gone, target};
use crate::cli::DbOpts;
use crate::db::{Db, Fault, sql};
use crate::exit::{Outcome, bad, no};
use crate::printable;

/// The longest `--since` duration: ten years.
const MAX_SINCE_SECONDS: f64 = 10.0 * 366.0 * 86_400.0;

/// The most events one look of `-f` prints (the rest on the next look).
const FOLLOW_BATCH: i64 = 1000;

/// The longest filter text taken (`--pipeline`, `--kind`).
const MAX_FILTER: usize = 256;

/// An event: a decision orca made, and why.
#[derive(Serialize, Debug)]
pub struct EventRow {
    /// Its id.
    pub id: i64,
    /// When (UTC, the database's clock).
    pub at: String,
    /// The run it concerns.
    pub run: Option<i64>,
    /// The pipeline it concerns.
    pub pipeline: Option<String>,
    /// What was decided.
    pub kind: String,
    /// Why.
    pub why: String,
}

impl EventRow {
    fn of(r: &postgres::Row) -> EventRow {
        EventRow {
            id: r.get("id"),
            at: r.get("at"),
            run: r.get("run"),
            pipeline: r.get("pipeline"),
            kind: r.get("kind"),
            why: r.get("why"),
        }
    }

    /// The event as the text listing prints it.
    fn line(&self) -> String {
        let run = self.run.map(|r| format!("run {r}")).unwrap_or_default();
        format!(
            "{:<24}  {:<10} {:<20} {:<14} {}",
            self.at,
            run,
            printable::line(self.pipeline.as_deref().unwrap_or_default()),
            printable::line(&self.kind),
            printable::line(&self.why)
        )
    }
}

/// From when `--since` lists events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Since {
    /// This many seconds back from the database's `now()`.
    Ago(f64),
    /// This time.
    At(DateTime<Utc>),
}

/// Reads `--since`: a whole number and a unit (`30s`, `10m`, `2h`, `1d`,
/// at most ten years) or an RFC 3339 time (`2026-01-31T09:00:00Z`); else
/// what is wrong with it, in words.
pub fn parse_since(text: &str) -> Result<Since, String> {
    let wrong = || {
        format!(
            "--since {}: want a duration (30s, 10m, 2h, 1d) or an RFC 3339 time \
             (2026-01-31T09:00:00Z)",
            printable::line(&text.chars().take(64).collect::<String>())
        )
    };
    let t = text.trim();
    if let Some(unit) = t.chars().last().filter(char::is_ascii_alphabetic)
        && t.len() > 1
        && t[..t.len() - 1].bytes().all(|b| b.is_ascii_digit())
    {
        let per = match unit {
            's' => 1.0,
            'm' => 60.0,
            'h' => 3600.0,
            'd' => 86_400.0,
            _ => return Err(wrong()),
        };
        let n: f64 = t[..t.len() - 1].parse().map_err(|_| wrong())?;
        let secs = n * per;
        if secs > MAX_SINCE_SECONDS {
            return Err(format!("{}: at most ten years back", wrong()));
        }
        return Ok(Since::Ago(secs));
    }
    DateTime::parse_from_rfc3339(t)
        .map(|at| Since::At(at.with_timezone(&Utc)))
        .map_err(|_| wrong())
}

/// What `orca events` lists.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    /// Only this run's.
    pub run: Option<i64>,
    /// Only this pipeline's.
    pub pipeline: Option<&'a str>,
    /// Only this kind.
    pub kind: Option<&'a str>,
    /// `--since` as given.
    pub since: Option<&'a str>,
    /// How many (the newest) at most.
    pub limit: i64,
}

/// `orca events`: the newest `--limit` events that match, oldest first;
/// with `follow`, then every new one that matches until the reader goes.
pub fn events(filter: &Filter, follow: bool, json: bool, opts: &DbOpts) -> Outcome {
    if filter.limit < 1 {
        return Err(bad("--limit must be at least 1"));
    }
    if filter.limit > 100_000 {
        return Err(bad("--limit is at most 100000"));
    }
    for (flag, value) in [("--pipeline", filter.pipeline), ("--kind", filter.kind)] {
        if value.is_some_and(|v| v.len() > MAX_FILTER) {
            return Err(bad(format!("{flag}: at most {MAX_FILTER} bytes")));
        }
    }
    let since = filter.since.map(parse_since).transpose().map_err(bad)?;
    let target = target(opts, "orca")?;
    let mut client = connect(opts)?;
    check_known(&mut client, filter)?;
    let (ago, at) = match since {
        Some(Since::Ago(s)) => (Some(s), None),
        Some(Since::At(t)) => (None, Some(t)),
        None => (None, None),
    };
    // With -f, the newest event now is where following begins, read in
    // one snapshot with the listing: an event under a lower id that
    // commits later is still followed, and none is printed twice.
    let mut tx = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(pg)?;
    let start: Option<(i64, i64, Vec<i64>)> = if follow {
        let r = tx.query_one(sql::EVENTS_NEWEST, &[]).map_err(pg)?;
        Some((r.get("id"), r.get("settled"), r.get("seen")))
    } else {
        None
    };
    let newest = start.as_ref().map(|s| s.0);
    let rows: Vec<EventRow> = tx
        .query(
            sql::EVENTS_LIST,
            &[
                &filter.run,
                &filter.pipeline,
                &filter.kind,
                &ago,
                &at,
                &filter.limit,
                &newest,
            ],
        )
        .map_err(pg)?
        .iter()
        .map(EventRow::of)
        .collect();
    tx.commit().map_err(pg)?;
    if json {
        return print_json(&rows);
    }
    println!(
        "{:<24}  {:<10} {:<20} {:<14} WHY",
        "AT", "RUN", "PIPELINE", "KIND"
    );
    for e in &rows {
        println!("{}", e.line());
    }
    let Some(start) = start else {
        return Ok(());
    };
    drop(client);
    follow_events(target, filter, start)
}

/// An unknown run or pipeline given as a filter is bad input (exit 2).
fn check_known(client: &mut Client, filter: &Filter) -> Outcome {
    if let Some(id) = filter.run
        && client
            .query_opt(sql::RUN_STATE, &[&id])
            .map_err(pg)?
            .is_none()
    {
        return Err(bad(format!("unknown run: {id}")));
    }
    if let Some(p) = filter.pipeline
        && client
            .query_opt(sql::PIPELINE_GET, &[&p])
            .map_err(pg)?
            .is_none()
    {
        return Err(bad(format!("unknown pipeline: {}", printable::line(p))));
    }
    Ok(())
}

/// Prints each event past `from` that matches as it comes, every
/// [`super::POLL`], until stdout's reader goes (exit 0) or the database
/// refuses the login for good (exit 1); outages are waited through.
/// `start`: the newest id listed before, the settled id then, and the ids
/// past it seen then (`sql/events_newest.sql`).
fn follow_events(
    target: crate::db::Target,
    filter: &Filter,
    start: (i64, i64, Vec<i64>),
) -> Outcome {
    let who = "orca events -f";
    let mut db = Db::new(target.with_application_name(who), who).ending_when_refused();
    // Ids up to `settled` are settled; those past it already printed (or
    // seen by the listing before) are `printed`.
    let (newest, mut settled, seen) = start;
    let mut last = newest;
    let mut printed: BTreeSet<i64> = seen.into_iter().collect();
    loop {
        if stdout_reader_gone() {
            return Ok(());
        }
        let ids: Vec<i64> = printed.iter().copied().collect();
        let rows = match db.prepared(sql::EVENTS_FOLLOW, |c, s| {
            c.query(
                s,
                &[
                    &filter.run,
                    &filter.pipeline,
                    &filter.kind,
                    &settled,
                    &FOLLOW_BATCH,
                    &last,
                    &ids,
                ],
            )
        }) {
            Ok(rows) => rows,
            Err(Fault::Refused(r)) => return Err(no(r.to_string())),
            Err(Fault::Down) => {
                std::thread::sleep(super::POLL);
                continue;
            }
            Err(e) => return Err(no(e.to_string())),
        };
        let mut out = String::new();
        for r in &rows {
            if r.get::<_, Option<i64>>("id").is_none() {
                continue;
            }
            let e = EventRow::of(r);
            out.push_str(&e.line());
            out.push('\n');
            last = last.max(e.id);
            printed.insert(e.id);
        }
        if !out.is_empty() {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            if stdout
                .write_all(out.as_bytes())
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return Ok(());
            }
        }
        let full = rows.len() as i64 >= FOLLOW_BATCH;
        if let Some(r) = rows.first() {
            settled = settled.max(next_settled(r.get("settled"), last, full));
            printed = printed.split_off(&(settled + 1));
        }
        // A full batch: more are waiting, look again at once.
        if !full {
            std::thread::sleep(super::POLL);
        }
    }
}

/// How far a follower may stop looking again: up to the database's settled
/// id (`db`), but, when the look was cut at [`FOLLOW_BATCH`] (`full`), no
/// further than the last id printed (`last`): past it nothing was read yet.
fn next_settled(db: i64, last: i64, full: bool) -> i64 {
    if full { db.min(last) } else { db }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_never_settles_past_what_it_has_read() {
        // 5,000 old events waiting, 1,000 read: the rest are read next.
        assert_eq!(next_settled(5000, 1000, true), 1000);
        // All read: the database's settled id stands.
        assert_eq!(next_settled(5000, 4990, false), 5000);
        assert_eq!(next_settled(300, 4990, true), 300);
    }

    #[test]
    fn since_takes_a_duration_or_an_rfc_3339_time() {
        assert_eq!(parse_since("30s"), Ok(Since::Ago(30.0)));
        assert_eq!(parse_since("10m"), Ok(Since::Ago(600.0)));
        assert_eq!(parse_since("2h"), Ok(Since::Ago(7200.0)));
        assert_eq!(parse_since("1d"), Ok(Since::Ago(86_400.0)));
        assert_eq!(parse_since("0s"), Ok(Since::Ago(0.0)));
        let Ok(Since::At(t)) = parse_since("2026-01-31T09:00:00+01:00") else {
            panic!("an RFC 3339 time");
        };
        assert_eq!(t.to_rfc3339(), "2026-01-31T08:00:00+00:00");
        assert!(matches!(
            parse_since("2026-01-31T09:00:00Z"),
            Ok(Since::At(_))
        ));
    }

    #[test]
    fn since_refuses_anything_else_in_one_line() {
        for text in [
            "",
            "m",
            "10",
            "10x",
            "-5m",
            "1.5h",
            "10 m",
            "tomorrow",
            "1w",
            "2026-01-31",
            "99999999999999999999d",
            "3660d1",
        ] {
            let e = parse_since(text).unwrap_err();
            assert!(e.starts_with("--since "), "{text}: {e}");
            assert!(!e.contains('\n'), "{text}: {e}");
        }
        assert!(parse_since("3660d").is_ok());
        assert!(parse_since("3700d").unwrap_err().contains("ten years"));
        // What it names is bounded and escaped.
        let e = parse_since(&format!("\x1b{}", "x".repeat(5000))).unwrap_err();
        assert!(e.len() < 300 && !e.contains('\x1b'), "{e}");
    }
}
