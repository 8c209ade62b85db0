//! The instance's side of the warm pool (seed 000, `orca.pool`): the two
//! commands an EC2 run's instance script runs between runs.
//!
//! ```text
//! orca pool-wait <instance> <run> <start>             a worker: until its run is over
//! orca pool-next <instance> <run> <start> <seconds>   until it's handed another run
//! ```
//!
//! Both log in with the instance's own credentials (`ORCA_TOKEN`) and act
//! only through the `orca.instance_*` functions (migration 0004). The
//! instance learns of its next run from its own rows in `orca.instances`:
//! no other service, port or permission.
//!
//! Invariants:
//! * Neither exits because the database can't be reached: each retries every
//!   second, for as long as it takes (`pool-next` still ends at its deadline).
//! * `pool-next` marks the served row `idle` before it polls (the script runs
//!   it only once the instance's work has stopped), and prints `next …` only
//!   after the new row is `joined`.

use std::time::{Duration, Instant};

use crate::sql;
use crate::state::{Db, Fault};

/// `pool-next`'s output when it is handed a run.
fn next_line(run: i64, start: i32, address: &str, fresh_code: bool) -> String {
    format!("next {run} {start} {address} {}", u8::from(fresh_code))
}

/// Sleeps a second, or less when `deadline` is nearer.
fn pause(deadline: Option<Instant>) {
    let mut d = Duration::from_secs(1);
    if let Some(at) = deadline {
        d = d.min(at.saturating_duration_since(Instant::now()));
    }
    std::thread::sleep(d.max(Duration::from_millis(10)));
}

/// A database the command reaches with the instance's credentials.
fn db(who: &'static str) -> Result<Db, i32> {
    match crate::pool_boot::own_target(who) {
        Ok(t) => Ok(Db::new(t, who)),
        Err(e) => {
            eprintln!("orca: {e}");
            Err(2)
        }
    }
}

/// A statement's fault, said once per kind while it lasts.
fn say(said: &mut String, e: &Fault) {
    if let Fault::Sql(m) = e
        && m != said
    {
        log::error!("{m}");
        *said = m.clone();
    }
}

/// `orca pool-wait <instance> <run> <start>`: exits 0 once the run is not
/// running at that start any more, or the instance's row for it has ended.
pub fn pool_wait(instance: &str, run: i64, start: i32) -> i32 {
    let mut db = match db("pool-wait") {
        Ok(db) => db,
        Err(code) => return code,
    };
    let mut said = String::new();
    loop {
        match db.run(|c| c.query_one(sql::INSTANCE_RUN_OVER, &[&instance, &run, &start])) {
            Ok(row) if row.get::<_, bool>(0) => return 0,
            Ok(_) => {}
            Err(e) => say(&mut said, &e),
        }
        pause(None);
    }
}

/// `orca pool-next <instance> <run> <start> <seconds>`: marks the row the
/// instance served idle, then polls every second. Handed a run: prints
/// `next <run> <start> <head address> <0|1>` and exits 0. Its row ended with
/// no other (shut down), or `seconds` and a minute more passed
/// (`ORCA_POOL_NEXT_GRACE_SECONDS`, 60, shortens the minute for tests):
/// exits 1.
pub fn pool_next(instance: &str, run: i64, start: i32, seconds: f64) -> i32 {
    let grace = match crate::settings::seconds("ORCA_POOL_NEXT_GRACE_SECONDS", 60.0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("orca: {e}");
            return 2;
        }
    };
    if !(seconds.is_finite() && seconds >= 0.0) {
        eprintln!("orca: pool-next: seconds must be a number of seconds, not {seconds}");
        return 2;
    }
    let deadline = Instant::now() + Duration::from_secs_f64((seconds + grace).min(1e7));
    let mut db = match db("pool-next") {
        Ok(db) => db,
        Err(code) => return code,
    };
    let mut said = String::new();
    // The served row is idle first: retried until it lands.
    loop {
        match db.run(|c| c.query_one(sql::INSTANCE_IDLE, &[&instance, &run, &start])) {
            Ok(row) => {
                if !row.get::<_, bool>(0) {
                    log::warn!(
                        "instance {instance} has no live row for run {run} at start {start}; waiting for another"
                    );
                }
                break;
            }
            Err(e) => say(&mut said, &e),
        }
        if Instant::now() >= deadline {
            return 1;
        }
        pause(Some(deadline));
    }
    // The poll is prepared once per session: one round trip a second.
    let mut poll: Option<(u64, postgres::Statement)> = None;
    loop {
        db.ensure();
        let session = db.sessions;
        let polled = db.run(|c| {
            if poll.as_ref().is_none_or(|(s, _)| *s != session) {
                poll = Some((session, c.prepare(sql::INSTANCE_POLL)?));
            }
            let stmt = &poll.as_ref().expect("prepared above").1;
            c.query_one(stmt, &[&instance, &run, &start])
        });
        match polled {
            Ok(row) => match row.get::<_, String>(0).as_str() {
                "next" => {
                    println!(
                        "{}",
                        next_line(row.get(1), row.get(2), row.get::<_, &str>(3), row.get(4))
                    );
                    return 0;
                }
                "ended" => {
                    log::info!("instance {instance}: its row ended with no other: shut down");
                    return 1;
                }
                _ => {}
            },
            Err(e) => say(&mut said, &e),
        }
        if Instant::now() >= deadline {
            log::info!(
                "instance {instance}: no run handed to it within {seconds}s and {grace}s more"
            );
            return 1;
        }
        pause(Some(deadline));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_line_says_whether_new_code_may_be_taken() {
        assert_eq!(next_line(42, 1, "10.0.0.5", true), "next 42 1 10.0.0.5 1");
        assert_eq!(next_line(42, 2, "-", false), "next 42 2 - 0");
    }
}
