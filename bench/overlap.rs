//! Scheduler overlap: with `ORCA_OVERLAP=on`, how long no scheduler leads,
//! from real processes, each figure repeated `ORCA_BENCH_OVERLAP_REPS`
//! times on a fresh `orca_bench_overlap` (its one pipeline never fires: no
//! runs, so a draining scheduler ends at once):
//!
//! - deploy handover: A leads, B starts; B's `lead_since` minus the time of
//!   A's `draining` event (the database's clock);
//! - crash: A leads, kill -9 A, start C at once; wall time from the kill to
//!   C's row leading, polled every 0.05 s;
//! - hang: as crash, with SIGSTOP instead, a stale limit of 3 s; then
//!   SIGCONT, and A should drain and exit by itself.
//!
//! The tick is the default 1 s, as in production; the stale limit the
//! default 10 s but for the hang. The figures depend on where in A's tick
//! B starts, or A dies or hangs (ticks run on a fixed 1 s grid); a deploy
//! or a crash comes at any moment of it, so repetition i waits
//! (i - 0.5) / reps s after seeing A lead (which A does on its first tick)
//! before it acts: phases spread over the tick, not all just after it.

use crate::ctx::{Bench, pause, wait_for};
use crate::harness::{Proc, TestDb, exit_code};
use crate::out::{fig, heading, repeated, since, words};
use std::time::Instant;

const CONFIG: &str = "[pipelines.t]\ncommand = \"true\"\n";

/// One repetition's database, a client on it, and starting schedulers.
struct Rep<'a> {
    b: &'a Bench,
    db: TestDb,
    c: postgres::Client,
    tag: String,
}

impl<'a> Rep<'a> {
    fn new(b: &'a Bench, tag: String) -> Rep<'a> {
        let db = b.db("orca_bench_overlap", CONFIG);
        let c = b.client(&db);
        Rep { b, db, c, tag }
    }

    /// An overlap scheduler with `ORCA_IMAGE` `image` and stale limit
    /// `stale` s.
    fn scheduler(&self, image: &str, stale: &str) -> Proc {
        self.b.spawn(
            &self.db,
            &["scheduler"],
            &[
                ("ORCA_OVERLAP", "on"),
                ("ORCA_IMAGE", image),
                ("ORCA_TICK_SECONDS", "1"),
                ("ORCA_STALE_SECONDS", stale),
            ],
            &format!("ov-{}-{image}.log", self.tag),
        )
    }

    /// A number about the newest `orca.schedulers` row of process `pid`:
    /// `lead_since - joined_at` in seconds.
    fn join_to_lead(&mut self, pid: i32) -> Option<f64> {
        self.c
            .query_opt(
                "SELECT extract(epoch FROM lead_since - joined_at)::float8
                 FROM orca.schedulers WHERE pid = $1 ORDER BY id DESC LIMIT 1",
                &[&pid],
            )
            .ok()
            .flatten()
            .and_then(|r| r.get(0))
    }

    /// Waits up to 30 s for `p`'s row to lead, polling every 0.05 s; false
    /// (said, with its log) if it exits or the time passes first.
    fn leads(&mut self, p: &mut Proc) -> bool {
        let pid = p.pid();
        let mut exited = false;
        let c = &mut self.c;
        let led = wait_for(30.0, 0.05, || {
            exited = p.child.try_wait().unwrap().is_some();
            !exited
                && c.query_opt(
                    "SELECT leads FROM orca.schedulers WHERE pid = $1 ORDER BY id DESC LIMIT 1",
                    &[&pid],
                )
                .ok()
                .flatten()
                .is_some_and(|r| r.get::<_, bool>(0))
        });
        if !led {
            let why = if exited {
                "exited before it led"
            } else {
                "did not lead within 30 s"
            };
            progress!("scheduler {pid} {why}; its log:\n{}", p.tail(20));
        }
        led
    }
}

/// Up to 30 s for `p` to exit by itself: its exit code, or None (said,
/// and it is stopped).
fn exits_by_itself(p: &mut Proc) -> Option<i32> {
    match p.wait_exit(30.0) {
        Some(s) => Some(exit_code(s)),
        None => {
            progress!(
                "scheduler {} still running 30s after it should have exited by itself; its log:\n{}",
                p.pid(),
                p.tail(20)
            );
            p.terminate(5.0);
            None
        }
    }
}

fn code(c: Option<i32>) -> String {
    c.map_or_else(|| "none".to_string(), |c| c.to_string())
}

/// Every figure of the section, one entry per repetition.
#[derive(Default)]
struct Figures {
    phase: Vec<f64>,
    gap: Vec<Option<f64>>,
    join_lead: Vec<Option<f64>>,
    a_exit: Vec<String>,
    b_exit: Vec<i32>,
    crash: Vec<Option<f64>>,
    crash_ls: Vec<Option<f64>>,
    c_exit: Vec<i32>,
    hang: Vec<Option<f64>>,
    hang_ls: Vec<Option<f64>>,
    hung_gone: Vec<bool>,
    hung_took: Vec<Option<f64>>,
    hung_exit: Vec<String>,
    d_exit: Vec<i32>,
}

/// Deploy handover, repetition `i` (A's offset `phase`).
fn deploy(b: &Bench, f: &mut Figures, i: u32, phase: f64) {
    let mut r = Rep::new(b, format!("deploy-{i}"));
    let mut a = r.scheduler("a", "10");
    if !r.leads(&mut a) {
        f.gap.push(None);
        f.join_lead.push(None);
        return;
    }
    f.phase.push(phase);
    pause(phase);
    let mut bb = r.scheduler("b", "10");
    if !r.leads(&mut bb) {
        f.gap.push(None);
        f.join_lead.push(None);
        return;
    }
    // Only A drains in this database before B's SIGTERM.
    let gap =
        r.c.query_opt(
            "SELECT extract(epoch FROM s.lead_since - d.at)::float8
             FROM orca.schedulers s, orca.events d
             WHERE s.pid = $1 AND d.kind = 'draining'
             ORDER BY s.id DESC, d.id LIMIT 1",
            &[&bb.pid()],
        )
        .ok()
        .flatten()
        .and_then(|r| r.get(0));
    f.gap.push(gap);
    f.join_lead.push(r.join_to_lead(bb.pid()));
    f.a_exit.push(code(exits_by_itself(&mut a)));
    f.b_exit.push(bb.terminate(30.0));
    progress!("overlap deploy {i}: gap {} s", fmt3(gap));
}

/// Crash (kill -9) of the leader, repetition `i`.
fn crash(b: &Bench, f: &mut Figures, i: u32, phase: f64) {
    let mut r = Rep::new(b, format!("crash-{i}"));
    let mut a = r.scheduler("a", "10");
    if !r.leads(&mut a) {
        f.crash.push(None);
        f.crash_ls.push(None);
        return;
    }
    pause(phase);
    let t0 = Instant::now();
    a.signal(libc::SIGKILL);
    let mut c = r.scheduler("c", "10");
    if !r.leads(&mut c) {
        f.crash.push(None);
        f.crash_ls.push(None);
        return;
    }
    let took = t0.elapsed().as_secs_f64();
    f.crash.push(Some(took));
    f.crash_ls.push(r.join_to_lead(c.pid()));
    if a.wait_exit(5.0).is_none() {
        progress!("scheduler {} still there 5 s after SIGKILL", a.pid());
    }
    f.c_exit.push(c.terminate(30.0));
    progress!("overlap crash {i}: {took:.3} s");
}

/// Hang (SIGSTOP) of the leader, repetition `i`.
fn hang(b: &Bench, f: &mut Figures, i: u32, phase: f64) {
    let mut r = Rep::new(b, format!("hang-{i}"));
    let mut a = r.scheduler("a", "3");
    if !r.leads(&mut a) {
        f.hang.push(None);
        f.hang_ls.push(None);
        return;
    }
    pause(phase);
    let t0 = Instant::now();
    // (A stopped process acts on no signal but SIGKILL: if this goes
    // wrong, dropping `a` SIGKILLs it.)
    a.signal(libc::SIGSTOP);
    let mut d = r.scheduler("d", "3");
    if !r.leads(&mut d) {
        f.hang.push(None);
        f.hang_ls.push(None);
        return;
    }
    let took = t0.elapsed().as_secs_f64();
    f.hang.push(Some(took));
    f.hang_ls.push(r.join_to_lead(d.pid()));
    let t0 = Instant::now();
    a.signal(libc::SIGCONT);
    let exit = exits_by_itself(&mut a);
    f.hung_gone.push(exit.is_some());
    f.hung_took.push(exit.map(|_| t0.elapsed().as_secs_f64()));
    f.hung_exit.push(code(exit));
    f.d_exit.push(d.terminate(30.0));
    progress!("overlap hang {i}: {took:.3} s");
}

fn fmt3(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}"))
}

/// The three kinds of repetition, then the figures.
pub fn run(b: &mut Bench) {
    let reps = b.knobs.overlap_reps;
    progress!("scheduler overlap: {reps} repetitions each of deploy handover, crash, hang");
    let phase = |i: u32| (f64::from(i) - 0.5) / f64::from(reps);
    let t0 = Instant::now();
    let mut f = Figures::default();
    for i in 1..=reps {
        deploy(b, &mut f, i, phase(i));
    }
    for i in 1..=reps {
        crash(b, &mut f, i, phase(i));
    }
    for i in 1..=reps {
        hang(b, &mut f, i, phase(i));
    }
    let took = since(t0);

    heading("scheduler overlap (ORCA_OVERLAP=on)");
    fig("repetitions", reps);
    fig("tick s", "1 (the default)");
    fig("stale limit s", "10 (the default); 3 for the hang");
    repeated(
        "deploy handover gap s (A's draining to B's lead taken)",
        "goal <= 0.1 s (issue 14; polling the lock gave up to a tick, 1 s)",
        &f.gap,
    );
    repeated(
        "deploy: B joined to B leading s (lead_since - joined_at)",
        "",
        &f.join_lead,
    );
    let phases: Vec<String> = f.phase.iter().map(|p| format!("{p:.2}")).collect();
    fig(
        "deploy: B started s after A was seen leading, each",
        phases.join(" "),
    );
    fig(
        "deploy: old leader A exited by itself, exit codes",
        words(&f.a_exit),
    );
    fig(
        "deploy: new leader B exit codes on SIGTERM",
        words(&f.b_exit),
    );
    repeated(
        "crash (kill -9) to restarted C leading s",
        "goal <= 2 s",
        &f.crash,
    );
    repeated("crash: C's lead_since - joined_at s", "", &f.crash_ls);
    fig("crash: C exit codes on SIGTERM", words(&f.c_exit));
    repeated(
        "hang (SIGSTOP) to new D leading s, stale limit 3 s",
        "goal <= 5 s",
        &f.hang,
    );
    repeated("hang: D's lead_since - joined_at s", "", &f.hang_ls);
    let gone = f.hung_gone.iter().filter(|g| **g).count();
    if !f.hung_gone.is_empty() && gone == reps as usize {
        fig("hung leader exited after SIGCONT", "yes");
    } else {
        fig(
            "hung leader exited after SIGCONT",
            format!("no ({gone} of {} exited within 30 s)", f.hung_gone.len()),
        );
    }
    repeated("hang: SIGCONT to hung leader's exit s", "", &f.hung_took);
    fig("hang: hung leader exit codes", words(&f.hung_exit));
    fig("hang: D exit codes on SIGTERM", words(&f.d_exit));
    fig("section wall time s", took);
}
