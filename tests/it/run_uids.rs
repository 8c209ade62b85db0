//! Runs can't reach each other (issue 28, section 4): with `ORCA_RUN_UIDS`
//! each command runs as a uid of its own, taken from the range for its
//! attempt alone, so one run can neither read another's environment (a
//! pipeline's `env` secrets) nor signal it (`kill -9 -1`), nor read what it
//! leaves in `/tmp`; a process it left (`setsid`) is gone with it, and its
//! uid is taken again later. Locally and on a pool machine's worker (the
//! local provider: another supervisor on the same host, the same range).
//! Root only, as CI runs: switching uids needs it.

use crate::harness::*;
use crate::pools::{pool_scheduler, with_pool};

fn am_root() -> bool {
    // SAFETY: geteuid(2) can't fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the test can't run here (switching uids needs root), said on
/// stderr: the test then returns.
fn not_root() -> bool {
    if am_root() {
        return false;
    }
    eprintln!("skipped: ORCA_RUN_UIDS needs the tests to run as root");
    true
}

/// The scheduler with its runs as uids of `range` (`FIRST-LAST`).
fn uids_scheduler(db: &TestDb, dir: &TempDir, range: &str) -> Proc {
    db.scheduler(dir, &[("ORCA_RUN_UIDS", range)])
}

/// The live processes (not zombies) whose real, effective, saved or file
/// uid is `uid`, as `/proc` shows them.
fn processes_of(uid: u32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let uids = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .unwrap_or("");
        let zombie = status
            .lines()
            .any(|l| l.starts_with("State:") && (l.contains('Z') || l.contains('X')));
        if !zombie && uids.split_whitespace().any(|u| u == uid.to_string()) {
            out.push(pid);
        }
    }
    out
}

/// Whether no keeper holds `uid`'s lock (tried and let go at once).
fn lock_free(uid: u32) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(format!("/var/tmp/orca-runs/{uid}.lock")) else {
        return true;
    };
    // SAFETY: flock(2) on a descriptor we own; closing it lets go.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// The words after `key` on the line of `output` that starts with it.
fn said<'a>(output: &'a str, key: &str) -> Vec<&'a str> {
    output
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no line `{key}` in:\n{output}"))
        .split_whitespace()
        .collect()
}

/// The uid a run's output says it ran as (its `id ` line).
fn uid_of(output: &str) -> u32 {
    said(output, "id ")[0].parse().unwrap()
}

/// Two runs at once, the holder on `holder_at` with an `env` secret, the
/// prober on `prober_at`, both as uids of `range` (`FIRST-LAST`): the
/// prober can't read the holder's environment nor its file in `/tmp`, and
/// its `kill -9 -1` leaves the holder running (it then succeeds); each has
/// a uid, a gid and a private HOME/TMPDIR of its own, umask 077; once the
/// holder ended, nothing of its uid is left, its directory and its `/tmp`
/// file included.
fn runs_cant_reach_each_other(holder_at: &str, prober_at: &str, range: (u32, u32)) {
    let (first, last) = range;
    let dir = TempDir::new();
    // A name of this test's own for the files in /tmp.
    let tag = dir.0.file_name().unwrap().to_string_lossy().into_owned();
    let holder = dir.write(
        "holder.sh",
        &format!(
            r#"echo "id $(id -u) $(id -g) $(id -G) umask $(umask) home $HOME tmp $TMPDIR"
echo "homedir $(stat -c '%a %u' "$HOME")"
echo "user $USER $LOGNAME"
echo holder-private > /tmp/{tag}-holder
echo ready
while [ ! -e /tmp/{tag}-done ]; do sleep 0.1; done
echo holder-survived
"#
        ),
    );
    let prober = dir.write(
        "prober.sh",
        &format!(
            r#"echo "id $(id -u)"
if grep -qs holder-secret-value /proc/[0-9]*/environ; then echo environ-read; else echo environ-closed; fi
if cat /tmp/{tag}-holder 2>/dev/null; then echo tmp-read; else echo tmp-closed; fi
me=$(id -u)
# Only as a uid of the test's range: kill -9 -1 as root (main, where the
# setting is unknown) would end every process of the host.
if [ "$me" -ge {first} ] && [ "$me" -le {last} ]; then kill -9 -1; echo killed-all-of-mine
else echo "uid $me is no run's own: not killing"; exit 1; fi
"#
        ),
    );
    let placed = |at: &str| {
        if at == "local" {
            String::new()
        } else {
            format!("placement = \"{at}\"\n")
        }
    };
    // Each script is its run's process (no shell above it): `kill -9 -1`
    // spares only its caller.
    let (db, _) = setup(&with_pool(
        "p",
        &format!(
            "[pipelines.holder]\ncommand = [\"sh\", \"{holder}\"]\nenv = {{ SECRET = \"holder-secret-value\" }}\n{}\n\
             [pipelines.prober]\ncommand = [\"sh\", \"{prober}\"]\n{}",
            placed(holder_at),
            placed(prober_at),
        ),
    ));
    let done = format!("/tmp/{tag}-done");
    let held = format!("/tmp/{tag}-holder");
    let _cleanup = RemoveOnDrop(vec![done.clone(), held.clone()]);
    let range_var = format!("{first}-{last}");
    let mut s = pool_scheduler(&db, &dir, &[("ORCA_RUN_UIDS", &range_var)]);
    let a = db.queue("holder");
    s.wait_for("the holder is ready", 90.0, || {
        text(&db.output(a)).contains("ready")
    });
    let b = db.queue("prober");
    s.wait_for("the prober ends", 90.0, || {
        !["queued", "running"].contains(&db.state(b).as_str())
    });
    let probed = text(&db.output(b));
    assert_eq!(db.state(b), "succeeded", "{probed}");
    assert!(probed.contains("environ-closed"), "{probed}");
    assert!(probed.contains("tmp-closed"), "{probed}");
    assert!(probed.contains("killed-all-of-mine"), "{probed}");
    assert!(!probed.contains("holder-private"), "{probed}");
    // The holder outlived the prober's kill -9 -1.
    assert_eq!(db.state(a), "running", "{}", text(&db.output(a)));
    std::fs::write(&done, "").unwrap();
    s.wait_for("the holder succeeds", 60.0, || db.state(a) == "succeeded");
    let out = text(&db.output(a));
    assert!(out.contains("holder-survived"), "{out}");
    let id = said(&out, "id ");
    let uid = uid_of(&out);
    assert!((first..=last).contains(&uid), "{out}");
    assert_ne!(uid, uid_of(&probed), "two runs at once, one uid");
    // Its own gid, no other group, umask 077, HOME = TMPDIR its own 0700.
    assert_eq!(id[1], uid.to_string(), "{out}");
    assert_eq!(id[2], uid.to_string(), "{out}");
    assert_eq!(id[3..5], ["umask", "0077"], "{out}");
    assert_eq!(id[6], id[8], "HOME and TMPDIR: {out}");
    assert_eq!(
        said(&out, "homedir "),
        ["700", uid.to_string().as_str()],
        "{out}"
    );
    let name = format!("orca-run-{uid}");
    assert_eq!(said(&out, "user "), [name.as_str(), name.as_str()], "{out}");
    // Nothing of its uid is left: no process (by its end), and soon no
    // directory and no /tmp file (its cleaner's work).
    assert_eq!(processes_of(uid), Vec::<i32>::new(), "left of uid {uid}");
    wait_until("the holder's home and /tmp file are removed", 10.0, || {
        !std::path::Path::new(id[6]).exists() && !std::path::Path::new(&held).exists()
    });
    s.stop();
}

/// Removes files and directories (the test's own in `/tmp`) when dropped.
struct RemoveOnDrop(Vec<String>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f).or_else(|_| std::fs::remove_dir_all(f));
        }
    }
}

#[test]
fn two_local_runs_can_t_read_signal_or_share_tmp() {
    if not_root() {
        return;
    }
    runs_cant_reach_each_other("local", "local", (62000, 62009));
}

#[test]
fn a_local_run_and_a_pool_machine_s_run_can_t_reach_each_other() {
    if not_root() {
        return;
    }
    // The scheduler and the machine's worker: two supervisors on one host
    // taking uids from one range.
    runs_cant_reach_each_other("local", "worker:p", (62010, 62019));
}

#[test]
fn a_run_s_setsid_escapee_ends_with_it_and_its_uid_is_taken_again() {
    if not_root() {
        return;
    }
    let dir = TempDir::new();
    let tag = dir.0.file_name().unwrap().to_string_lossy().into_owned();
    let left = format!("/tmp/{tag}-left");
    let _cleanup = RemoveOnDrop(vec![left.clone()]);
    // It also leaves directories it made unreadable, in its home and /tmp.
    let script = dir.write(
        "escape.sh",
        &format!(
            r#"echo "id $(id -u) $HOME"
setsid sh -c 'echo escapee $$; exec sleep 1000' </dev/null &
mkdir -p "$HOME/deep/er" {left}/in && touch "$HOME/deep/er/f" {left}/in/f
chmod 000 "$HOME/deep" {left} && echo left-made
sleep 0.5; echo done
"#
        ),
    );
    let (db, _) = setup(&format!(
        "[pipelines.escape]\ncommand = [\"sh\", \"{script}\"]\n"
    ));
    let mut s = uids_scheduler(&db, &dir, "62020-62029");
    let first = db.queue("escape");
    s.wait_for("the first run succeeds", 60.0, || {
        db.state(first) == "succeeded"
    });
    let out = text(&db.output(first));
    let uid = uid_of(&out);
    assert!((62020..=62029).contains(&uid), "{out}");
    let escapee: i32 = said(&out, "escapee ")[0].parse().unwrap();
    assert!(!alive(escapee), "the setsid sleeper outlived its run");
    assert_eq!(processes_of(uid), Vec::<i32>::new(), "left of uid {uid}");
    // Its lock is let go once its cleaner is done: what it left is gone.
    wait_until(&format!("uid {uid}'s lock is let go"), 10.0, || {
        lock_free(uid)
    });
    assert!(out.contains("left-made"), "{out}");
    let home = said(&out, "id ")[1];
    for gone in [home, left.as_str()] {
        assert!(!std::path::Path::new(gone).exists(), "{gone} is left");
    }
    let second = db.queue("escape");
    s.wait_for("the second run succeeds", 60.0, || {
        db.state(second) == "succeeded"
    });
    let again = text(&db.output(second));
    assert_eq!(uid_of(&again), uid, "the freed uid is taken again");
    s.stop();
}

#[test]
fn a_bad_run_uids_range_is_refused_in_one_line() {
    let db = TestDb::new();
    let dir = TempDir::new();
    for bad in [
        "abc",
        "5",
        "0-10",
        "10-5",
        "1-4294967295",
        "100000-200000",
        "-5-10",
    ] {
        for args in [&["scheduler"][..], &["worker", "--pool", "p"]] {
            let mut c = db.orca(args);
            c.env("ORCA_RUN_UIDS", bad);
            let mut p = Proc::spawn(c, &dir.path("refused.log"));
            // Refused at start, before it connects; one that took the value
            // runs on (and is killed when dropped).
            let status = p.wait_exit(15.0);
            let err = p.output();
            assert_eq!(
                status.and_then(|s| s.code()),
                Some(2),
                "{bad} {args:?}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{bad}: {err}");
            assert!(err.contains("ORCA_RUN_UIDS"), "{bad}: {err}");
        }
    }
    // A good range while orca isn't root: it could switch to none of it.
    if am_root() {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin()])
            .args(["scheduler"])
            .env("ORCA_DATABASE_URL", &db.url)
            .env("ORCA_RUN_UIDS", "62040-62049");
        let mut p = Proc::spawn(c, &dir.path("not-root.log"));
        let status = p.wait_exit(15.0);
        let err = p.output();
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("must run as root"), "{err}");
    }
}

/// On EC2 a machine's and an instance's runs as uids of their own can't
/// reach the metadata service either: the scripts reject the range's
/// packets to it, beside `ORCA_RUN_AS`'s.
#[test]
fn ec2_machines_keep_runs_of_their_own_uids_from_the_metadata_service() {
    use crate::secrets::machine_script_with_fake_iptables;
    let rule = |owner: &str| {
        format!("-A OUTPUT -m owner --uid-owner {owner} -d 169.254.169.254 -j REJECT")
    };
    for script in ["boot.sh", "instance.sh"] {
        let (asked, said) = machine_script_with_fake_iptables(
            script,
            &[
                ("ORCA_BLOCK_METADATA", "1"),
                ("ORCA_RUN_AS", ""),
                ("ORCA_RUN_UIDS", "62030-62039"),
            ],
        );
        assert!(
            asked.lines().any(|l| l == rule("62030-62039")),
            "{script}: {asked}"
        );
        assert!(!said.contains("can reach the metadata service"), "{said}");
        let (asked, _) = machine_script_with_fake_iptables(
            script,
            &[
                ("ORCA_BLOCK_METADATA", "1"),
                ("ORCA_RUN_AS", "nobody"),
                ("ORCA_RUN_UIDS", "62030-62039"),
            ],
        );
        for owner in ["nobody", "62030-62039"] {
            assert!(asked.lines().any(|l| l == rule(owner)), "{script}: {asked}");
        }
    }
}

/// A process of a run's uid outside its tree (started here as that uid,
/// as a daemon that runs jobs for their caller would) is killed with the
/// run, before its end is recorded; and while the range's one uid is held,
/// another run can't start: it fails, its output saying why.
#[test]
fn every_process_of_a_run_s_uid_ends_with_it_and_a_full_range_starts_nothing() {
    if not_root() {
        return;
    }
    let dir = TempDir::new();
    let tag = dir.0.file_name().unwrap().to_string_lossy().into_owned();
    let done = format!("/tmp/{tag}-done");
    let _cleanup = RemoveOnDrop(vec![done.clone()]);
    let hold = dir.write(
        "hold.sh",
        &format!("echo \"id $(id -u)\"\nwhile [ ! -e {done} ]; do sleep 0.1; done\necho held\n"),
    );
    let (db, _) = setup(&format!(
        "[pipelines.hold]\ncommand = [\"sh\", \"{hold}\"]\n\n\
         [pipelines.other]\ncommand = \"echo started\"\n"
    ));
    let mut s = uids_scheduler(&db, &dir, "62060-62060");
    let a = db.queue("hold");
    s.wait_for("the holder runs", 60.0, || {
        text(&db.output(a)).contains("id 62060")
    });
    let mut c = std::process::Command::new("setpriv");
    c.args([
        "--reuid=62060",
        "--regid=62060",
        "--clear-groups",
        "sleep",
        "1000",
    ]);
    let mut outsider = Proc::spawn(c, &dir.path("outsider.log"));
    let b = db.queue("other");
    s.wait_for("the other run ends", 60.0, || {
        !["queued", "running"].contains(&db.state(b).as_str())
    });
    let out = text(&db.output(b));
    assert_eq!(db.state(b), "failed", "{out}");
    assert!(out.contains("no free uid"), "{out}");
    assert!(!out.contains("started"), "{out}");
    std::fs::write(&done, "").unwrap();
    s.wait_for("the holder succeeds", 60.0, || db.state(a) == "succeeded");
    assert!(
        outsider.wait_exit(0.0).is_some() || !alive(outsider.pid()),
        "a process of the run's uid outlived its recorded end"
    );
    s.stop();
}

/// A run can't plant a set-user-ID (or set-group-ID) program of its uid
/// where its cleaner doesn't look (a directory anyone may write in, such as
/// `/tmp/.X11-unix`, made here as root's, mode 1777) and, run by a later
/// run of another uid, become the uid again once it is another run's: the
/// kernel gives no run's command new privileges (`PR_SET_NO_NEW_PRIVS`).
#[test]
fn a_set_uid_program_a_run_leaves_gives_no_later_run_its_uid() {
    if not_root() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new();
    let tag = dir.0.file_name().unwrap().to_string_lossy().into_owned();
    let shared = format!("/tmp/{tag}-unix");
    let done = format!("/tmp/{tag}-done");
    let _cleanup = RemoveOnDrop(vec![shared.clone(), done.clone()]);
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = format!("{shared}/cat");
    let plant = dir.write(
        "plant.sh",
        &format!(
            "echo \"id $(id -u)\"\ncp /bin/cat {planted} && chmod 6755 {planted} && echo planted\n"
        ),
    );
    let holder = dir.write(
        "holder.sh",
        &format!("echo \"id $(id -u)\"\necho ready\nwhile [ ! -e {done} ]; do sleep 0.1; done\n"),
    );
    let prober = dir.write(
        "prober.sh",
        &format!(
            r#"echo "id $(id -u)"
for f in /proc/[0-9]*/environ; do {planted} "$f" 2>/dev/null; done | tr '\0' '\n' | grep -c holder-secret-value | sed 's/^/found /'
"#
        ),
    );
    let (db, _) = setup(&format!(
        "[pipelines.plant]\ncommand = [\"sh\", \"{plant}\"]\n\n\
         [pipelines.holder]\ncommand = [\"sh\", \"{holder}\"]\nenv = {{ SECRET = \"holder-secret-value\" }}\n\n\
         [pipelines.prober]\ncommand = [\"sh\", \"{prober}\"]\n"
    ));
    let mut s = uids_scheduler(&db, &dir, "62070-62071");
    let p = db.queue("plant");
    s.wait_for("the planter succeeds", 60.0, || db.state(p) == "succeeded");
    let out = text(&db.output(p));
    assert!(out.contains("planted"), "{out}");
    let uid = uid_of(&out);
    wait_until(&format!("uid {uid}'s lock is let go"), 10.0, || {
        lock_free(uid)
    });
    let h = db.queue("holder");
    s.wait_for("the holder is ready", 60.0, || {
        text(&db.output(h)).contains("ready")
    });
    assert_eq!(uid_of(&text(&db.output(h))), uid, "the planter's uid again");
    let b = db.queue("prober");
    s.wait_for("the prober ends", 60.0, || {
        !["queued", "running"].contains(&db.state(b).as_str())
    });
    let probed = text(&db.output(b));
    assert_ne!(uid_of(&probed), uid, "{probed}");
    assert_eq!(said(&probed, "found "), ["0"], "{probed}");
    std::fs::write(&done, "").unwrap();
    s.wait_for("the holder succeeds", 60.0, || db.state(h) == "succeeded");
    s.stop();
}

/// A process whose first thread has ended while another runs on shows as
/// a zombie in `/proc/PID/status` (`State: Z`, `Threads: 2`), yet it runs:
/// its uid is still in use, and no run is given it (here the range's one
/// uid: the run fails, saying no uid is free).
#[test]
fn a_process_whose_main_thread_ended_keeps_its_uid_from_runs() {
    if not_root() {
        return;
    }
    let dir = TempDir::new();
    let (db, _) = setup("[pipelines.other]\ncommand = \"echo started\"\n");
    // As root, a thread started, then every thread the uid, then the first
    // thread ended (pthread_exit): the other sleeps on.
    let mut c = std::process::Command::new("python3");
    c.args([
        "-c",
        "import os, threading, ctypes, time\n\
         threading.Thread(target=lambda: time.sleep(1000)).start()\n\
         os.setgroups([]); os.setresgid(62090, 62090, 62090); os.setresuid(62090, 62090, 62090)\n\
         print('ready', flush=True)\n\
         ctypes.CDLL(None).pthread_exit(None)\n",
    ]);
    let outsider = Proc::spawn(c, &dir.path("outsider.log"));
    let status = format!("/proc/{}/status", outsider.pid());
    wait_until("the outsider's first thread has ended", 15.0, || {
        std::fs::read_to_string(&status)
            .is_ok_and(|s| s.contains("State:\tZ") && s.contains("Threads:\t2"))
    });
    let mut s = uids_scheduler(&db, &dir, "62090-62090");
    let b = db.queue("other");
    s.wait_for("the run ends", 60.0, || {
        !["queued", "running"].contains(&db.state(b).as_str())
    });
    let out = text(&db.output(b));
    assert_eq!(db.state(b), "failed", "{out}");
    assert!(out.contains("no free uid"), "{out}");
    let left = std::fs::read_to_string(&status).unwrap_or_default();
    assert!(left.contains("Threads:\t2"), "the outsider runs on: {left}");
    s.stop();
}

/// A range that overlaps a user's subordinate uids (`/etc/subuid`, which
/// `useradd` fills on Ubuntu and Fedora: rootless containers' processes and
/// files have them) is refused at start in one line: a run would share its
/// uid with that user's containers, and the per-uid kill would end them.
/// (The test adds an entry to the host's file, and puts it back as it was.)
#[test]
fn a_range_overlapping_a_user_s_subordinate_uids_is_refused() {
    if not_root() {
        return;
    }
    let db = TestDb::new();
    let dir = TempDir::new();
    let _restore = Restore::add("/etc/subuid", "orca-test-containers:62100:10\n");
    let mut c = db.orca(&["scheduler"]);
    c.env("ORCA_RUN_UIDS", "62105-62120");
    let mut p = Proc::spawn(c, &dir.path("refused.log"));
    let status = p.wait_exit(15.0);
    let err = p.output();
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("orca-test-containers") && err.contains("/etc/subuid (62100-62109)"),
        "{err}"
    );
}

/// A file of the host with a line added, put back as it was when dropped
/// (removed, if there was none).
struct Restore(&'static str, Option<Vec<u8>>);

impl Restore {
    fn add(path: &'static str, line: &str) -> Restore {
        let before = std::fs::read(path).ok();
        let mut now = before.clone().unwrap_or_default();
        if !now.is_empty() && !now.ends_with(b"\n") {
            now.push(b'\n');
        }
        now.extend_from_slice(line.as_bytes());
        std::fs::write(path, now).unwrap();
        Restore(path, before)
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = match &self.1 {
            Some(before) => std::fs::write(self.0, before),
            None => std::fs::remove_file(self.0),
        };
    }
}

/// The processes whose parent is `parent`.
fn children_of(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().nth(1))
            .and_then(|s| s.parse::<i32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// A uid whose cleaner is still at work when its keeper is gone (its
/// scheduler stopped: the cleaner goes on alone) is given to no run until
/// the cleaner is done: else the cleaner, root, would remove the new run's
/// home and its files in `/tmp`. Its lock stays held by the cleaner.
#[test]
fn a_uid_whose_cleaner_outlives_its_keeper_stays_held_until_it_is_done() {
    if not_root() {
        return;
    }
    let dir = TempDir::new();
    let tag = dir.0.file_name().unwrap().to_string_lossy().into_owned();
    let done = format!("/tmp/{tag}-done");
    let _cleanup = RemoveOnDrop(vec![done.clone()]);
    // Many files in its home: its cleaner takes a while.
    let script = dir.write(
        "many.sh",
        &format!(
            "echo \"id $(id -u)\"\nmkdir \"$HOME/d\" && cd \"$HOME/d\" && seq 100000 | xargs touch && echo made\n\
             while [ ! -e {done} ]; do sleep 0.1; done\n"
        ),
    );
    let (db, _) = setup(&format!(
        "[pipelines.many]\ncommand = [\"sh\", \"{script}\"]\n"
    ));
    let mut s = uids_scheduler(&db, &dir, "62110-62111");
    let run = db.queue("many");
    s.wait_for("its files are made", 90.0, || {
        text(&db.output(run)).contains("made")
    });
    let uid = uid_of(&text(&db.output(run)));
    let keeper = children_of(s.pid())
        .into_iter()
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.windows(8).any(|w| w == b"__keeper"))
        })
        .expect("the scheduler's keeper");
    let before: Vec<i32> = children_of(keeper);
    std::fs::write(&done, "").unwrap();
    // Its cleaner: a new child of the keeper's with the keeper's command
    // line, root's (the per-uid kill's child becomes the uid), held still
    // here (a slow disk). One that ends, held still, was not it.
    let root_child = |p: &i32| {
        !before.contains(p)
            && std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.windows(8).any(|w| w == b"__keeper"))
            && std::fs::read_to_string(format!("/proc/{p}/status"))
                .is_ok_and(|st| st.lines().any(|l| l.starts_with("Uid:\t0\t")))
    };
    let mut cleaner = None;
    wait_until("the cleaner is found and held", 30.0, || {
        let Some(p) = children_of(keeper).into_iter().find(root_child) else {
            return false;
        };
        // SAFETY: kill(2) on the keeper's child found above.
        unsafe { libc::kill(p, libc::SIGSTOP) };
        // Seen stopped (state T), and still the keeper's root child: a
        // stopped process can't change what it is.
        let stopped = || {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| {
                    st.rsplit(')')
                        .next()
                        .map(|r| r.trim_start().starts_with('T'))
                })
                .unwrap_or(false)
        };
        if within(5.0, std::time::Duration::from_millis(20), stopped) && root_child(&p) {
            cleaner = Some(p);
        }
        cleaner.is_some()
    });
    let cleaner = cleaner.unwrap();
    // Let go of it whatever happens.
    struct Continue(i32);
    impl Drop for Continue {
        fn drop(&mut self) {
            // SAFETY: kill(2) on the cleaner held still above.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    let held = Continue(cleaner);
    wait_until("the run's end is recorded", 30.0, || {
        db.state(run) == "succeeded"
    });
    s.stop();
    // The keeper waits a while for its children, the cleaner among them.
    wait_until("the keeper is gone", 60.0, || !alive(keeper));
    assert!(alive(cleaner), "the cleaner went with its keeper");
    assert!(!lock_free(uid), "uid {uid} is free while its cleaner works");
    drop(held);
    wait_until("the cleaner is done and its uid free", 60.0, || {
        !alive(cleaner) && lock_free(uid)
    });
}
