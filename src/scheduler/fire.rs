//! Firing schedules: each tick the leader decides, over what it read of its
//! pipelines (each one's schedule, its next slot `orca.pipelines.next_fire`,
//! whether it is paused) and the database's `now()`, which slots to fire and
//! which first slots to set ([`decide`], pure, unit-tested below); then it
//! writes each ([`Schedules::fire`]).
//!
//! Invariants:
//! * Schedules are UTC: a cron time is a UTC time, whatever a local clock
//!   does (no daylight-saving gap or repeat).
//! * One run per slot: `sql/fire.sql` moves `next_fire` on only from the
//!   slot it fires, and the runs' unique slot index refuses a second run.
//! * Downtime costs one catch-up run: a slot found due fires once, its run
//!   saying how many slots were missed, and the next slot is the first
//!   after `now` (slots missed while paused are not fired: a resume clears
//!   the next slot).
//! * A slot is computed only when one is missing (new, changed or resumed:
//!   `next_fire` NULL) or was fired, never for a pipeline that waits for its
//!   slot or is paused with one due; each expression is parsed once
//!   ([`Schedules`]), and one that can't be read or never fires is said once
//!   and ignored.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::config;
use crate::db::sql;
use crate::lead::Term;
use crate::scheduler::views::Views;

/// Missed slots counted at most after the one fired (a schedule every
/// second, down for a day, is not walked slot by slot beyond this).
pub const MAX_MISSED_COUNTED: u32 = 10_000;

/// Schedules by their expression, parsed once; one that can't be read or
/// never fires is remembered as such (and said once), so no tick searches
/// for its next time again.
#[derive(Default)]
pub struct Schedules {
    crons: HashMap<String, Option<croner::Cron>>,
    /// Searches for a next time made so far (the tests count them).
    searches: u64,
}

impl Schedules {
    /// The first time of `expr` after `t`, or `None` if it has none
    /// (pipeline `name`'s; said once per expression).
    pub fn next_after(
        &mut self,
        name: &str,
        expr: &str,
        t: &DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let entry = self.crons.entry(expr.to_string()).or_insert_with(|| {
            match config::cron::parse_stored_schedule(expr) {
                Ok(c) if config::cron::fires_ever(&c) => Some(c),
                Ok(_) => {
                    log::error!(
                        "schedule '{expr}' (pipeline {name}, and any other with it) never fires: ignored"
                    );
                    None
                }
                Err(e) => {
                    log::error!("pipeline {name}: {e}: ignored");
                    None
                }
            }
        });
        let cron = entry.as_ref()?;
        self.searches += 1;
        match cron.find_next_occurrence(t, false) {
            Ok(n) => Some(n),
            Err(e) => {
                log::error!(
                    "pipeline {name}: schedule '{expr}' has no time after {t}: ignored ({e})"
                );
                *entry = None;
                None
            }
        }
    }
}

/// What a tick does about a pipeline's schedule, before any time is computed.
#[derive(Debug, PartialEq)]
pub enum FireStep {
    /// It has no next slot yet (new, changed or resumed): compute it.
    First,
    /// Its slot is due: fire it.
    Fire(DateTime<Utc>),
    /// Nothing (its slot is ahead, or it is paused): no time is computed.
    Wait,
}

/// The step for a pipeline whose next slot is `next_fire`, at `now`.
pub fn fire_step(next_fire: Option<DateTime<Utc>>, now: DateTime<Utc>, paused: bool) -> FireStep {
    match next_fire {
        None => FireStep::First,
        Some(slot) if slot <= now && !paused => FireStep::Fire(slot),
        Some(_) => FireStep::Wait,
    }
}

/// A pipeline with a schedule, as this tick read it.
#[derive(Clone, Debug)]
pub struct Scheduled<'a> {
    /// The pipeline.
    pub name: &'a str,
    /// Its schedule, as stored in its spec.
    pub expr: &'a str,
    /// Its next slot not yet fired (`None`: none computed yet).
    pub next_fire: Option<DateTime<Utc>>,
    /// Whether it is paused.
    pub paused: bool,
}

/// What to write about one pipeline's schedule.
#[derive(Clone, Debug, PartialEq)]
pub enum Firing {
    /// Set its first slot (`sql/next_fire_set.sql`).
    First {
        /// The pipeline.
        name: String,
        /// Its schedule's first time after `now`.
        next: DateTime<Utc>,
    },
    /// Fire `slot`: one run, and the next slot moved on to `next`
    /// (`sql/fire.sql`).
    Fire {
        /// The pipeline.
        name: String,
        /// Its schedule.
        expr: String,
        /// The slot fired (the oldest one due).
        slot: DateTime<Utc>,
        /// Its schedule's first time after `now`.
        next: DateTime<Utc>,
        /// Slots due after `slot` up to `now` (at most
        /// [`MAX_MISSED_COUNTED`]): this one run stands for them too.
        missed: u32,
    },
}

impl Firing {
    /// Why a fired run was queued, as its event says.
    pub fn why(&self) -> Option<String> {
        let Firing::Fire {
            expr, slot, missed, ..
        } = self
        else {
            return None;
        };
        let slot = slot.format("%Y-%m-%dT%H:%M:%SZ");
        Some(if *missed == 0 {
            format!("schedule '{expr}', slot {slot}")
        } else {
            format!(
                "schedule '{expr}', slot {slot}: one catch-up run for {} missed",
                crate::plural::count(i64::from(*missed) + 1, "slot")
            )
        })
    }
}

/// The firing decision: for each of `pipelines` at `now` (the database's
/// clock), its first slot to set or its due slot to fire, with the slot
/// after it. A pipeline whose schedule has no time after `now` (it can't be
/// read, or never fires) gets nothing. Reads no clock and no database;
/// `schedules` parses each expression once.
pub fn decide<'a>(
    now: DateTime<Utc>,
    pipelines: impl IntoIterator<Item = Scheduled<'a>>,
    schedules: &mut Schedules,
) -> Vec<Firing> {
    let mut out = Vec::new();
    for Scheduled {
        name,
        expr,
        next_fire,
        paused,
    } in pipelines
    {
        let slot = match fire_step(next_fire, now, paused) {
            FireStep::Wait => continue,
            FireStep::First => {
                if let Some(next) = schedules.next_after(name, expr, &now) {
                    out.push(Firing::First {
                        name: name.to_string(),
                        next,
                    });
                }
                continue;
            }
            FireStep::Fire(slot) => slot,
        };
        let Some(next) = schedules.next_after(name, expr, &now) else {
            continue;
        };
        let mut missed = 0u32;
        let mut t = slot;
        while let Some(n) = schedules.next_after(name, expr, &t) {
            if n > now || missed >= MAX_MISSED_COUNTED {
                break;
            }
            missed += 1;
            t = n;
        }
        out.push(Firing::Fire {
            name: name.to_string(),
            expr: expr.to_string(),
            slot,
            next,
            missed,
        });
    }
    out
}

impl Schedules {
    /// Fires due schedules of `pipelines` at `now` (see [`decide`]), each
    /// write fenced on the lead (`term`); one that fails is said and the
    /// others still written.
    pub(super) fn fire(&mut self, term: &mut Term, now: DateTime<Utc>, pipelines: &Views) {
        let scheduled = pipelines.iter().filter_map(|(name, v)| {
            Some(Scheduled {
                name,
                expr: v.p.schedule.as_deref()?,
                next_fire: v.next_fire,
                paused: v.paused,
            })
        });
        for firing in decide(now, scheduled, self) {
            match &firing {
                Firing::First { name, next } => {
                    if let Err(e) = term.run(|c| c.execute(sql::NEXT_FIRE_SET, &[name, next])) {
                        e.complain();
                    }
                }
                Firing::Fire {
                    name, slot, next, ..
                } => {
                    let why = firing.why().unwrap_or_default();
                    match term.run(|c| c.query_opt(sql::FIRE, &[name, slot, next, &why])) {
                        Ok(Some(row)) => {
                            log::info!("fired {name}: run {} ({why})", row.get::<_, i64>("id"))
                        }
                        Ok(None) => {}
                        Err(e) => e.complain(),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn one<'a>(
        name: &'a str,
        expr: &'a str,
        next_fire: Option<&str>,
        paused: bool,
    ) -> Scheduled<'a> {
        Scheduled {
            name,
            expr,
            next_fire: next_fire.map(at),
            paused,
        }
    }

    fn fire(name: &str, expr: &str, slot: &str, next: &str, missed: u32) -> Firing {
        Firing::Fire {
            name: name.into(),
            expr: expr.into(),
            slot: at(slot),
            next: at(next),
            missed,
        }
    }

    #[test]
    fn a_slot_is_computed_only_when_missing_or_due() {
        let now = at("2026-03-01T12:00:00Z");
        assert_eq!(fire_step(None, now, false), FireStep::First);
        assert_eq!(fire_step(None, now, true), FireStep::First);
        let due = at("2026-03-01T11:00:00Z");
        assert_eq!(fire_step(Some(due), now, false), FireStep::Fire(due));
        assert_eq!(fire_step(Some(due), now, true), FireStep::Wait);
        let ahead = at("2026-03-02T00:00:00Z");
        assert_eq!(fire_step(Some(ahead), now, false), FireStep::Wait);
    }

    #[test]
    fn a_schedule_that_never_fires_is_never_searched() {
        let mut s = Schedules::default();
        let now = at("2026-03-01T12:00:00Z");
        for _ in 0..100 {
            assert_eq!(s.next_after("p", "0 0 31 2 *", &now), None);
            assert_eq!(s.next_after("q", "not a cron", &now), None);
        }
        assert_eq!(s.searches, 0, "no search for a next time of either");
        assert_eq!(
            s.next_after("p", "0 0 29 2 *", &now),
            Some(at("2028-02-29T00:00:00Z"))
        );
        assert_eq!(s.searches, 1);
    }

    #[test]
    fn a_stored_schedule_croner_takes_keeps_firing() {
        // Registered before `orca check` checked each field: croner takes
        // these, so they fire on (the field check is for `check` and
        // `register` only). (`0 0 * * +`, which croner also takes, has no
        // day and never fired.)
        let mut s = Schedules::default();
        let now = at("2026-03-01T12:00:00Z");
        for (expr, next) in [
            ("1,,2 * * * *", "2026-03-01T12:01:00Z"),
            ("0 0 1, * *", "2026-04-01T00:00:00Z"),
        ] {
            assert!(config::cron::parse_schedule(expr).is_err(), "{expr}");
            assert_eq!(s.next_after("p", expr, &now), Some(at(next)), "{expr}");
        }
    }

    #[test]
    fn a_new_pipeline_gets_its_first_slot_after_now_and_fires_nothing() {
        let now = at("2026-03-01T12:00:30Z");
        let mut s = Schedules::default();
        let out = decide(now, [one("p", "* * * * *", None, false)], &mut s);
        assert_eq!(
            out,
            [Firing::First {
                name: "p".into(),
                next: at("2026-03-01T12:01:00Z")
            }]
        );
        // Paused, it gets one too (a resume clears it, so it is computed
        // again then, after the resume).
        let out = decide(now, [one("p", "* * * * *", None, true)], &mut s);
        assert_eq!(out.len(), 1);
        assert!(matches!(out[0], Firing::First { .. }));
    }

    #[test]
    fn a_due_slot_fires_once_and_moves_on_to_the_first_time_after_now() {
        let now = at("2026-03-01T03:00:00Z");
        let mut s = Schedules::default();
        let out = decide(
            now,
            [one(
                "nightly",
                "0 3 * * *",
                Some("2026-03-01T03:00:00Z"),
                false,
            )],
            &mut s,
        );
        let f = fire(
            "nightly",
            "0 3 * * *",
            "2026-03-01T03:00:00Z",
            "2026-03-02T03:00:00Z",
            0,
        );
        assert_eq!(out, std::slice::from_ref(&f));
        assert_eq!(
            f.why().unwrap(),
            "schedule '0 3 * * *', slot 2026-03-01T03:00:00Z"
        );
    }

    #[test]
    fn slots_missed_while_down_are_one_catch_up_run_for_the_oldest() {
        // Down from before 03:00 to 07:30: slots 03..07 are due.
        let now = at("2026-03-01T07:30:00Z");
        let mut s = Schedules::default();
        let out = decide(
            now,
            [one("h", "0 * * * *", Some("2026-03-01T03:00:00Z"), false)],
            &mut s,
        );
        let f = fire(
            "h",
            "0 * * * *",
            "2026-03-01T03:00:00Z",
            "2026-03-01T08:00:00Z",
            4,
        );
        assert_eq!(out, std::slice::from_ref(&f));
        assert_eq!(
            f.why().unwrap(),
            "schedule '0 * * * *', slot 2026-03-01T03:00:00Z: one catch-up run for 5 slots missed"
        );
        // One slot more than the one fired: "2 slots".
        let out = decide(
            at("2026-03-01T04:00:00Z"),
            [one("h", "0 * * * *", Some("2026-03-01T03:00:00Z"), false)],
            &mut s,
        );
        assert!(
            out[0]
                .why()
                .unwrap()
                .ends_with("one catch-up run for 2 slots missed")
        );
    }

    #[test]
    fn missed_slots_are_counted_up_to_a_limit() {
        // Every second, down for a day: 86,400 slots, counted to the limit.
        let mut s = Schedules::default();
        let out = decide(
            at("2026-03-02T00:00:00Z"),
            [one("s", "* * * * * *", Some("2026-03-01T00:00:00Z"), false)],
            &mut s,
        );
        let [Firing::Fire { missed, next, .. }] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(*missed, MAX_MISSED_COUNTED);
        assert_eq!(*next, at("2026-03-02T00:00:01Z"));
    }

    #[test]
    fn a_paused_pipeline_fires_nothing_and_computes_nothing() {
        let mut s = Schedules::default();
        let out = decide(
            at("2026-03-01T12:00:00Z"),
            [one("p", "* * * * *", Some("2026-03-01T11:00:00Z"), true)],
            &mut s,
        );
        assert!(out.is_empty());
        assert_eq!(s.searches, 0);
    }

    #[test]
    fn a_slot_ahead_is_waited_for_with_no_search() {
        let mut s = Schedules::default();
        let out = decide(
            at("2026-03-01T12:00:00Z"),
            [one("p", "0 3 * * *", Some("2026-03-02T03:00:00Z"), false)],
            &mut s,
        );
        assert!(out.is_empty());
        assert_eq!(s.searches, 0);
    }

    #[test]
    fn several_pipelines_due_in_one_tick_each_fire_once() {
        let now = at("2026-03-01T12:00:00Z");
        let mut s = Schedules::default();
        let mut out = decide(
            now,
            [
                one("a", "0 12 * * *", Some("2026-03-01T12:00:00Z"), false),
                one("b", "*/30 * * * *", Some("2026-03-01T11:30:00Z"), false),
                one("c", "0 12 * * *", Some("2026-03-01T12:00:00Z"), true),
                one("d", "0 13 * * *", Some("2026-03-01T13:00:00Z"), false),
                one("e", "0 13 * * *", None, false),
            ],
            &mut s,
        );
        out.sort_by_key(|f| match f {
            Firing::First { name, .. } | Firing::Fire { name, .. } => name.clone(),
        });
        assert_eq!(
            out,
            [
                fire(
                    "a",
                    "0 12 * * *",
                    "2026-03-01T12:00:00Z",
                    "2026-03-02T12:00:00Z",
                    0
                ),
                fire(
                    "b",
                    "*/30 * * * *",
                    "2026-03-01T11:30:00Z",
                    "2026-03-01T12:30:00Z",
                    1
                ),
                Firing::First {
                    name: "e".into(),
                    next: at("2026-03-01T13:00:00Z")
                },
            ]
        );
    }

    #[test]
    fn a_schedule_with_no_time_after_now_gets_nothing() {
        let mut s = Schedules::default();
        let now = at("2026-03-01T12:00:00Z");
        let out = decide(
            now,
            [
                one("never", "0 0 31 2 *", None, false),
                one("never", "0 0 31 2 *", Some("2026-03-01T11:00:00Z"), false),
                one("bad", "not a cron", Some("2026-03-01T11:00:00Z"), false),
            ],
            &mut s,
        );
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn schedules_are_utc_through_a_daylight_saving_change() {
        // 2026-03-29 is when Europe's clocks skip 02:00-03:00 and
        // 2026-10-25 when they repeat it: in UTC neither exists, so 02:30
        // comes once each day.
        let mut s = Schedules::default();
        for day in ["2026-03-29", "2026-10-25"] {
            let now = at(&format!("{day}T02:30:00Z"));
            let slot = format!("{day}T02:30:00Z");
            let out = decide(now, [one("p", "30 2 * * *", Some(&slot), false)], &mut s);
            let [Firing::Fire { missed, next, .. }] = &out[..] else {
                panic!("{out:?}")
            };
            assert_eq!(*missed, 0, "{day}");
            assert_eq!(*next, now + chrono::Duration::days(1), "{day}");
        }
    }

    #[test]
    fn a_leap_day_schedule_waits_years_for_its_next_slot() {
        let mut s = Schedules::default();
        let out = decide(
            at("2028-02-29T00:00:00Z"),
            [one(
                "leap",
                "0 0 29 2 *",
                Some("2028-02-29T00:00:00Z"),
                false,
            )],
            &mut s,
        );
        assert_eq!(
            out,
            [fire(
                "leap",
                "0 0 29 2 *",
                "2028-02-29T00:00:00Z",
                "2032-02-29T00:00:00Z",
                0
            )]
        );
    }
}
