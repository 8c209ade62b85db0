//! orca's role as a row of `pg_auth_members` for the login groups, as
//! Postgres 16 and later make it: a `CREATEROLE` role that runs `CREATE
//! ROLE orca_worker` (`orca migrate`) is granted the new role back WITH
//! ADMIN OPTION (an administrator may grant it so on any version). orca's
//! own sessions, an operator's `psql` as `orca`, and what they own, must
//! still never be taken for a login's. On a cluster of the test's own: the
//! grant is the server's, and would change every other test's orca role.

use crate::harness::*;

#[test]
fn orca_s_own_sessions_and_objects_are_no_login_s_when_it_is_a_member_of_the_groups() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let mut admin = postgres::Client::connect(&cluster.url(), postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "GRANT orca_worker, orca_instance TO {OWNER} WITH ADMIN OPTION"
        ))
        .unwrap();
    // A large object of orca's (made by the administrator, as the
    // hardening leaves orca's role no large object function), and an
    // operator's session as orca: an advisory lock of its own, a
    // transaction open past the logins' limit.
    let mut here =
        postgres::Client::connect(&with_db(&cluster.url(), db.name()), postgres::NoTls).unwrap();
    let lo: u32 = here
        .query_one("SELECT lo_from_bytea(0, 'the operator''s')", &[])
        .unwrap()
        .get(0);
    here.batch_execute(&format!("ALTER LARGE OBJECT {lo} OWNER TO {OWNER}"))
        .unwrap();
    let mut operator = db.client();
    operator
        .batch_execute("SELECT pg_advisory_lock(4242); BEGIN; SELECT 1")
        .unwrap();
    let pid: i32 = operator
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    // The flood guard's end (as when the lock table is full and every
    // session holding an advisory lock is looked at) leaves it alone.
    let ended = db
        .client()
        .query(
            include_str!("../../sql/flood_end.sql"),
            &[&vec![pid], &true],
        )
        .unwrap();
    assert!(ended.is_empty(), "the flood guard ended orca's own session");
    let dir = TempDir::new();
    db.register(&dir, "[pipelines.job]\ncommand = \"true\"\n");
    let mut s = db.scheduler(&dir, &[("ORCA_LOGIN_XACT_SECONDS", "2")]);
    let run = db.queue("job");
    wait_until("the scheduler runs a run", 60.0, || {
        db.state(run) == "succeeded"
    });
    // A machine login doing the same (a large object of its own, a
    // transaction open past the limit) after orca's: once the leader's
    // sweeps have ended its session and removed its object, they have
    // looked at the operator's session and orca's object too.
    let control = machine_role("control");
    db.login_role(&control, "pw", "orca_worker");
    let theirs: u32 = here
        .query_one("SELECT lo_from_bytea(0, 'the login''s')", &[])
        .unwrap()
        .get(0);
    here.batch_execute(&format!("ALTER LARGE OBJECT {theirs} OWNER TO {control}"))
        .unwrap();
    let mut c = db.client_as(&control, "pw");
    // (Its own timeouts off: orca's sweep, not the server, ends it.)
    c.batch_execute(
        "SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0; BEGIN; SELECT 1",
    )
    .unwrap();
    s.wait_for("the sweeps end the login's session", 30.0, || {
        c.is_closed() || c.simple_query("SELECT 1").is_err()
    });
    s.wait_for("the sweeps remove the login's large object", 30.0, || {
        !db.one::<bool>(&format!(
            "SELECT EXISTS (SELECT 1 FROM pg_largeobject_metadata WHERE oid = {theirs})"
        ))
    });
    operator
        .batch_execute("SELECT 1")
        .expect("the operator's session is not ended");
    operator.batch_execute("COMMIT").unwrap();
    let kept: bool = db.one(&format!(
        "SELECT EXISTS (SELECT 1 FROM pg_largeobject_metadata WHERE oid = {lo})"
    ));
    assert!(kept, "orca's own large object is kept");
    // The login's, and nothing of orca's, was taken for an intruder.
    let events: Vec<String> = db
        .client()
        .query("SELECT why FROM orca.events WHERE kind = 'intruder'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!events.is_empty());
    assert!(
        events.iter().all(|why| why.contains(&control)),
        "{events:?}"
    );
    s.stop();
}
