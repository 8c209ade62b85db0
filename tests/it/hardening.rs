//! What a run prints, or a machine or instance login sends and does, can't
//! wedge a run or the scheduler, take orca's locks, or make objects
//! (issue 10, sections C). Every test runs orca as the README's role, not a
//! superuser; machine logins are roles of the `orca_worker` /
//! `orca_instance` groups, made by hand where the test plays the machine.

use crate::harness::*;
use crate::pools::{pool_scheduler, pool_test, with_pool};

mod logins;

/// Pipelines whose output holds a NUL byte, invalid UTF-8, and a flood of
/// random bytes (control characters, NULs), with an alert URL so a final
/// failure's alert body is written too.
fn nasty_output_pipelines(placement: &str) -> String {
    format!(
        r#"
[pipelines.nul]
command = "printf 'a\\000b\\n'"
placement = "{placement}"
alert = "http://127.0.0.1:9/hook"

[pipelines.badutf]
command = "printf 'x\\377\\376\\000y\\n'; exit 3"
placement = "{placement}"
alert = "http://127.0.0.1:9/hook"

[pipelines.flood]
command = "head -c 300000 /dev/urandom; printf '\\000\\001\\002\\033[2J\\r'; exit 1"
placement = "{placement}"
alert = "http://127.0.0.1:9/hook"
"#
    )
}

/// Queues a run of each nasty pipeline and checks that each ends as its
/// command did, with its output kept byte for byte where it fits, and an
/// alert for the failures.
fn nasty_runs_end(db: &TestDb) {
    let nul = db.queue("nul");
    let badutf = db.queue("badutf");
    let flood = db.queue("flood");
    wait_until("every run's end is recorded", 60.0, || {
        db.state(nul) == "succeeded" && db.state(badutf) == "failed" && db.state(flood) == "failed"
    });
    let out = db.output(nul);
    assert_eq!(out, b"a\0b\n", "the output is kept as it was");
    let code: Option<i32> = db
        .client()
        .query_one("SELECT exit_code FROM orca.runs WHERE id = $1", &[&badutf])
        .unwrap()
        .get(0);
    assert_eq!(code, Some(3));
    let alerts: i64 = db.one("SELECT count(*) FROM orca.alerts");
    assert_eq!(alerts, 2, "one alert for each final failure");
    let size: i32 = db
        .client()
        .query_one(
            "SELECT octet_length(output) FROM orca.runs WHERE id = $1",
            &[&flood],
        )
        .unwrap()
        .get(0);
    assert_eq!(size, 64 * 1024, "the flood's last 64 KiB are kept");
    // What orca shows of them is fine too.
    let logs = db.run(&["logs", &nul.to_string()]);
    assert!(logs.status.success(), "{}", text(&logs.stderr));
    assert_eq!(crate::harness::logs_body(&logs.stdout), b"a\0b\n");
    for args in [
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["events", "--json"],
    ] {
        let out = db.run(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn nul_bytes_bad_utf8_and_floods_in_output_never_wedge_a_local_run() {
    let (db, dir) = setup(&nasty_output_pipelines("local"));
    let mut s = db.scheduler(&dir, &[]);
    nasty_runs_end(&db);
    s.stop();
    assert!(
        !s.output().contains("can't record its end"),
        "{}",
        s.output()
    );
}

#[test]
fn nul_bytes_bad_utf8_and_floods_in_output_never_wedge_a_worker_s_run() {
    let (db, dir) = setup(&with_pool(
        "p",
        &format!("slots = 3\n{}", nasty_output_pipelines("worker:p")),
    ));
    let role = hand_machine(&db, "p", "nasty", "s3cret");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 3", &[])
        .unwrap();
    let mut w = hand_worker(&db, &dir, "p", &role, "s3cret");
    nasty_runs_end(&db);
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait(30.0).code(), Some(0), "{}", w.output());
}

/// The scheduler's figures from `ORCA_TICK_STATS` (written at its exit).
pub fn tick_max_ms(path: &std::path::Path) -> f64 {
    let line = std::fs::read_to_string(path).unwrap();
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("max_ms="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no max_ms in {line:?}"))
}

#[test]
fn a_run_has_no_controlling_terminal_even_when_orca_has_one() {
    let (db, dir) = setup(
        "[pipelines.tty]\ncommand = \"if (exec 3</dev/tty) 2>/dev/null; then echo HAS_TTY; else echo NO_TTY; fi\"\n",
    );
    // script(1) runs the scheduler on a terminal of its own, as an
    // operator's shell would; a run that could open it could type into it.
    let mut c = std::process::Command::new("script");
    c.args(["-qfec", &format!("{} scheduler", bin()), "/dev/null"])
        .env("SHELL", "/bin/sh")
        .env("ORCA_DATABASE_URL", &db.url)
        .env("ORCA_TICK_SECONDS", "0.2")
        .env("ORCA_STOP_GRACE_SECONDS", "2")
        .stdin(std::process::Stdio::piped());
    let mut s = Proc::spawn(c, &dir.path("script.log"));
    let run = db.queue("tty");
    wait_until("the run succeeds", 30.0, || db.state(run) == "succeeded");
    let out = db.output(run);
    assert_eq!(text(&out).trim(), "NO_TTY");
    // The scheduler leads a session of its own on script's terminal: it is
    // stopped there, not left to the hang-up script's exit would send (a
    // suite run under nohup ignores SIGHUP, and the scheduler outlived it).
    let pid = s.pid();
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children
        .split_whitespace()
        .filter_map(|c| c.parse::<i32>().ok())
    {
        // SAFETY: kill(2) of the session script started for this test.
        unsafe { libc::kill(-child, libc::SIGTERM) };
    }
    let _ = s.child.wait();
}

#[test]
fn an_attempt_s_last_output_is_recorded_with_its_end() {
    // The end used to be written from what the output thread had read when
    // the process was reaped; the last lines could still be in the pipe
    // (seen once in CI, under load: the reading thread had not had its turn).
    // A stress check: it fails only when that thread is slow.
    let (db, dir) = setup(
        "[pipelines.chatty]\ncommand = \"seq 1 20000; echo LAST $ORCA_RUN_ID; exit 3\"\nmax_runs = 8\n",
    );
    let runs: Vec<i64> = (0..30).map(|_| db.queue("chatty")).collect();
    let mut s = db.scheduler(&dir, &[]);
    wait_until("every run ends", 60.0, || {
        runs.iter().all(|r| db.state(*r) == "failed")
    });
    for r in runs {
        let out = text(&db.output(r));
        assert!(
            out.ends_with(&format!("LAST {r}\n")),
            "run {r}: ...{}",
            &out[out.len().saturating_sub(80)..]
        );
    }
    s.stop();
}

/// A run's command starts with no signal blocked and none of those the
/// shim ignores or the Rust runtime does (SIGHUP, SIGINT, SIGPIPE, SIGTERM)
/// ignored, so a timeout's SIGTERM ends it; a script with no `#!` line
/// runs under /bin/sh, as `execvp(3)` would run it; one that isn't there
/// fails with exit code 127 and says so in its output.
#[test]
fn a_run_starts_with_its_signals_at_their_defaults_and_a_missing_command_fails_127() {
    // A script with no `#!` line runs under /bin/sh, as execvp(3) runs it.
    let script = std::env::temp_dir().join(format!("orca-no-shebang-{}", std::process::id()));
    std::fs::write(&script, "echo \"no shebang: $1\"\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (db, dir) = setup(&format!(
        "[pipelines.sigs]\ncommand = [\"grep\", \"-E\", \"^Sig(Blk|Ign)\", \"/proc/self/status\"]\n\n\
         [pipelines.missing]\ncommand = [\"no-such-command-for-orca\"]\n\n\
         [pipelines.script]\ncommand = [\"{}\", \"its arg\"]\n",
        script.display()
    ));
    let sigs = db.queue("sigs");
    let missing = db.queue("missing");
    let plain = db.queue("script");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the runs end", 30.0, || {
        db.state(sigs) == "succeeded"
            && db.state(missing) == "failed"
            && ["succeeded", "failed"].contains(&db.state(plain).as_str())
    });
    let ran = text(&db.output(plain));
    let _ = std::fs::remove_file(&script);
    assert_eq!(db.state(plain), "succeeded", "{ran}");
    assert!(ran.contains("no shebang: its arg"), "{ran}");
    let out = text(&db.output(sigs));
    let mask = |name: &str| -> u64 {
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {out:?}"));
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "{out}");
    let bit = |sig: i32| 1u64 << (sig - 1);
    for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGPIPE, libc::SIGTERM] {
        assert_eq!(mask("SigIgn:") & bit(sig), 0, "signal {sig} ignored: {out}");
    }
    let code: Option<i32> = db.one(&format!(
        "SELECT exit_code FROM orca.runs WHERE id = {missing}"
    ));
    assert_eq!(code, Some(127));
    let said = text(&db.output(missing));
    assert!(
        said.contains("can't run no-such-command-for-orca"),
        "{said}"
    );
    s.terminate(10.0);
}

/// A run holds no descriptor of orca's (not the keeper's socket, which
/// starts commands as orca's user; not another run's output), and, run as
/// another user, can neither signal its keeper nor read its environment.
#[test]
fn a_run_holds_no_descriptor_of_orca_s_and_can_t_reach_its_keeper() {
    // SAFETY: geteuid(2) can't fail.
    let root = unsafe { libc::geteuid() } == 0;
    let (db, dir) = setup(
        "[pipelines.fds]\ncommand = [\"ls\", \"-l\", \"/proc/self/fd\"]\n\n\
         [pipelines.reach]\ncommand = 'if kill -0 $PPID 2>/dev/null; then echo SIGNALS_KEEPER; fi; \
         if cat /proc/$PPID/environ >/dev/null 2>&1; then echo READS_KEEPER; fi; echo \"checked $PPID\"'\n\n\
         [pipelines.other]\ncommand = \"sleep 30\"\n",
    );
    let other = db.queue("other");
    let run_as: &[(&str, &str)] = if root {
        &[("ORCA_RUN_AS", "nobody")]
    } else {
        &[]
    };
    let mut s = db.scheduler(&dir, run_as);
    wait_until("the other run runs", 30.0, || db.state(other) == "running");
    let (fds, reach) = (db.queue("fds"), db.queue("reach"));
    wait_until("both runs end", 30.0, || {
        db.state(fds) != "queued"
            && db.state(fds) != "running"
            && db.state(reach) != "queued"
            && db.state(reach) != "running"
    });
    let listed = text(&db.output(fds));
    assert_eq!(db.state(fds), "succeeded", "{listed}");
    for line in listed.lines().filter(|l| l.contains(" -> ")) {
        let (head, target) = line.split_once(" -> ").unwrap();
        let fd: i32 = head.split_whitespace().last().unwrap().parse().unwrap();
        // ls's own descriptor of the directory it lists aside.
        assert!(
            fd <= 2 || target.ends_with("/fd"),
            "a run holds descriptor {fd} of orca's: {line}\n{listed}"
        );
    }
    let said = text(&db.output(reach));
    assert!(said.contains("checked "), "{said}");
    if root {
        assert!(!said.contains("SIGNALS_KEEPER"), "{said}");
        assert!(!said.contains("READS_KEEPER"), "{said}");
    }
    // The run's parent is the keeper, a child of the scheduler.
    let parent: i32 = said
        .lines()
        .find_map(|l| l.strip_prefix("checked "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        children(s.pid()).contains(&parent),
        "the run's parent is its keeper, a child of the scheduler"
    );
    s.terminate(10.0);
}

/// A run as another user that SIGSTOPs every process of its user without
/// end: a command being started is its user's before it execs, and must
/// not be the keeper's to wait on then (the keeper, and every run after,
/// would wait with it). Its timeout kills it, and the next run runs.
#[test]
fn a_run_stopping_its_user_s_processes_wedges_no_keeper() {
    // SAFETY: geteuid(2) can't fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: ORCA_RUN_AS needs the tests to run as root");
        return;
    }
    let mark = format!("orca-stopper-{}", std::process::id());
    let (db, dir) = setup(&format!(
        "[pipelines.stopper]\ncommand = [\"perl\", \"-e\", \"$0 = '{mark}'; kill 'STOP', -1 while 1\"]\ntimeout = 3\n\n\
         [pipelines.next]\ncommand = \"echo next\"\ntimeout = 60\nmax_runs = 20\n"
    ));
    let mut s = db.scheduler(
        &dir,
        // `games`, a user no other test runs as: the stopper stops every
        // process of its user on the box, other tests' runs too.
        &[("ORCA_RUN_AS", "games"), ("ORCA_KILL_GRACE_SECONDS", "1")],
    );
    let stopper = db.queue("stopper");
    wait_until("the stopper runs", 30.0, || !named(&mark).is_empty());
    // Commands started while it runs are its prey (they are its user's):
    // started, stopped before or after their exec, killed at their end.
    let prey: Vec<i64> = (0..10).map(|_| db.queue("next")).collect();
    wait_until("the stopper ends at its timeout", 30.0, || {
        db.state(stopper) == "failed"
    });
    wait_until("its process is gone", 10.0, || named(&mark).is_empty());
    // (Some may have run before it stopped them.)
    for p in prey {
        db.run(&["cancel", &p.to_string()]);
    }
    let next = db.queue("next");
    wait_until("the next run succeeds", 30.0, || {
        db.state(next) == "succeeded"
    });
    s.terminate(30.0);
}
