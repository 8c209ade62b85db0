//! The worker loop's unit tests (`pools::worker`): its pacing and
//! decisions, without a database.

use super::*;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// The default pacing: a tick and a beat a second, idle every 2 s.
fn pacing() -> Pacing {
    Pacing {
        tick: MS(1000),
        beat: MS(1000),
        idle: MS(2000),
        idle_listening: MS(6000),
    }
}

/// A worker of 4 slots with nothing running, its last beat `since` ago.
fn idle(since: Option<u64>) -> Now {
    Now {
        slots: 4,
        running: 0,
        pending: 0,
        ending: 0,
        idle: true,
        took: false,
        since_beat: since.map(MS),
        listening: false,
        woken: false,
    }
}

#[test]
fn an_idle_worker_rounds_only_as_its_idle_beat_comes_due() {
    let p = pacing();
    // Its first round at once.
    assert_eq!(
        p.step(&idle(None)),
        Step {
            every: MS(2000),
            round: Some(4)
        }
    );
    // Not while the beat is more than half a tick away...
    assert_eq!(p.step(&idle(Some(0))).round, None);
    assert_eq!(p.step(&idle(Some(1400))).round, None);
    // ... and on the tick it is due, claiming its whole room.
    assert_eq!(p.step(&idle(Some(1500))).round, Some(4));
    assert_eq!(p.step(&idle(Some(1500))).every, MS(2000));
}

#[test]
fn a_worker_whose_last_round_took_a_run_looks_again_each_tick() {
    let p = pacing();
    // It took one and has room left: the next tick looks again, even a
    // moment after a beat, and beats come every second from now on.
    let took = Now {
        running: 1,
        idle: false,
        took: true,
        ..idle(Some(0))
    };
    assert_eq!(
        p.step(&took),
        Step {
            every: MS(1000),
            round: Some(3)
        }
    );
    // Its runs already over, it has not rested yet: it looks, at the
    // beat's pace.
    let ended = Now {
        took: true,
        ..idle(Some(0))
    };
    assert_eq!(
        p.step(&ended),
        Step {
            every: MS(1000),
            round: Some(4)
        }
    );
}

#[test]
fn a_busy_worker_that_found_nothing_skips_the_tick_after_a_late_beat() {
    let p = pacing();
    let busy = |since| Now {
        running: 2,
        idle: false,
        ..idle(Some(since))
    };
    // The heartbeat thread beat in its stead under half a tick ago.
    assert_eq!(p.step(&busy(100)).round, None);
    // Otherwise it looks each tick while it has room.
    assert_eq!(p.step(&busy(500)).round, Some(2));
    assert_eq!(p.step(&busy(500)).every, MS(1000));
}

#[test]
fn a_full_worker_rounds_only_when_its_beat_is_due() {
    let p = pacing();
    let full = |since| Now {
        running: 4,
        idle: false,
        took: true,
        ..idle(Some(since))
    };
    assert_eq!(p.step(&full(400)).round, None);
    // Within half a tick of its beat: a round that claims nothing.
    assert_eq!(
        p.step(&full(500)),
        Step {
            every: MS(1000),
            round: Some(0)
        }
    );
}

#[test]
fn ends_go_at_once_and_their_slots_are_the_round_s_room() {
    let p = pacing();
    // Full, two of its four attempts ended a moment after a beat: their
    // ends ride this tick's round, which may claim their two slots.
    let ending = Now {
        running: 2,
        pending: 2,
        ending: 2,
        idle: false,
        ..idle(Some(0))
    };
    assert_eq!(
        p.step(&ending),
        Step {
            every: MS(1000),
            round: Some(2)
        }
    );
    // An attempt to queue again (pending, not riding) holds its slot.
    let requeue = Now {
        running: 3,
        pending: 1,
        ending: 0,
        idle: false,
        ..idle(Some(600))
    };
    assert_eq!(p.step(&requeue).round, Some(0));
}

#[test]
fn a_listening_idle_worker_looks_every_6_s_and_at_once_when_woken() {
    let p = pacing();
    let listening = |since| Now {
        listening: true,
        ..idle(Some(since))
    };
    assert_eq!(p.step(&listening(1500)).round, None);
    assert_eq!(p.step(&listening(5000)).round, None);
    assert_eq!(
        p.step(&listening(5500)),
        Step {
            every: MS(6000),
            round: Some(4)
        }
    );
    // Woken a moment after a beat: it looks now, its whole room.
    let woken = Now {
        woken: true,
        ..listening(0)
    };
    assert_eq!(p.step(&woken).round, Some(4));
    // Woken with no room: no look, only its beat when due.
    let full = Now {
        running: 4,
        idle: false,
        woken: true,
        ..listening(100)
    };
    assert_eq!(p.step(&full).round, None);
    // Busy with room, a moment after the heartbeat thread beat: woken,
    // it looks all the same.
    let busy = Now {
        running: 1,
        idle: false,
        woken: true,
        ..listening(100)
    };
    assert_eq!(
        p.step(&busy),
        Step {
            every: MS(1000),
            round: Some(3)
        }
    );
}

#[test]
fn a_listening_idle_worker_beats_four_times_within_the_lost_limit_at_most_every_6_s() {
    assert_eq!(idle_listening(300.0), Duration::from_secs(6));
    assert_eq!(idle_listening(24.0), Duration::from_secs(6));
    assert_eq!(idle_listening(8.0), Duration::from_secs(2));
    assert_eq!(idle_listening(0.1), Duration::from_secs_f64(0.2));
}

#[test]
fn an_idle_worker_beats_four_times_within_the_lost_limit_at_most_every_2_s() {
    assert_eq!(idle_every(300.0), Duration::from_secs(2));
    assert_eq!(idle_every(8.0), Duration::from_secs(2));
    assert_eq!(idle_every(3.0), Duration::from_secs_f64(0.75));
    assert_eq!(idle_every(0.1), Duration::from_secs_f64(0.2));
}
