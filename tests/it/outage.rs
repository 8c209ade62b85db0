//! Postgres going away and coming back, and TLS to Postgres: on clusters of
//! the tests' own.

use crate::harness::*;

#[test]
fn a_database_restart_loses_no_run_and_ends_each_once() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    let ended = dir.path("ended");
    // Odd runs fail, even ones succeed: the outcome is the run's own.
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\nmax_runs = 6\ncommand = \"sleep 1.5; echo $ORCA_RUN_ID >> {}; exit $(( $ORCA_RUN_ID % 2 ))\"\n",
            ended.display()
        ),
    );
    let ids: Vec<i64> = (0..6).map(|_| db.queue("p")).collect();
    let mut s = db.scheduler(&dir, &[]);
    wait_until("six runs running", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'") == 6
    });
    cluster.stop();
    // The runs end while the database is down: their ends wait in memory.
    wait_until("all six commands ended", 30.0, || {
        pids_in(&ended).len() == 6
    });
    cluster.start();
    wait_until("every run's end is recorded", 60.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state IN ('succeeded', 'failed')") == 6
    });
    for id in &ids {
        let want = if id % 2 == 0 { "succeeded" } else { "failed" };
        assert_eq!(db.state(*id), want, "run {id}");
        assert_eq!(db.events(*id, want), 1, "run {id} ends once");
        assert_eq!(db.events(*id, "requeued"), 0, "run {id} was never requeued");
        assert_eq!(
            db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {id}")),
            1
        );
    }
    // And a restart while runs are in flight: they too end once, for real.
    let more: Vec<i64> = (0..4).map(|_| db.queue("p")).collect();
    wait_until("four runs running", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'") == 4
    });
    cluster.restart();
    wait_until("the four end", 60.0, || {
        more.iter().all(|id| {
            let s = db.state(*id);
            s == "succeeded" || s == "failed"
        })
    });
    for id in &more {
        assert_eq!(db.events(*id, "started"), 1, "run {id} started once");
    }
    // Each loop (tick, heartbeat, alerts) logs an outage once as it starts
    // and once as it ends.
    let log = s.output();
    assert!(
        log.contains("can't be reached"),
        "the outage is logged:\n{log}"
    );
    let balanced = || {
        let log = s.output();
        log.matches("can't be reached").count() == log.matches("reachable again").count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !balanced() {
        assert!(
            std::time::Instant::now() < deadline,
            "every loop logs the outage's end:\n{}",
            s.output()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let log = s.output();
    for who in ["scheduler", "heartbeat"] {
        let starts = log.matches(&format!("{who}: database at")).count();
        assert!(
            (2..=4).contains(&starts),
            "{who} logs each outage twice, not every second:\n{log}"
        );
    }
    s.stop();
}

/// Runs `openssl` with `args` (split at spaces) in `dir`; it must succeed.
fn openssl(dir: &TempDir, args: &str) {
    let out = std::process::Command::new("openssl")
        .args(args.split_whitespace())
        .current_dir(&dir.0)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args}: {}",
        text(&out.stderr)
    );
}

#[test]
fn tls_require_and_verify_full() {
    let certs = TempDir::new();
    // Two CAs: ours, which signs the server's certificate, and another.
    for ca in ["ca", "other"] {
        openssl(
            &certs,
            &format!(
                "req -x509 -newkey rsa:2048 -nodes -keyout {ca}.key -out {ca}.pem -days 2 -subj /CN={ca}"
            ),
        );
    }
    openssl(
        &certs,
        "req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost",
    );
    certs.write("ext.cnf", "subjectAltName = DNS:localhost\n");
    openssl(
        &certs,
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf",
    );

    let cluster = tls_cluster(&certs);

    let base = format!("postgres://postgres@localhost:{}/postgres", cluster.port());
    let try_url = |url: &str| {
        std::process::Command::new(bin())
            .args(["migrate", "--wait", "0"])
            .env("ORCA_DATABASE_URL", url)
            .output()
            .unwrap()
    };
    let plain = try_url(&format!("{base}?sslmode=disable"));
    assert_eq!(plain.status.code(), Some(1), "a non-TLS session is refused");
    let required = try_url(&format!("{base}?sslmode=require"));
    assert!(required.status.success(), "{}", text(&required.stderr));
    let verified = try_url(&format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        certs.path("ca.pem").display()
    ));
    assert!(verified.status.success(), "{}", text(&verified.stderr));
    let wrong_ca = try_url(&format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        certs.path("other.pem").display()
    ));
    assert_eq!(
        wrong_ca.status.code(),
        Some(1),
        "a certificate from another CA is refused"
    );
    // The default (prefer) uses TLS when the server has it.
    let preferred = try_url(&base);
    assert!(preferred.status.success(), "{}", text(&preferred.stderr));
}

/// A started cluster serving `server.pem` and `server.key` from `certs`,
/// which over TCP lets in TLS sessions only.
fn tls_cluster(certs: &TempDir) -> Cluster {
    let cluster = Cluster::new("ssl = on\n");
    for f in ["server.pem", "server.key"] {
        let dest = cluster.dir.join(f);
        std::fs::copy(certs.path(f), &dest).unwrap();
        std::fs::set_permissions(&dest, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        cluster.give(&dest);
    }
    let data = cluster.dir.join("data");
    let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
    conf.push_str(&format!(
        "ssl_cert_file = '{}'\nssl_key_file = '{}'\n",
        cluster.dir.join("server.pem").display(),
        cluster.dir.join("server.key").display()
    ));
    std::fs::write(data.join("postgresql.conf"), conf).unwrap();
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
    )
    .unwrap();
    cluster.start();
    cluster
}

/// A server whose certificate is self-signed, its own CA (what `openssl req
/// -x509` makes), given as `sslrootcert`: libpq trusts a presented
/// certificate that is one of sslrootcert's, and so does orca, the name
/// still checked. A certificate refused is said at once, in words, not
/// waited on as "can't reach".
#[test]
fn verify_full_trusts_a_self_signed_certificate_given_as_sslrootcert() {
    let certs = TempDir::new();
    openssl(
        &certs,
        "req -x509 -newkey rsa:2048 -nodes -keyout server.key -out server.pem -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1",
    );
    let cluster = tls_cluster(&certs);
    let root = certs.path("server.pem");
    let try_url = |host: &str| {
        let url = format!(
            "postgres://postgres@{host}:{}/postgres?sslmode=verify-full&sslrootcert={}",
            cluster.port(),
            root.display()
        );
        let began = std::time::Instant::now();
        let out = std::process::Command::new(bin())
            .args(["migrate", "--wait", "60"])
            .env("ORCA_DATABASE_URL", url)
            .output()
            .unwrap();
        (out, began.elapsed().as_secs_f64())
    };
    let (trusted, _) = try_url("127.0.0.1");
    assert!(trusted.status.success(), "{}", text(&trusted.stderr));
    // The same certificate for another name: refused at once, in words.
    let (other_name, took) = try_url("localhost");
    let err = text(&other_name.stderr);
    assert_eq!(other_name.status.code(), Some(1), "{err}");
    assert!(
        took < 30.0,
        "gave up after {took:.1}s, not at once (--wait 60)"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("certificate") && err.contains("localhost") && !err.contains("can't reach"),
        "{err}"
    );
}

/// A scheduler whose password is changed while it runs, its session then
/// ended, says the database refused its login (not that it can't be
/// reached), tries again every 10 s rather than every second, and carries
/// on once the password is right again.
#[test]
fn a_scheduler_whose_password_was_rotated_says_its_login_is_refused() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    let role = db.role_name("op");
    let secret = "sched-pw-hunter5";
    db.owner_member_role(&role, secret);
    let url = with_user(&db.url, &role, secret);
    let mut s = db.scheduler(&dir, &[("ORCA_DATABASE_URL", &url)]);
    let sessions = format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}'");
    s.wait_for("the scheduler's sessions", 60.0, || {
        db.one::<i64>(&sessions) >= 2
    });
    db.admin(&format!("ALTER ROLE \"{role}\" PASSWORD 'rotated-hunter6'"));
    let terminate =
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'");
    let refused = |log: &str| {
        log.lines()
            .filter(|l| l.contains("refused the login"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    s.wait_for("a line saying the login is refused", 60.0, || {
        db.admin(&terminate);
        !refused(&s.output()).is_empty()
    });
    let log = s.output();
    for line in refused(&log) {
        assert!(
            line.contains("WARN")
                && line.contains("password authentication failed")
                && line.contains("every 10 s"),
            "{line}"
        );
    }
    for line in log.lines().filter(|l| l.contains("can't be reached")) {
        assert!(!line.contains("password authentication failed"), "{log}");
    }
    assert!(
        !log.contains(secret) && !log.contains("rotated-hunter6"),
        "{log}"
    );
    // The right password again: it logs in at its next try.
    db.admin(&format!("ALTER ROLE \"{role}\" PASSWORD '{secret}'"));
    s.wait_for("the scheduler to log in again", 60.0, || {
        db.one::<i64>(&sessions) >= 2
    });
    s.stop();
}

/// More ends than one statement takes (`orca.finish_attempts`: 1,024) pile
/// up while the database is away: they are written in batches when it is
/// back, not one statement each for a minute after the batch was refused.
#[test]
fn over_a_thousand_ends_held_through_an_outage_are_written_in_batches() {
    use std::os::unix::fs::OpenOptionsExt;
    const RUNS: usize = 1100;
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    let ended = dir.path("ended");
    // Each command waits for a writer to come and go on a FIFO, then ends.
    let fifo = dir.path("go");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\nmax_runs = {RUNS}\ncommand = \"read x < {}; echo $ORCA_RUN_ID >> {}\"\n",
            fifo.display(),
            ended.display()
        ),
    );
    db.client()
        .execute(
            "INSERT INTO orca.runs (pipeline) SELECT 'p' FROM generate_series(1, $1::int)",
            &[&(RUNS as i32)],
        )
        .unwrap();
    let mut s = db.scheduler(&dir, &[("ORCA_TICK_SECONDS", "0.05")]);
    wait_until("every run running", 180.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'") == RUNS as i64
    });
    cluster.stop();
    // A writer opens and closes the FIFO until every command has ended (one
    // not yet reading when the writer left waits for the next).
    wait_until("every command ended", 120.0, || {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
        pids_in(&ended).len() == RUNS
    });
    cluster.start();
    wait_until("every end is recorded", 120.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'succeeded'") == RUNS as i64
    });
    let log = s.output();
    assert!(
        !log.contains("ends in one statement"),
        "a batch was refused:\n{}",
        log.lines()
            .filter(|l| l.contains("ends in one statement"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    s.stop();
}
