//! The checker's rules on made-up facts: each promise's violation found,
//! each excuse a fault gives taken, and nothing found where nothing broke.

use super::*;

const SCHED: i32 = 100;
const OWN: i32 = 1;

fn begin(run: i64, start: i32, pid: i32, t: f64) -> Begin {
    Begin {
        run,
        start,
        pid,
        t,
        sup: SCHED,
        supg: OWN,
        pipeline: "p".into(),
    }
}

fn end(run: i64, start: i32, pid: i32, t: f64, code: i32) -> End {
    End {
        run,
        start,
        pid,
        t,
        code: Some(code),
    }
}

fn ev(kind: &str, at: f64) -> Event {
    Event {
        kind: kind.into(),
        at,
        why: String::new(),
    }
}

fn run(state: &str, start: i32) -> Run {
    Run {
        pipeline: "p".into(),
        state: state.into(),
        start,
        fill: false,
        exit_code: Some(0),
        exit_signal: None,
        why: None,
        scheduled_for: None,
    }
}

fn facts() -> Facts {
    Facts {
        begins: Vec::new(),
        ends: Vec::new(),
        runs: BTreeMap::new(),
        events: BTreeMap::new(),
        max_runs: [("p".to_string(), 2)].into(),
        timeouts: [("p".to_string(), 5.0)].into(),
        retries: BTreeMap::new(),
        cancels: Default::default(),
        kill_grace: 2.0,
        seen: Vec::new(),
        faults: Vec::new(),
        now: 100.0,
        own_group: OWN,
    }
}

/// Run 1: attempt 1 (pid 11) requeued at 5 while it ran on to 9;
/// attempt 2 (pid 12) from 6 to 8, succeeded.
fn doubled() -> Facts {
    let mut f = facts();
    f.begins = vec![begin(1, 1, 11, 1.0), begin(1, 2, 12, 6.0)];
    f.ends = vec![end(1, 1, 11, 9.0, 0), end(1, 2, 12, 8.0, 0)];
    f.runs.insert(1, run("succeeded", 2));
    f.events.insert(
        1,
        vec![
            ev("started", 1.0),
            ev("requeued", 5.0),
            ev("started", 6.0),
            ev("succeeded", 8.1),
        ],
    );
    f
}

#[test]
fn two_attempts_at_once_are_doubled_unless_their_supervisor_was_cut_off() {
    let v = check(&doubled());
    assert!(
        v.iter()
            .any(|l| l.starts_with("doubled: run 1 ran attempts 1 and 2")),
        "{v:?}"
    );
    let mut f = doubled();
    f.faults.push(Record {
        what: "SIGSTOP".into(),
        target: Target::Scheduler(SCHED),
        effect: Effect::CutOff,
        start: 0.5,
        end: 4.0,
        blocks: Block::Stopped,
    });
    let v = check(&f);
    assert!(!v.iter().any(|l| l.starts_with("doubled")), "{v:?}");
    // A Postgres outage excuses it only for a machine's runs.
    let mut f = doubled();
    f.faults.push(Record {
        what: "Postgres down".into(),
        target: Target::All,
        effect: Effect::CutOff,
        start: 0.5,
        end: 4.0,
        blocks: Block::Stopped,
    });
    assert!(check(&f).iter().any(|l| l.starts_with("doubled")));
    for b in f.begins.iter_mut() {
        b.supg = 77;
    }
    assert!(!check(&f).iter().any(|l| l.starts_with("doubled")));
}

#[test]
fn one_attempt_in_two_processes_is_doubled() {
    let mut f = facts();
    f.begins = vec![begin(1, 1, 11, 1.0), begin(1, 1, 12, 1.5)];
    f.ends = vec![end(1, 1, 11, 2.0, 0), end(1, 1, 12, 2.5, 0)];
    f.runs.insert(1, run("succeeded", 1));
    f.events
        .insert(1, vec![ev("started", 1.0), ev("succeeded", 2.6)]);
    let v = check(&f);
    assert!(
        v.iter()
            .any(|l| l.contains("run 1 attempt 1 ran in 2 processes")),
        "{v:?}"
    );
}

#[test]
fn more_than_max_runs_at_once_is_seen_and_fills_are_on_top() {
    let mut f = facts();
    for (id, t) in [(1, 1.0), (2, 1.2), (3, 1.4)] {
        f.begins.push(begin(id, 1, 10 + id as i32, t));
        f.ends.push(end(id, 1, 10 + id as i32, 3.0, 0));
        f.runs.insert(id, run("succeeded", 1));
        f.events
            .insert(id, vec![ev("started", t), ev("succeeded", 3.1)]);
    }
    let v = check(&f);
    assert!(
        v.iter()
            .any(|l| l.contains("max_runs: pipeline p (max_runs 2) ran 3 runs")),
        "{v:?}"
    );
    f.runs.get_mut(&3).unwrap().fill = true;
    assert!(check(&f).is_empty(), "{:?}", check(&f));
}

/// Seed 8543 met this: an attempt SIGKILLed at its timeout (no end
/// line; the observer found it gone a scan late) is recorded ended at
/// 10.015 by the database's clock, and the run its worker claimed in
/// the same round began after, at 10.019, which the ledger's 10 ms
/// clock (`/proc/uptime`) writes as 10.01: not three at once.
#[test]
fn a_begin_in_the_same_10_ms_as_an_end_recorded_before_it_is_no_overlap() {
    let mut f = facts();
    for (id, from, to) in [(1, 1.0, 0.0), (2, 8.0, 12.0), (3, 10.01, 12.0)] {
        f.begins.push(begin(id, 1, 10 + id as i32, from));
        if to > 0.0 {
            f.ends.push(end(id, 1, 10 + id as i32, to, 0));
        }
        f.runs.insert(id, run("succeeded", 1));
    }
    f.runs.insert(1, run("failed", 1));
    f.events
        .insert(1, vec![ev("started", 1.0), ev("failed", 10.015)]);
    f.events
        .insert(2, vec![ev("started", 8.0), ev("succeeded", 12.1)]);
    f.events
        .insert(3, vec![ev("started", 10.01), ev("succeeded", 12.1)]);
    f.seen.push(Seen {
        pid: 11,
        run: 1,
        start: 1,
        cmdline: "sh command.sh".into(),
        sup: SCHED,
        supg: OWN,
        first: 1.1,
        last: 9.9,
        gone: Some(10.2),
    });
    let v: Vec<String> = check(&f)
        .into_iter()
        .filter(|l| l.starts_with("max_runs"))
        .collect();
    assert!(v.is_empty(), "{v:?}");
    // Ten milliseconds more is an overlap.
    f.events.get_mut(&1).unwrap()[1] = ev("failed", 10.025);
    assert!(
        check(&f).iter().any(|l| l.starts_with("max_runs")),
        "{:?}",
        check(&f)
    );
}

#[test]
fn a_run_left_queued_is_lost_and_outcomes_must_agree() {
    let mut f = facts();
    f.runs.insert(1, run("queued", 0));
    f.runs.insert(2, run("failed", 1));
    f.begins.push(begin(2, 1, 20, 1.0));
    f.ends.push(end(2, 1, 20, 2.0, 0));
    f.events
        .insert(2, vec![ev("started", 1.0), ev("failed", 2.1)]);
    let v = check(&f);
    assert!(v.iter().any(|l| l.starts_with("lost: run 1")), "{v:?}");
    assert!(!v.iter().any(|l| l.starts_with("retries")), "{v:?}");
    f.retries.insert("p".into(), 1);
    let v = check(&f);
    assert!(
        v.iter()
            .any(|l| l
                .starts_with("retries: run 2 (p) is failed after 1 failed attempts (retries 1)")),
        "{v:?}"
    );
    assert!(
        v.iter().any(|l| l.contains("run 2 (p) attempt 1 exited 0")),
        "{v:?}"
    );
}

#[test]
fn an_attempt_past_its_timeout_and_grace_is_seen_unless_its_supervisor_was_stopped() {
    let mut f = facts();
    f.runs.insert(1, run("failed", 1));
    f.begins.push(begin(1, 1, 11, 1.0));
    f.ends.push(End {
        run: 1,
        start: 1,
        pid: 11,
        t: 12.5,
        code: None,
    });
    f.events
        .insert(1, vec![ev("started", 1.0), ev("failed", 12.6)]);
    f.runs.get_mut(&1).unwrap().exit_code = Some(143);
    let v = check(&f);
    assert!(
        v.iter()
            .any(|l| l.starts_with("timeout: run 1 (p) attempt 1 ran 11.5s")),
        "{v:?}"
    );
    f.faults.push(Record {
        what: "SIGSTOP".into(),
        target: Target::Scheduler(SCHED),
        effect: Effect::CutOff,
        start: 4.0,
        end: 10.0,
        blocks: Block::Stopped,
    });
    assert!(check(&f).is_empty(), "{:?}", check(&f));
    // A call that held its loop up instead excuses nothing (D1, fixed:
    // timeouts are the watchdog thread's).
    f.faults[0].blocks = Block::Io;
    let found = check_noting(&f);
    assert!(
        found.violations[0].starts_with("timeout: run 1 (p) attempt 1"),
        "{:?}",
        found.violations
    );
}

#[test]
fn a_process_outliving_its_attempt_is_leaked() {
    let mut f = facts();
    f.runs.insert(1, run("succeeded", 1));
    f.begins.push(begin(1, 1, 11, 1.0));
    f.ends.push(end(1, 1, 11, 2.0, 0));
    f.events
        .insert(1, vec![ev("started", 1.0), ev("succeeded", 2.1)]);
    f.seen.push(Seen {
        pid: 12,
        run: 1,
        start: 1,
        cmdline: "sleep 300".into(),
        sup: SCHED,
        supg: OWN,
        first: 1.1,
        last: 30.0,
        gone: Some(30.2),
    });
    let v = check(&f);
    assert!(
        v.iter()
            .any(|l| l.starts_with("leaked: run 1 attempt 1: pid 12")),
        "{v:?}"
    );
    // Its supervisor cut off just after the attempt ended, and for long:
    // it couldn't stop it; it did within GRACE of coming back.
    f.faults.push(Record {
        what: "partition".into(),
        target: Target::Scheduler(SCHED),
        effect: Effect::CutOff,
        start: 3.0,
        end: 25.0,
        blocks: Block::Stopped,
    });
    assert!(check(&f).is_empty(), "{:?}", check(&f));
    f.seen[0].last = 40.0;
    assert_eq!(check(&f).len(), 1, "{:?}", check(&f));
}

#[test]
fn a_nonzero_exit_whose_supervisor_was_killed_before_it_wrote_it_may_fail_as_lost() {
    // Attempt 1 exited 3 at 2.0; its scheduler was killed at 2.1 before it
    // wrote the end; the next leader's sweep failed it as lost
    // (on_lost = "fail"), with no exit code: orca's promise for an end
    // lost with its supervisor.
    let mut f = facts();
    let mut r = run("failed", 1);
    r.exit_code = None;
    r.why = Some("lost (on_lost = \"fail\"): its supervisor was not seen".into());
    f.runs.insert(1, r);
    f.begins.push(begin(1, 1, 11, 1.0));
    f.ends.push(end(1, 1, 11, 2.0, 3));
    f.events.insert(
        1,
        vec![ev("started", 1.0), {
            let mut e = ev("failed", 9.0);
            e.why = "lost (on_lost = \"fail\"): its supervisor was not seen".into();
            e
        }],
    );
    let killed = Record {
        what: "kill -9 scheduler".into(),
        target: Target::Scheduler(SCHED),
        effect: Effect::Killed,
        start: 2.1,
        end: 2.1,
        blocks: Block::Stopped,
    };
    let v = check(&f);
    assert!(
        v.iter()
            .any(|l| l.contains("run 1 (p) last attempt 1 exited 3")),
        "without the fault it is a wrong exit code: {v:?}"
    );
    f.faults.push(killed);
    let v = check(&f);
    assert!(!v.iter().any(|l| l.starts_with("tables: run 1")), "{v:?}");
}
