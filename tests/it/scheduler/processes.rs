//! A run's processes and their keeper: a timeout kills the whole group,
//! a process that left its group or escaped its session dies with its
//! attempt, a killed or stopped keeper takes its command with it and is
//! replaced.

use super::*;

#[test]
fn a_timeout_kills_the_whole_process_group() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    // The command ignores SIGTERM (and so does its child): SIGKILL follows.
    db.register(
        &dir,
        &format!(
            "[pipelines.slow]\ncommand = \"trap '' TERM; sleep 300 & echo $! >> {0}; echo $$ >> {0}; wait\"\ntimeout = 1\n",
            pids.display()
        ),
    );
    let id = db.queue("slow");
    let mut s = db.scheduler(&dir, &[("ORCA_KILL_GRACE_SECONDS", "1")]);
    wait_until("the run ends", 30.0, || {
        !["running", "queued"].contains(&db.state(id).as_str())
    });
    assert_eq!(db.state(id), "failed");
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {id}"));
    assert!(why.contains("timed out"), "{why}");
    let sig: Option<i32> = db.one(&format!(
        "SELECT exit_signal FROM orca.runs WHERE id = {id}"
    ));
    assert_eq!(sig, Some(libc::SIGKILL), "SIGTERM was ignored, so SIGKILL");
    assert_eq!(db.events(id, "failed"), 1);
    assert_eq!(db.events(id, "timed out"), 1);
    let pids = pids_in(&pids);
    assert_eq!(pids.len(), 2);
    wait_until("no process of the run is left", 10.0, || {
        pids.iter().all(|p| !alive(*p))
    });
    s.stop();
}

#[test]
fn a_process_that_left_its_group_does_not_outlive_its_run_or_the_scheduler() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let (left, held) = (dir.path("left"), dir.path("held"));
    // `ends` leaves a setsid'd sleep behind and ends; `hangs` waits on one.
    db.register(
        &dir,
        &format!(
            "[pipelines.ends]\ncommand = \"setsid sleep 300 & echo $! >> {}; echo ended\"\n\n\
             [pipelines.hangs]\ncommand = \"setsid sleep 300 & echo $! >> {}; wait\"\n",
            left.display(),
            held.display()
        ),
    );
    let ends = db.queue("ends");
    let mut a = db.scheduler(&dir, &[]);
    wait_until("the run that left a process behind succeeds", 30.0, || {
        db.state(ends) == "succeeded"
    });
    wait_until("what it left behind is killed", 10.0, || {
        !pids_in(&left).is_empty() && pids_in(&left).iter().all(|p| !alive(*p))
    });
    // kill -9 of the scheduler: the escaped process dies too.
    db.queue("hangs");
    wait_until("the escaped sleep runs", 30.0, || {
        !pids_in(&held).is_empty()
    });
    a.signal(libc::SIGKILL);
    a.wait(10.0);
    let escaped = pids_in(&held);
    wait_until("the escaped process is gone", 10.0, || {
        escaped.iter().all(|p| !alive(*p))
    });
}

#[test]
fn a_command_that_escapes_its_session_and_ignores_sigterm_dies_with_its_attempt() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let _leftovers = KillLeftovers(dir.0.clone());
    let command = toml_str(&escapes_and_ignores_term(&format!(
        "{}/$ORCA_RUN_ID.pid",
        dir.0.display()
    )));
    db.register(
        &dir,
        &format!(
            "[pipelines.slow]\ncommand = {command}\ntimeout = 2\n\n\
             [pipelines.held]\ncommand = {command}\nmax_runs = 2\n"
        ),
    );
    let slow = db.queue("slow");
    let cancelled = db.queue("held");
    let stays = db.queue("held");
    let mut s = db.scheduler(&dir, &[]);
    // A timeout: SIGTERM is ignored, so after the grace everything is killed,
    // the escaped sleep included.
    wait_until(
        "the escaped sleep of the run that times out runs",
        30.0,
        || !escaped(&dir, slow).is_empty(),
    );
    wait_until("the run times out", 30.0, || db.state(slow) == "failed");
    let (why, sig): (String, Option<i32>) = {
        let r = db
            .client()
            .query_one(
                "SELECT why, exit_signal FROM orca.runs WHERE id = $1",
                &[&slow],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(why.contains("timed out"), "{why}");
    assert_eq!(sig, Some(libc::SIGKILL), "SIGTERM was ignored, so SIGKILL");
    assert_eq!(db.events(slow, "timed out"), 1);
    wait_until("nothing the timed-out run started is alive", 15.0, || {
        escaped(&dir, slow).iter().all(|p| !alive(*p))
    });
    // A cancel.
    wait_until("the escaped sleeps of the held runs run", 30.0, || {
        !escaped(&dir, cancelled).is_empty() && !escaped(&dir, stays).is_empty()
    });
    db.ok(&["cancel", &cancelled.to_string()]);
    wait_until("the run is cancelled", 30.0, || {
        db.state(cancelled) == "cancelled"
    });
    wait_until("nothing the cancelled run started is alive", 15.0, || {
        escaped(&dir, cancelled).iter().all(|p| !alive(*p))
    });
    // The scheduler stopping.
    assert_eq!(db.state(stays), "running");
    s.stop();
    assert_eq!(db.state(stays), "queued");
    wait_until(
        "nothing the stopped scheduler's run started is alive",
        15.0,
        || escaped(&dir, stays).iter().all(|p| !alive(*p)),
    );
}

/// The keeper SIGKILLed (it can't be told to die otherwise: it ignores
/// SIGTERM): its command dies with it, the attempt ends as killed, and
/// the scheduler's next run starts under a new keeper.
#[test]
fn a_keeper_killed_takes_its_command_with_it_and_the_next_run_gets_a_new_one() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pid = dir.path("pid");
    db.register(
        &dir,
        &format!(
            "[pipelines.long]\ncommand = [\"/bin/sh\", \"-c\", \"echo $$ > {}; exec sleep 300\"]\n\n\
             [pipelines.quick]\ncommand = \"echo quick\"\n",
            pid.display()
        ),
    );
    let long = db.queue("long");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the long run runs", 30.0, || !pids_in(&pid).is_empty());
    let command = pids_in(&pid)[0];
    let keeper = keeper_of(s.pid());
    // SIGTERM is ignored: an operator's stray signal ends nothing.
    // SAFETY: kill(2) of the keeper this test's scheduler started.
    unsafe { libc::kill(keeper, libc::SIGTERM) };
    let quick = db.queue("quick");
    wait_until("the quick run succeeds beside it", 30.0, || {
        db.state(quick) == "succeeded"
    });
    assert!(alive(keeper) && alive(command));
    // SAFETY: as above.
    unsafe { libc::kill(keeper, libc::SIGKILL) };
    wait_until("the long run's command is gone", 10.0, || !alive(command));
    wait_until("the long run ends as killed", 30.0, || {
        db.state(long) == "failed"
    });
    let again = db.queue("quick");
    wait_until("the next run succeeds", 30.0, || {
        db.state(again) == "succeeded"
    });
    assert_ne!(keeper_of(s.pid()), keeper, "a new keeper");
    s.stop();
}

/// The keeper a supervisor started: its child running `orca __keeper`.
fn keeper_of(supervisor: i32) -> i32 {
    let mut found = 0;
    wait_until("the supervisor has a keeper", 10.0, || {
        found = children(supervisor)
            .into_iter()
            .find(|c| {
                std::fs::read(format!("/proc/{c}/cmdline"))
                    .unwrap_or_default()
                    .split(|&b| b == 0)
                    .any(|a| a == b"__keeper")
            })
            .unwrap_or(0);
        found != 0
    });
    found
}

/// A chain still growing as its run ends: each member forks the next (which
/// goes on) and stays, so the chain grows deeper faster than a walk that
/// kills one level at a time (a member is reparented to the keeper only as
/// its parent dies) can follow. In C (built here with `cc`): a level every
/// few hundred microseconds.
#[test]
fn a_chain_growing_deeper_as_its_run_ends_is_killed_whole() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let mark = format!("orca-chain-{}", std::process::id());
    // At most 3,000 deep; each member ends on its own 20 s on (the test's
    // safety net).
    let source = dir.path("chain.c");
    std::fs::write(
        &source,
        "#include <time.h>\n#include <unistd.h>\n\
         int main(void) {\n\
           time_t end = time(0) + 20;\n\
           for (int depth = 0; depth < 3000 && time(0) < end; depth++) {\n\
             setpgid(0, 0);\n\
             pid_t c = fork();\n\
             if (c == 0) continue;\n\
             if (c < 0) { usleep(200); continue; }\n\
             break;\n\
           }\n\
           while (time(0) < end) sleep(1);\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    let chain = dir.path(&mark);
    let built = std::process::Command::new("cc")
        .arg("-O2")
        .arg("-o")
        .arg(&chain)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| {
            panic!("can't run cc ({e}): install gcc (Debian: apt-get install gcc)")
        });
    assert!(built.success(), "cc failed");
    db.register(
        &dir,
        &format!(
            "[pipelines.grows]\ncommand = \"{} & sleep 0.3\"\n",
            chain.display()
        ),
    );
    let run = db.queue("grows");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the run ends", 30.0, || db.state(run) == "succeeded");
    let chain_s = chain.to_str().unwrap().to_string();
    wait_until("no member of the chain is left", 5.0, || {
        named(&chain_s).is_empty()
    });
    s.stop();
}

/// A keeper stopped (by a run of orca's own user, say) starts nothing; the
/// scheduler's tick goes on meanwhile, and a keeper that started no command
/// asked 30 s before is replaced: the attempt it held ends as killed, the
/// next run runs under a new keeper.
#[test]
fn a_stopped_keeper_is_replaced_and_the_next_run_runs() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, "[pipelines.quick]\ncommand = \"echo quick\"\n");
    let first = db.queue("quick");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the first run succeeds", 30.0, || {
        db.state(first) == "succeeded"
    });
    let keeper = keeper_of(s.pid());
    // SAFETY: kill(2) of the keeper this test's scheduler started.
    unsafe { libc::kill(keeper, libc::SIGSTOP) };
    let held = db.queue("quick");
    wait_until("the run asked of the stopped keeper ends", 60.0, || {
        db.state(held) == "failed"
    });
    let next = db.queue("quick");
    wait_until("the next run succeeds", 30.0, || {
        db.state(next) == "succeeded"
    });
    assert_ne!(keeper_of(s.pid()), keeper, "a new keeper");
    wait_until("the stopped keeper is gone", 15.0, || !alive(keeper));
    s.stop();
}
