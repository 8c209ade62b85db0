//! Pool machines made by hand: a login of `orca_worker` and its row in
//! `orca.pool_machines`, for a test that plays the machine itself (a
//! session as its login) or runs its `orca worker` as a real process.

use std::process::Command;

use super::{Proc, TempDir, TestDb, bin};

/// A machine row (2 slots, in pool `pool`) and login role `role` with
/// password `secret`, made by hand, for a worker run by the test.
pub fn hand_made_machine(db: &TestDb, pool: &str, role: &str, secret: &str) {
    db.login_role(role, secret, "orca_worker");
    let mut c = db.client();
    c.execute(
        "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
         VALUES ($1, 'orca-' || $1 || '-hand', 'small', 'here', $2, 2)",
        &[&pool, &role],
    )
    .unwrap();
}

/// A machine login's name for tag `tag`: `orca_m_TAG_PID_N`, new at each
/// call (roles are the cluster's: the pid keeps two runs of the suite
/// apart, the count two tests of one run that chose the same tag).
pub fn machine_role(tag: &str) -> String {
    super::util::unique(&format!("orca_m_{tag}"))
}

/// [`hand_made_machine`] with the login [`machine_role`]`(tag)`; that name.
pub fn hand_machine(db: &TestDb, pool: &str, tag: &str, secret: &str) -> String {
    let role = machine_role(tag);
    hand_made_machine(db, pool, &role, secret);
    role
}

/// `orca worker --pool POOL` with the credentials of a hand-made machine.
pub fn hand_worker(db: &TestDb, dir: &TempDir, pool: &str, role: &str, secret: &str) -> Proc {
    hand_worker_with(db, dir, pool, role, secret, &[])
}

/// [`hand_worker`] with `extra` added to its environment.
pub fn hand_worker_with(
    db: &TestDb,
    dir: &TempDir,
    pool: &str,
    role: &str,
    secret: &str,
    extra: &[(&str, &str)],
) -> Proc {
    let mut c = Command::new(bin());
    c.args(["worker", "--pool", pool])
        .env("ORCA_DATABASE_URL", db.url_without_user())
        .env("ORCA_TOKEN", format!("{role}:{secret}"))
        .env("ORCA_TICK_SECONDS", "0.2")
        .env("ORCA_KILL_GRACE_SECONDS", "1");
    for (k, v) in extra {
        c.env(k, v);
    }
    Proc::spawn(c, &dir.path(&format!("worker-{role}.log")))
}
