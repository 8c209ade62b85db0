//! The scaler's decisions' unit tests (`pools::decide`), without a
//! database, a clock or a provider.

use super::*;
use crate::config::MachineSettings;

fn timing() -> PoolTiming {
    PoolTiming {
        scale: 15.0,
        removals: 15.0,
        grow_after: 20.0,
        try_every: 60.0,
        boot: 900.0,
        lost: 300.0,
        image: 600.0,
    }
}

fn ty(name: &str, wait: f64) -> PoolType {
    PoolType::on_demand(name, wait)
}

fn pool(types: &[(&str, f64)]) -> PoolView {
    PoolView {
        pool: Pool {
            name: "builders".into(),
            types: types.iter().map(|(n, w)| ty(n, *w)).collect(),
            max_machines: 3,
            idle_seconds: 120.0,
            slots: 1,
            image: None,
            machines: MachineSettings::default(),
        },
        retired: false,
        walk_type: 0,
        walk_for: None,
        tried_ago: None,
        status: String::new(),
        waiting: 0,
        demand: 0,
    }
}

/// A seen, idle-for-nothing machine with one slot.
fn machine(id: i64) -> Machine {
    Machine {
        id,
        pool: "builders".into(),
        name: format!("orca-builders-{id}"),
        type_: "small".into(),
        location: "rack-a".into(),
        arch: String::new(),
        role: format!("orca_m_s_{id}"),
        provider_id: None,
        slots: 1,
        seen: true,
        silent: 0.0,
        idle: 0.0,
        running: 0,
        age: 1000.0,
        busy_at: chrono::Utc::now(),
        ending: false,
        region: None,
        market: "on-demand".into(),
        notice: None,
    }
}

fn removed(s: &Shrink) -> Vec<(i64, Removal)> {
    s.remove.iter().map(|(m, r)| (m.id, r.clone())).collect()
}

#[test]
fn a_machine_idle_beyond_idle_seconds_with_no_demand_is_removed_while_still_idle() {
    let v = pool(&[("small", 0.0)]);
    let (idle, fresh) = (
        Machine {
            idle: 121.0,
            ..machine(1)
        },
        Machine {
            idle: 119.0,
            ..machine(2)
        },
    );
    let s = shrink(&v, &[&idle, &fresh], &timing(), true);
    let why = Removal::Idle {
        idle: 121.0,
        idle_seconds: 120.0,
    };
    assert_eq!(removed(&s), [(1, why.clone())]);
    assert!(why.if_idle());
    assert_eq!(
        why.why(),
        "idle for 121 s with no demand (idle_seconds 120)"
    );
    assert_eq!(s.live.iter().map(|m| m.id).collect::<Vec<_>>(), [2]);
    assert_eq!(s.demand, 0);
}

#[test]
fn the_next_idle_removal_is_due_when_the_first_machine_reaches_idle_seconds() {
    let v = pool(&[("small", 0.0)]);
    let at = |idle: f64| Machine { idle, ..machine(1) };
    let (a, b) = (at(100.0), at(30.0));
    assert_eq!(idle_due(&v, &[&a, &b]), Some(20.0));
    // One running now (beaten a second ago) may come due once its run
    // ends: as soon as idle_seconds after its last beat.
    let busy = Machine {
        running: 1,
        ..at(1.0)
    };
    assert_eq!(idle_due(&v, &[&busy]), Some(119.0));
    // Past idle_seconds (removed now, or kept) or being removed: as a
    // machine made after the look, idle_seconds; so with none.
    let past = at(150.0);
    let ending = Machine {
        ending: true,
        ..at(100.0)
    };
    assert_eq!(idle_due(&v, &[&past, &ending]), Some(120.0));
    assert_eq!(idle_due(&v, &[]), Some(120.0));
    // A retired pool's machines go as soon as they run nothing.
    let retired = PoolView {
        retired: true,
        ..pool(&[("small", 0.0)])
    };
    assert_eq!(idle_due(&retired, &[&a]), None);
}

#[test]
fn no_machine_is_removed_for_idleness_while_there_is_demand() {
    let v = PoolView {
        waiting: 3,
        ..pool(&[("small", 0.0)])
    };
    let idle = Machine {
        idle: 1000.0,
        ..machine(1)
    };
    let s = shrink(&v, &[&idle], &timing(), true);
    assert!(s.remove.is_empty());
    // Its room is taken off the demand.
    assert_eq!(s.demand, 2);
}

#[test]
fn a_busy_or_booting_machine_is_not_removed_for_idleness() {
    let v = pool(&[("small", 0.0)]);
    let busy = Machine {
        idle: 1000.0,
        running: 1,
        ..machine(1)
    };
    let booting = Machine {
        idle: 1000.0,
        seen: false,
        age: 10.0,
        ..machine(2)
    };
    let s = shrink(&v, &[&busy, &booting], &timing(), true);
    assert!(s.remove.is_empty());
}

#[test]
fn a_worker_not_seen_within_the_boot_limit_is_removed_busy_or_not() {
    let v = pool(&[("small", 0.0)]);
    let late = Machine {
        seen: false,
        age: 900.0,
        ..machine(1)
    };
    let booting = Machine {
        seen: false,
        age: 899.0,
        ..machine(2)
    };
    let s = shrink(&v, &[&late, &booting], &timing(), true);
    let why = Removal::NeverBooted { boot: 900.0 };
    assert_eq!(removed(&s), [(1, why.clone())]);
    assert!(!why.if_idle());
    assert_eq!(why.why(), "its worker never showed up within 900s");
}

#[test]
fn a_worker_silent_beyond_the_lost_limit_is_removed_and_its_runs_queued_again() {
    let v = PoolView {
        waiting: 1,
        ..pool(&[("small", 0.0)])
    };
    let lost = Machine {
        silent: 301.4,
        running: 1,
        ..machine(1)
    };
    let s = shrink(&v, &[&lost], &timing(), true);
    let why = Removal::Silent { silent: 301.4 };
    assert_eq!(removed(&s), [(1, why.clone())]);
    // Busy as it is: ending its row queues its runs again.
    assert!(!why.if_idle());
    assert_eq!(why.why(), "its worker went silent for 301s");
    // A lost machine's room is no room: its run is demand again.
    assert_eq!(s.demand, 1);
}

#[test]
fn silence_is_not_judged_just_after_taking_the_lead() {
    let v = pool(&[("small", 0.0)]);
    let late = Machine {
        seen: false,
        age: 10_000.0,
        ..machine(1)
    };
    let lost = Machine {
        silent: 10_000.0,
        running: 1,
        ..machine(2)
    };
    let s = shrink(&v, &[&late, &lost], &timing(), false);
    assert!(s.remove.is_empty());
}

#[test]
fn a_removal_begun_before_is_taken_up_again_first() {
    let v = pool(&[("small", 0.0)]);
    let (ending, idle) = (
        Machine {
            ending: true,
            running: 1,
            ..machine(1)
        },
        Machine {
            idle: 500.0,
            ..machine(2)
        },
    );
    let s = shrink(&v, &[&idle, &ending], &timing(), false);
    let got = removed(&s);
    assert_eq!(got[0], (1, Removal::Resumed));
    assert_eq!(got[1].0, 2);
    assert!(!Removal::Resumed.if_idle());
}

#[test]
fn a_retired_pools_idle_machines_are_removed_and_its_busy_ones_kept() {
    let v = PoolView {
        retired: true,
        waiting: 5,
        ..pool(&[("small", 0.0)])
    };
    let (idle, busy) = (
        machine(1),
        Machine {
            running: 1,
            ..machine(2)
        },
    );
    let s = shrink(&v, &[&idle, &busy], &timing(), true);
    let why = Removal::Retired {
        pool: "builders".into(),
    };
    assert_eq!(removed(&s), [(1, why.clone())]);
    assert!(why.if_idle());
    assert_eq!(why.why(), "pool builders is no longer in orca.toml");
    assert_eq!(s.demand, 0);
    match grow(&v, s.demand, None, &s.live, 1, &timing()) {
        Grow::Done(d) => assert_eq!(d.status, RETIRED),
        g => panic!("{g:?}"),
    }
}

#[test]
fn without_demand_a_retired_status_is_not_kept() {
    assert_eq!(status_without_demand(RETIRED), "no demand");
    assert_eq!(status_without_demand(""), "no demand");
    assert_eq!(
        status_without_demand(&format!("{WAITING_OUT}; last attempt: made x")),
        "no demand"
    );
    assert_eq!(status_without_demand("made orca-p-1"), "made orca-p-1");
}

#[test]
fn demand_beyond_the_room_attempts_a_machine() {
    let v = pool(&[("small", 0.0)]);
    let g = grow(&v, 1, None, &[], 0, &timing());
    assert_eq!(
        g,
        Grow::Attempt(Decided {
            demand: 1,
            status: String::new(),
            walk_type: 0,
            walk_since: WalkSince::Keep,
            tried: true,
        })
    );
}

#[test]
fn without_demand_nothing_is_made_and_the_walk_starts_over() {
    let v = PoolView {
        walk_type: 1,
        walk_for: Some(30.0),
        status: "made orca-builders-1 (type small, location rack-a)".into(),
        ..pool(&[("big", 60.0), ("small", 0.0)])
    };
    let Grow::Done(d) = grow(&v, 0, None, &[], 0, &timing()) else {
        panic!("attempted without demand")
    };
    assert_eq!((d.walk_type, d.walk_since), (0, WalkSince::Clear));
    assert_eq!(d.status, v.status);
    assert!(d.changes(&v));
    // A walk at its start is left alone.
    let Grow::Done(d) = grow(&pool(&[("small", 0.0)]), 0, None, &[], 0, &timing()) else {
        panic!("attempted without demand")
    };
    assert_eq!(
        (d.walk_since, d.status.as_str()),
        (WalkSince::Keep, "no demand")
    );
}

#[test]
fn a_machine_gone_before_its_worker_was_seen_is_ended_unseen() {
    let booting = Machine {
        seen: false,
        age: 5.0,
        ..machine(1)
    };
    let seen = Machine {
        seen: true,
        age: 5.0,
        ..machine(2)
    };
    let young = Machine {
        seen: false,
        age: 1.0,
        ..machine(3)
    };
    let all = [&booting, &seen, &young];
    let none_listed = |_: &str| false;
    let names = |v: Vec<&Machine>| v.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(ended_unseen(&all, none_listed, 0.0)),
        ["orca-builders-1", "orca-builders-3"]
    );
    assert_eq!(
        names(ended_unseen(&all, none_listed, 2.0)),
        ["orca-builders-1"]
    );
    assert!(ended_unseen(&all, |_| true, 0.0).is_empty());
    let ending = Machine {
        ending: true,
        ..booting.clone()
    };
    assert!(ended_unseen(&[&ending], none_listed, 0.0).is_empty());
}

#[test]
fn a_refusal_is_news_once_per_change() {
    assert!(refusal_is_news(None, "UnauthorizedOperation: no"));
    assert!(!refusal_is_news(
        Some("UnauthorizedOperation: no"),
        "UnauthorizedOperation: no"
    ));
    assert!(refusal_is_news(
        Some("UnauthorizedOperation: no"),
        "InvalidAMIID.NotFound: gone"
    ));
}

#[test]
fn one_machine_boots_at_a_time() {
    let v = pool(&[("small", 0.0)]);
    let booting = Machine {
        seen: false,
        age: 5.0,
        ..machine(4)
    };
    let Grow::Done(d) = grow(&v, 2, None, &[&booting], 1, &timing()) else {
        panic!("attempted while one boots")
    };
    assert_eq!(d.status, "waiting for orca-builders-4 to boot");
}

#[test]
fn no_machine_is_made_beyond_max_machines() {
    let v = pool(&[("small", 0.0)]);
    let (a, b, c) = (machine(1), machine(2), machine(3));
    let Grow::Done(d) = grow(&v, 2, None, &[&a, &b, &c], 3, &timing()) else {
        panic!("attempted at max_machines")
    };
    assert_eq!(d.status, "at max_machines (3)");
    // A machine that turned out busy still stands.
    assert!(matches!(
        grow(&v, 2, None, &[&a, &b], 3, &timing()),
        Grow::Done(_)
    ));
    assert!(matches!(
        grow(&v, 2, None, &[&a, &b], 2, &timing()),
        Grow::Attempt(_)
    ));
}

#[test]
fn attempts_are_at_most_one_a_try_interval() {
    let v = PoolView {
        tried_ago: Some(59.0),
        status: "no capacity for type small in any location (rack-a: full)".into(),
        ..pool(&[("small", 0.0)])
    };
    let Grow::Done(d) = grow(&v, 1, None, &[], 0, &timing()) else {
        panic!("attempted within the try interval")
    };
    assert_eq!(
        d.status,
        "waiting out the try interval; last attempt: no capacity for type small in any location (rack-a: full)"
    );
    // Said again, the status stays the same.
    let again = PoolView {
        status: d.status.clone(),
        ..v.clone()
    };
    let Grow::Done(d2) = grow(&again, 1, None, &[], 0, &timing()) else {
        panic!("attempted within the try interval")
    };
    assert_eq!(d2.status, d.status);
    let later = PoolView {
        tried_ago: Some(60.0),
        ..v
    };
    assert!(matches!(
        grow(&later, 1, None, &[], 0, &timing()),
        Grow::Attempt(_)
    ));
}

#[test]
fn trouble_removing_or_listing_is_the_status_and_nothing_is_made() {
    let v = pool(&[("small", 0.0)]);
    let Grow::Done(d) = grow(
        &v,
        1,
        Some("can't list its machines: x".into()),
        &[],
        0,
        &timing(),
    ) else {
        panic!("attempted with trouble")
    };
    assert_eq!(d.status, "can't list its machines: x");
}

#[test]
fn an_unchanged_pass_writes_nothing() {
    let v = PoolView {
        status: "no demand".into(),
        ..pool(&[("small", 0.0)])
    };
    let Grow::Done(d) = grow(&v, 0, None, &[], 0, &timing()) else {
        panic!("attempted without demand")
    };
    assert!(!d.changes(&v));
    assert!(
        Decided {
            demand: 1,
            ..d.clone()
        }
        .changes(&v)
    );
    assert!(Decided { tried: true, ..d }.changes(&v));
}

#[test]
fn a_type_no_location_has_is_kept_for_its_wait_then_the_next_is_tried() {
    let v = pool(&[("big", 60.0), ("small", 0.0)]);
    let types = &v.pool.types;
    // The first attempt starts the walk on its type.
    let mut w = TypeWalk::begin(&v);
    w.tried();
    assert_eq!((w.ty, w.since, w.waited), (0, WalkSince::Now, Some(0.0)));
    assert_eq!(w.no_capacity(types), Walk::Keep);
    assert_eq!(
        say_no_capacity(&types[0], 0.0, &Walk::Keep, &["rack-a: full".into()]),
        "no capacity for type big in any location (rack-a: full); keeping it for 60s more of its wait"
    );
    // 59 s on: kept, its start unchanged.
    let mut w = TypeWalk::begin(&PoolView {
        walk_for: Some(59.0),
        ..v.clone()
    });
    w.tried();
    assert_eq!(w.no_capacity(types), Walk::Keep);
    assert_eq!((w.ty, w.since), (0, WalkSince::Keep));
    // Its wait passed: on to the next, started now.
    let mut w = TypeWalk::begin(&PoolView {
        walk_for: Some(60.0),
        ..v.clone()
    });
    w.tried();
    assert_eq!(w.no_capacity(types), Walk::Next(&types[1]));
    assert_eq!((w.ty, w.since), (1, WalkSince::Now));
    assert_eq!(
        say_no_capacity(
            &types[0],
            60.0,
            &Walk::Next(&types[1]),
            &["rack-a: full".into()]
        ),
        "no capacity for type big in any location (rack-a: full); tried it for 60s of its wait 60s: next, type small"
    );
}

#[test]
fn the_last_type_is_tried_again_for_as_long_as_there_is_demand() {
    let v = PoolView {
        walk_type: 1,
        walk_for: Some(1e6),
        ..pool(&[("big", 60.0), ("small", 0.0)])
    };
    let mut w = TypeWalk::begin(&v);
    w.tried();
    assert_eq!(w.no_capacity(&v.pool.types), Walk::Again);
    assert_eq!((w.ty, w.since), (1, WalkSince::Keep));
    assert_eq!(
        say_no_capacity(&v.pool.types[1], 1e6, &Walk::Again, &[]),
        "no capacity for type small in any location (); it is the last type: trying it again"
    );
}

#[test]
fn a_machine_made_starts_the_walk_over() {
    let v = PoolView {
        walk_type: 1,
        walk_for: Some(5.0),
        ..pool(&[("big", 60.0), ("small", 0.0)])
    };
    let mut w = TypeWalk::begin(&v);
    w.tried();
    w.made();
    assert_eq!((w.ty, w.since), (0, WalkSince::Clear));
}

#[test]
fn a_type_that_does_not_fit_is_skipped_and_the_last_starts_the_walk_over() {
    let v = PoolView {
        walk_for: Some(30.0),
        ..pool(&[("arm", 60.0), ("x86", 60.0), ("other", 0.0)])
    };
    let mut w = TypeWalk::begin(&v);
    assert!(w.skip(3));
    assert_eq!((w.ty, w.since, w.waited), (1, WalkSince::Now, Some(0.0)));
    assert!(w.skip(3));
    assert!(!w.skip(3));
    assert_eq!((w.ty, w.since), (0, WalkSince::Clear));
}

#[test]
fn a_walk_past_its_pools_types_is_on_the_last_not_started() {
    // The pool lost types since the walk was stored.
    let v = PoolView {
        walk_type: 4,
        walk_for: Some(100.0),
        ..pool(&[("big", 60.0), ("small", 0.0)])
    };
    let mut w = TypeWalk::begin(&v);
    assert_eq!((w.ty, w.waited), (1, None));
    w.tried();
    assert_eq!(w.since, WalkSince::Now);
    let Grow::Attempt(d) = grow(&PoolView { waiting: 1, ..v }, 1, None, &[], 0, &timing()) else {
        panic!("no attempt")
    };
    assert_eq!(d.walk_type, 1);
}

#[test]
fn the_walk_is_stored_as_sql_says_it() {
    assert_eq!(WalkSince::Keep.as_sql(), "keep");
    assert_eq!(WalkSince::Now.as_sql(), "now");
    assert_eq!(WalkSince::Clear.as_sql(), "clear");
}

#[test]
fn a_machine_that_heard_a_spot_notice_goes_once_it_runs_nothing() {
    let v = pool(&[("small", 0.0)]);
    let notice = |n: &str, running: i64, id: i64| Machine {
        notice: Some(n.into()),
        running,
        ..machine(id)
    };
    let (handed_back, handing, drained, draining) = (
        notice("interrupted", 0, 1),
        notice("interrupted", 1, 2),
        notice("draining", 0, 3),
        notice("draining", 1, 4),
    );
    let s = shrink(
        &v,
        &[&handed_back, &handing, &drained, &draining],
        &timing(),
        true,
    );
    let got = removed(&s);
    assert_eq!(
        got,
        [
            (
                1,
                Removal::Noticed {
                    notice: "interrupted".into()
                }
            ),
            (
                3,
                Removal::Noticed {
                    notice: "draining".into()
                }
            )
        ]
    );
    // Begun by the pass, whatever the demand, busy or not (it claims
    // nothing more).
    assert!(!got[0].1.if_idle());
    assert!(got[0].1.why().contains("spot interruption notice"));
    assert!(got[1].1.why().contains("rebalance recommendation"));
    // Those still running their runs stay, their room not counted.
    assert_eq!(s.live.iter().map(|m| m.id).collect::<Vec<_>>(), [2, 4]);
}
