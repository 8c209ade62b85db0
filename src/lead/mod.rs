//! The schedulers and their lead (seed 002, `orca.schedulers`): several
//! `orca scheduler`s on one Postgres during a deploy, one leading, the older
//! draining, nothing lost or run twice. ("Instance" is never a scheduler:
//! it is an EC2 run's head or worker, `orca.instances`, `warm_pool`.)
//!
//! With `ORCA_OVERLAP=on` each scheduler has a row in `orca.schedulers`,
//! beaten every tick with the runs its processes are. The newest live
//! scheduler that isn't draining leads: it holds `LEAD_LOCK` on the session it
//! decides on. An older scheduler that sees a newer live one (or is asked to)
//! gives the lock up and drains: it starts nothing, supervises its runs to
//! their end, ends its row and exits 0.
//!
//! Live means: not ended, and seen within the stale limit by the database's
//! clock. A run is held while the live scheduler that started it lists it; only
//! a gone scheduler's runs, once their heartbeats are stale too, are queued
//! again (the sweep in `sql/sweep.sql`).
//!
//! The parts: [`lock`] is the lock itself (its key, taking it, who holds it,
//! freeing one held by a session that can't lead); [`hold`] is a
//! scheduler's hold on it tick by tick (taking it again after a reconnect,
//! its row's beat, when to drain), which gives a leader's duties the
//! lead as a [`Term`] (`term`: the fenced session, the only way a duty
//! reaches the database); this file is the schedulers' rows
//! (`orca.schedulers`) and `orca schedulers`, `orca deploy check` / `wait`.
//! The scheduler calls into this part; it never calls the scheduler.
//!
//! Invariants:
//! * Only the session holding `LEAD_LOCK` decides; with overlap on, that is
//!   the newest live scheduler that isn't draining (newest: its binary knows
//!   the most migrations, then the latest to join).
//! * A scheduler that drains records it, then gives the lock up (whether
//!   or not the record landed) and decides nothing more; a draining
//!   scheduler never takes it again.
//! * A holder that is gone (not seen for the stale limit) has its session
//!   ended by the next scheduler; a live scheduler's session never is.

pub mod hold;
pub mod known;
pub mod lock;
pub mod term;

pub use known::Known;
pub use term::{DutyError, Term};

use postgres::Client;
use serde::Serialize;

use crate::db::sql;
use crate::plural::count;
use lock::LEAD_LOCK;

/// `ORCA_OVERLAP`: `off` (the default: one scheduler at a time) or `on`.
pub fn overlap_on() -> Result<bool, String> {
    match std::env::var("ORCA_OVERLAP").as_deref() {
        Err(_) | Ok("") | Ok("off") => Ok(false),
        Ok("on") => Ok(true),
        Ok(other) => Err(format!("ORCA_OVERLAP={other}: want on or off")),
    }
}

/// `ORCA_IMAGE`: what this binary is (an image tag, a version), for `orca schedulers`.
pub fn image() -> String {
    std::env::var("ORCA_IMAGE").unwrap_or_default()
}

/// Adds this process's row; returns its id.
pub fn join(client: &mut Client, host: &str, migrations: i32) -> Result<i64, postgres::Error> {
    let pid = std::process::id() as i32;
    client
        .query_one(sql::SCHEDULER_JOIN, &[&host, &pid, &image(), &migrations])
        .map(|r| r.get("id"))
}

/// What a beat learned.
pub struct Beat {
    /// The scheduler was asked to drain.
    pub drain_asked: bool,
    /// The newest live scheduler after this one that isn't draining.
    pub newer: Option<i64>,
}

/// Marks scheduler `id` seen with `running` its processes' runs. `None` when
/// its row has ended.
pub fn beat(
    client: &mut Client,
    id: i64,
    running: &[i64],
    stale: f64,
) -> Result<Option<Beat>, postgres::Error> {
    Ok(client
        .query_opt(sql::SCHEDULER_BEAT, &[&id, &running, &stale])?
        .map(|r| Beat {
            drain_asked: r.get("drain_asked"),
            newer: r.get("newer"),
        }))
}

/// What taking the lead came to.
pub enum Lead {
    /// This session holds `LEAD_LOCK` now.
    Taken,
    /// Another session holds it.
    Held,
}

/// Takes the lead for scheduler `id` if no one holds it; if a gone scheduler
/// holds it (hung, or cut off), ends that holder's session first.
pub fn try_lead(client: &mut Client, id: i64, stale: f64) -> Result<Lead, postgres::Error> {
    let mut taken = lock::try_take(client)?;
    if !taken {
        lock::end_intruders(client)?;
        for row in client.query(sql::LEAD_TAKEOVER, &[&LEAD_LOCK, &stale])? {
            let gone: i64 = row.get("id");
            log::warn!("scheduler {gone} holds the lead but is gone: its session was ended");
        }
        taken = lock::try_take(client)?;
    }
    if taken {
        client.execute(sql::SCHEDULER_LEAD, &[&id])?;
        Ok(Lead::Taken)
    } else {
        Ok(Lead::Held)
    }
}

/// Scheduler `id` drains: records why, then gives up the lead (if it held
/// it) whether or not the record landed, so the scheduler waiting for it
/// takes it after the record, and never waits on a record that can't land.
pub fn step_down(client: &mut Client, id: i64, why: &str) -> Result<(), postgres::Error> {
    let recorded = client
        .execute(sql::SCHEDULER_DRAIN, &[&id, &why])
        .map(|_| ());
    lock::release(client)?;
    recorded
}

/// Scheduler `id` has ended: gone at once.
pub fn end(client: &mut Client, id: i64) -> Result<(), postgres::Error> {
    client.execute(sql::SCHEDULER_END, &[&id]).map(|_| ())
}

/// What `orca scheduler drain` came to.
#[derive(Debug, PartialEq, Eq)]
pub enum DrainAsked {
    /// No such live scheduler (no live leader, when none was named).
    NoSuch,
    /// This scheduler was asked to drain.
    Asked(i64),
    /// Not asked: this scheduler is the only live one not draining, so
    /// nobody would lead after it (`--force` drains it anyway).
    Alone(i64),
}

/// Asks live scheduler `id` (the leader when `None`) to drain, unless it is
/// the only live scheduler not draining and `force` is false (see
/// [`DrainAsked`]). `by` says who asks (the `drain asked` event).
pub fn ask_drain(
    client: &mut Client,
    id: Option<i64>,
    stale: f64,
    by: &str,
    force: bool,
) -> Result<DrainAsked, postgres::Error> {
    let Some(row) = client.query_opt(sql::SCHEDULER_ASK_DRAIN, &[&id, &stale, &by, &force])? else {
        return Ok(DrainAsked::NoSuch);
    };
    let id: i64 = row.get("id");
    Ok(if row.get("asked") {
        DrainAsked::Asked(id)
    } else {
        DrainAsked::Alone(id)
    })
}

/// A scheduler as `orca schedulers` shows it (its `--json` keys are a
/// format operators' scripts read).
#[derive(Serialize, Debug)]
pub struct SchedulerRow {
    /// Its id (join order).
    pub id: i64,
    /// Its host.
    pub host: String,
    /// Its pid there.
    pub pid: i32,
    /// leader, standby, draining, or gone.
    pub role: String,
    /// `ORCA_IMAGE` it runs.
    pub image: String,
    /// Migrations its binary knows.
    pub migrations: i32,
    /// Runs its processes are.
    pub runs: i32,
    /// Seconds since it was last seen (the database's clock).
    pub seen_ago: f64,
    /// When it was last seen (UTC).
    pub last_seen: String,
}

/// Every scheduler not long gone (live, or ended or unseen within the last
/// hour; `all`: every one), oldest first.
pub fn schedulers(
    client: &mut Client,
    stale: f64,
    all: bool,
) -> Result<Vec<SchedulerRow>, postgres::Error> {
    Ok(client
        .query(sql::SCHEDULERS_LIST, &[&stale, &all])?
        .iter()
        .map(|r| {
            let live: bool = r.get("live");
            let leading: bool = r.get("leads");
            let draining: bool = r.get("draining");
            let role = match (live, leading, draining) {
                (false, _, _) => "gone",
                (true, _, true) => "draining",
                (true, true, false) => "leader",
                (true, false, false) => "standby",
            };
            SchedulerRow {
                id: r.get("id"),
                host: r.get("host"),
                pid: r.get("pid"),
                role: role.into(),
                image: r.get("image"),
                migrations: r.get("migrations"),
                runs: r.get("runs"),
                seen_ago: r.get("seen_ago"),
                last_seen: r.get("last_seen"),
            }
        })
        .collect())
}

/// The live schedulers that drain, as `orca deploy check` reads them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DrainingLive {
    /// Whether every live scheduler drains (none may lead).
    pub all: bool,
    /// Each of them, named.
    pub names: Vec<String>,
}

/// What `orca deploy check` found.
#[derive(Debug, PartialEq, Eq)]
pub enum DeployVerdict {
    /// No scheduler runs: nothing blocks a start (exit 0, said).
    NoneRunning,
    /// A live scheduler leads and every live one can run beside this
    /// binary (exit 0, nothing said).
    Clear,
    /// Every live scheduler drains and none leads (`orca scheduler drain
    /// --force` of the only one): none will lead, nothing blocks a start
    /// (exit 0, said: these schedulers, named).
    Draining(Vec<String>),
    /// This binary can't start beside the scheduler going now: why (exit 1).
    Blocked(String),
}

/// The verdict from what the database says: `led` (a live scheduler leads),
/// `any_live` (any scheduler is live), `draining` (the live schedulers that
/// drain, named: when they are all the live ones, none will lead),
/// `overlap_off` (who holds the lead
/// lock without a row in `orca.schedulers`: a scheduler with
/// `ORCA_OVERLAP=off`), and `behind` (live schedulers that know fewer migrations than `floor`: each
/// named, with how many it knows).
pub fn deploy_verdict(
    led: bool,
    any_live: bool,
    draining: DrainingLive,
    overlap_off: Option<String>,
    behind: &[(String, i32)],
    floor: i32,
) -> DeployVerdict {
    if !behind.is_empty() {
        let each: Vec<String> = behind
            .iter()
            .map(|(who, n)| format!("{who} knows {}", count((*n).into(), "migration")))
            .collect();
        let (it, them) = if behind.len() == 1 {
            ("it", "it")
        } else {
            ("they", "them")
        };
        return DeployVerdict::Blocked(format!(
            "{}, fewer than this binary's floor of {floor}: {it} can't run beside this binary; stop {them} first",
            each.join("; ")
        ));
    }
    // Every live scheduler drains or was asked to: none will lead, even if
    // one still holds the lead this instant (it hasn't seen the ask yet).
    if any_live && draining.all {
        return DeployVerdict::Draining(draining.names);
    }
    if led {
        return DeployVerdict::Clear;
    }
    if any_live {
        return DeployVerdict::Blocked(
            "no live scheduler leads (a handover under way? try again in a few seconds)"
                .to_string(),
        );
    }
    match overlap_off {
        Some(who) => DeployVerdict::Blocked(format!(
            "no live scheduler leads: the running scheduler ({who}) has ORCA_OVERLAP=off and can't hand over; stop it, then start the new one"
        )),
        None => DeployVerdict::NoneRunning,
    }
}

/// Whether this binary can start beside the scheduler going now (see
/// [`deploy_verdict`]): a live scheduler must lead, and none may know fewer
/// migrations than this binary's floor; with no scheduler at all, nothing
/// blocks a start. Doesn't migrate.
pub fn deploy_check(
    client: &mut Client,
    stale: f64,
    floor: i32,
) -> Result<DeployVerdict, postgres::Error> {
    let row = client.query_one(sql::DEPLOY_CHECK, &[&stale, &floor])?;
    let led: bool = row.get("led");
    let names: Vec<String> = row.get("names");
    let known: Vec<i32> = row.get("known");
    let behind: Vec<(String, i32)> = names.into_iter().zip(known).collect();
    let any_live: bool = row.get("any_live");
    let draining = DrainingLive {
        all: !row.get::<_, bool>("any_undrained"),
        names: row.get("draining"),
    };
    let overlap_off = if led || any_live {
        None
    } else {
        lock::holder(client)
    };
    Ok(deploy_verdict(
        led,
        any_live,
        draining,
        overlap_off,
        &behind,
        floor,
    ))
}

/// `orca deploy wait`: waits up to `timeout` seconds for the newest live
/// scheduler to lead (a handover over); true at once with no scheduler live.
/// With `ORCA_IMAGE` set, that scheduler must run that image.
pub fn deploy_wait(client: &mut Client, stale: f64, timeout: f64) -> Result<bool, postgres::Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(timeout);
    let image = image();
    loop {
        if client
            .query_one(sql::DEPLOY_WAIT, &[&stale, &image])?
            .get::<_, bool>("newest_leads")
        {
            return Ok(true);
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduler_rows_json_keeps_the_keys_scripts_read() {
        let row = SchedulerRow {
            id: 3,
            host: "h".into(),
            pid: 7,
            role: "leader".into(),
            image: "img".into(),
            migrations: 25,
            runs: 2,
            seen_ago: 0.5,
            last_seen: "2026-01-01 00:00:00".into(),
        };
        assert_eq!(
            serde_json::to_value(&row).unwrap(),
            serde_json::json!({
                "id": 3, "host": "h", "pid": 7, "role": "leader", "image": "img",
                "migrations": 25, "runs": 2, "seen_ago": 0.5,
                "last_seen": "2026-01-01 00:00:00",
            })
        );
    }

    #[test]
    fn deploy_verdicts() {
        assert_eq!(
            deploy_verdict(false, false, DrainingLive::default(), None, &[], 5),
            DeployVerdict::NoneRunning
        );
        assert_eq!(
            deploy_verdict(true, true, DrainingLive::default(), None, &[], 5),
            DeployVerdict::Clear
        );
        let DeployVerdict::Blocked(why) =
            deploy_verdict(false, true, DrainingLive::default(), None, &[], 5)
        else {
            panic!("a live scheduler that doesn't lead blocks");
        };
        assert!(why.contains("handover"), "{why}");
        let alone = DrainingLive {
            all: true,
            names: vec!["scheduler 3 on h pid 7".into()],
        };
        assert_eq!(
            deploy_verdict(false, true, alone.clone(), None, &[], 5),
            DeployVerdict::Draining(alone.names.clone()),
            "every live scheduler drains: no handover, none will lead"
        );
        assert_eq!(
            deploy_verdict(true, true, alone.clone(), None, &[], 5),
            DeployVerdict::Draining(alone.names.clone()),
            "the only live scheduler was asked to drain but still leads this instant: none will lead"
        );
        assert!(
            matches!(
                deploy_verdict(
                    false,
                    true,
                    alone,
                    None,
                    &[("scheduler 3 on h pid 7".into(), 1)],
                    5
                ),
                DeployVerdict::Blocked(_)
            ),
            "the floor still blocks"
        );
        assert!(why.contains("no live scheduler leads"), "{why}");
        let DeployVerdict::Blocked(why) = deploy_verdict(
            false,
            false,
            DrainingLive::default(),
            Some("h pid 7".into()),
            &[],
            5,
        ) else {
            panic!("an overlap-off scheduler blocks");
        };
        assert!(
            why.contains("h pid 7") && why.contains("ORCA_OVERLAP=off"),
            "{why}"
        );
        let DeployVerdict::Blocked(why) = deploy_verdict(
            true,
            true,
            DrainingLive::default(),
            None,
            &[("scheduler 1 on h pid 7".into(), 1)],
            5,
        ) else {
            panic!("a scheduler behind the floor blocks");
        };
        assert_eq!(
            why,
            "scheduler 1 on h pid 7 knows 1 migration, fewer than this binary's floor of 5: \
             it can't run beside this binary; stop it first"
        );
        let DeployVerdict::Blocked(why) = deploy_verdict(
            true,
            true,
            DrainingLive::default(),
            None,
            &[
                ("scheduler 1 on h pid 7".into(), 3),
                ("scheduler 2 on g pid 8".into(), 4),
            ],
            5,
        ) else {
            panic!("schedulers behind the floor block");
        };
        assert_eq!(
            why,
            "scheduler 1 on h pid 7 knows 3 migrations; scheduler 2 on g pid 8 knows 4 \
             migrations, fewer than this binary's floor of 5: they can't run beside this \
             binary; stop them first"
        );
    }
}
