//! A real distributed engine on placement `ec2` (`examples/dask`): Dask's
//! scheduler on the head, a Dask worker on each worker instance (the local
//! provider's process groups), the driver's computation spread over every
//! worker; the next run gets the same instances, warm. Dask comes from PyPI
//! into a virtualenv under the target directory, kept for the next time.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::harness::*;

/// The example's pinned requirements: the virtualenv is made again when
/// they change.
const REQUIREMENTS: &str = include_str!("../../examples/dask/requirements.txt");

/// A file of the example.
fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/dask")
        .join(name)
}

/// The last lines of a command's output, for a message.
fn last_lines(out: &Output) -> String {
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let lines: Vec<&str> = all.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// A virtualenv with the example's requirements from PyPI: under the
/// target directory, made once per set of requirements (a marker file holds
/// the requirements it was made with) and reused after that.
pub(crate) fn dask_venv() -> PathBuf {
    // The binary is <target>/<profile>/orca.
    let target = Path::new(bin())
        .parent()
        .and_then(Path::parent)
        .expect("the target directory");
    let venv = target.join("engine-venv");
    let marker = venv.join("orca-requirements.txt");
    // One maker at a time (another test binary of this target may be here).
    let lock = std::fs::File::create(target.join("engine-venv.lock")).unwrap();
    lock.lock().unwrap();
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == REQUIREMENTS) {
        return venv;
    }
    let _ = std::fs::remove_dir_all(&venv);
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap_or_else(|e| {
            panic!("can't run python3 ({e}): install python3 and python3-venv (Debian: apt-get install python3 python3-venv)")
        });
    assert!(
        made.status.success(),
        "`python3 -m venv` failed: install the python3-venv package (Debian: apt-get install python3-venv)\n{}",
        last_lines(&made)
    );
    let installed = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--retries",
            "2",
            "--timeout",
            "30",
            "-r",
        ])
        .arg(example("requirements.txt"))
        .output()
        .unwrap();
    assert!(
        installed.status.success(),
        "can't install Dask from PyPI into {} (does this machine reach https://pypi.org?)\n{}",
        venv.display(),
        last_lines(&installed)
    );
    let mut m = std::fs::File::create(&marker).unwrap();
    m.write_all(REQUIREMENTS.as_bytes()).unwrap();
    venv
}

/// The example's `orca.toml` as it is, but for the scheduler's `port` and
/// the driver's `deadline` (s), and the driver's absolute path.
fn example_on(port: u16, deadline: u32) -> String {
    let file = std::fs::read_to_string(example("orca.toml")).unwrap();
    let ours = file
        .replace(
            "env = { DASK_SCHEDULER_PORT = \"8786\" }",
            &format!(
                "env = {{ DASK_SCHEDULER_PORT = \"{port}\", DASK_DEADLINE = \"{deadline}\" }}"
            ),
        )
        .replace(
            "python3 examples/dask/driver.py",
            &format!("python3 {}", example("driver.py").display()),
        );
    assert!(
        ours.contains(&port.to_string()) && !ours.contains(" examples/dask/driver.py"),
        "the example changed: {ours}"
    );
    ours
}

/// A head whose scheduler port is still held when it starts (with the
/// local provider every instance is on one host: the last run's head may
/// not have let its scheduler's port go yet, as the README's two runs back
/// to back met) serves its run once the port is free, instead of failing
/// it when the driver's deadline passes.
#[test]
fn a_head_whose_port_is_still_held_serves_its_run_once_it_is_free() {
    let venv = dask_venv();
    let db = TestDb::new();
    let dir = TempDir::new();
    let port = free_port();
    let held = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    db.register(&dir, &example_on(port, 90));
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut s = db.scheduler(&dir, &[("PATH", path.as_str())]);
    held.set_nonblocking(true).unwrap();
    let run = db.queue("dask");
    // The run's driver (or a worker) reaching the held port: the head's
    // scheduler, started before them, found it held. Then the holder goes,
    // as the last run's scheduler would.
    s.wait_for("the run reaches the held port", 120.0, || {
        held.accept().is_ok()
    });
    drop(held);
    let output = succeeds(&db, &s, run, 240.0);
    assert!(output.contains("2 dask workers joined"), "{output}");
    s.stop();
}

/// Waits for run `run` to end (the scheduler's log in the message if it
/// doesn't) and asserts it succeeded; its output.
fn succeeds(db: &TestDb, s: &Proc, run: i64, secs: f64) -> String {
    s.wait_for(&format!("run {run} ends"), secs, || {
        !matches!(db.state(run).as_str(), "queued" | "running")
    });
    let output = text(&db.output(run));
    assert_eq!(db.state(run), "succeeded", "run {run}'s output:\n{output}");
    output
}

/// Run `run`'s instances in `role`, in the order they were given to it.
fn instances(db: &TestDb, run: i64, role: &str) -> Vec<String> {
    db.client()
        .query(
            "SELECT instance FROM orca.instances WHERE run = $1 AND role = $2 ORDER BY id",
            &[&run, &role],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The driver's output shows the head's address, both workers' addresses,
/// and that each worker (by instance name) computed its share.
fn every_worker_took_part(output: &str, workers: &[String]) {
    assert!(
        output.contains("head 127.0.0.1, 2 worker instance(s): 127.0.0.1,127.0.0.1"),
        "{output}"
    );
    assert!(output.contains("2 dask workers joined"), "{output}");
    for w in workers {
        assert!(
            output.contains(&format!("worker {w} ran 4 task(s)")),
            "{w}: {output}"
        );
    }
    assert!(
        output.contains("every worker took part: 2 of 2"),
        "{output}"
    );
}

#[test]
fn a_dask_cluster_on_ec2_placement_reaches_every_worker_and_is_reused_warm() {
    let venv = dask_venv();
    let db = TestDb::new();
    let dir = TempDir::new();
    // The example as it is, but for a free port (several tests, and other
    // people's, share this host), a longer deadline for a loaded machine,
    // and the driver's absolute path.
    let ours = example_on(free_port(), 240);
    db.register(&dir, &ours);
    // Dask on the PATH the instances, their services and the driver inherit.
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut s = db.scheduler(
        &dir,
        &[("PATH", path.as_str()), ("ORCA_EC2_POOL_SECONDS", "300")],
    );

    let first = db.queue("dask");
    let output = succeeds(&db, &s, first, 360.0);
    let head = instances(&db, first, "head");
    let workers = instances(&db, first, "worker");
    assert_eq!(
        (head.len(), workers.len()),
        (1, 2),
        "a head and two workers"
    );
    assert!(
        output.contains(&format!("driver on instance {}", head[0])),
        "{output}"
    );
    every_worker_took_part(&output, &workers);

    // The three stay warm; the next run gets them, in the same roles'
    // places or not, and makes none.
    s.wait_for("the first run's instances are idle", 120.0, || {
        db.one::<i64>(
            "SELECT count(*) FROM orca.instances WHERE state = 'idle' AND ended_at IS NULL",
        ) == 3
    });
    let next = db.queue("dask");
    let output = succeeds(&db, &s, next, 360.0);
    let mut before = [head.clone(), workers.clone()].concat();
    let next_workers = instances(&db, next, "worker");
    let mut after = [instances(&db, next, "head"), next_workers.clone()].concat();
    before.sort();
    after.sort();
    assert_eq!(after, before, "the same three instances, warm");
    assert_eq!(
        db.one::<i64>("SELECT count(DISTINCT instance) FROM orca.instances"),
        3,
        "no new instance was made"
    );
    every_worker_took_part(&output, &next_workers);
    s.stop();
}
