//! What a machine login can't do to orca however it tries (issue 28,
//! sections 2 and 3): keep its machine from being removed by holding the
//! machine's row in transactions just short of `ORCA_LOGIN_XACT_SECONDS`,
//! or leave behind anything it made. Every test runs orca as the README's
//! role, not a superuser; the machine is made by hand, its login playing
//! the attacker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::harness::*;
use crate::pools::{pool_scheduler, pool_test};
use crate::worker::hand_made_machine;

/// A worker's round as a machine's login sends it with nothing to report
/// and no room: it beats its machine's row (and holds that row's lock to
/// the end of its transaction).
const ROUND: &str = "SELECT * FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0, \
     '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')";

/// Transactions of `hold` seconds, one after another, each beginning with a
/// worker's round and ended with `end` (`COMMIT`, or `ROLLBACK`: its beats
/// never land, so its machine goes silent), as `role`'s login, on a thread
/// of its own; until `stop` or its session is ended. Whether its session
/// was ended.
fn holds_its_row(
    db: &TestDb,
    role: &str,
    hold: f64,
    end: &str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<bool> {
    let mut c = db.client_as(role, "pw");
    c.batch_execute("SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0")
        .unwrap();
    let batch = format!("BEGIN; {ROUND}; SELECT pg_sleep({hold}); {end}");
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            if c.batch_execute(&batch).is_err() {
                return true;
            }
        }
        false
    })
}

#[test]
fn a_login_holding_its_machine_s_row_in_short_transactions_can_t_keep_it_from_removal() {
    // The bound: ORCA_POOL_SCALE_SECONDS + 2 x ORCA_LOGIN_XACT_SECONDS from
    // when the machine is due, whatever its login does.
    const SCALE: f64 = 1.0;
    const XACT: f64 = 3.0;
    let (db, dir) = pool_test("idle_seconds = 1\n");
    let role = format!("orca_m_loop_{}", std::process::id());
    hand_made_machine(&db, "p", &role, "pw");
    // Seen, then idle past its idle_seconds: due for removal.
    db.client_as(&role, "pw").batch_execute(ROUND).unwrap();
    wait_until("the machine is idle past its idle_seconds", 30.0, || {
        db.one::<bool>(
            "SELECT now() - busy_at > interval '1.2 s' FROM orca.pool_machines WHERE pool = 'p'",
        )
    });
    // Its login holds the row in transactions just short of the limit.
    let stop = Arc::new(AtomicBool::new(false));
    let looping = holds_its_row(&db, &role, XACT - 0.5, "COMMIT", stop.clone());
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[
            ("ORCA_POOL_SCALE_SECONDS", &SCALE.to_string()),
            ("ORCA_LOGIN_XACT_SECONDS", &XACT.to_string()),
        ],
    );
    s.wait_for("the scheduler leads", 30.0, || {
        db.one::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                             AND objid = 1869767525)",
        )
    });
    let leads = Instant::now();
    // Removed within the bound (and a margin for a loaded box), as idle.
    s.wait_for("the machine is removed", SCALE + 2.0 * XACT + 6.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL") == 0
    });
    let took = leads.elapsed().as_secs_f64();
    let why: String = db.one("SELECT why FROM orca.pool_machines");
    assert!(why.contains("idle"), "{why}");
    // Its login was revoked: its loop's session ended, and it can't log in;
    // an event says so.
    stop.store(true, Ordering::SeqCst);
    assert!(looping.join().unwrap(), "the login's session was not ended");
    let said: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'intruder'",
    );
    assert!(
        said.contains(&role) && said.contains("held its machine"),
        "{said}"
    );
    let again = postgres::Client::connect(&db.url_as(&role, "pw"), postgres::NoTls);
    assert!(again.is_err(), "the removed machine's login still logs in");
    s.stop();
    eprintln!("removed {took:.1}s after the scheduler led");
}

#[test]
fn a_lost_machine_whose_login_holds_its_row_is_removed_all_the_same() {
    const XACT: f64 = 3.0;
    let (db, dir) = pool_test("idle_seconds = 600\n");
    let role = format!("orca_m_lost_{}", std::process::id());
    hand_made_machine(&db, "p", &role, "pw");
    db.client_as(&role, "pw").batch_execute(ROUND).unwrap();
    // Its rounds are rolled back: it is never heard from again, and it
    // holds its row all along.
    let stop = Arc::new(AtomicBool::new(false));
    let looping = holds_its_row(&db, &role, XACT - 0.5, "ROLLBACK", stop.clone());
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[
            ("ORCA_POOL_SCALE_SECONDS", "1"),
            ("ORCA_POOL_LOST_SECONDS", "4"),
            ("ORCA_LOGIN_XACT_SECONDS", &XACT.to_string()),
        ],
    );
    s.wait_for("the lost machine is removed", 40.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL") == 0
    });
    let why: String = db.one("SELECT why FROM orca.pool_machines");
    assert!(why.contains("silent"), "{why}");
    stop.store(true, Ordering::SeqCst);
    assert!(looping.join().unwrap(), "the login's session was not ended");
    assert!(postgres::Client::connect(&db.url_as(&role, "pw"), postgres::NoTls).is_err());
    s.stop();
}
