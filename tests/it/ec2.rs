//! Pools on the EC2 provider, against a fake EC2 endpoint on loopback that
//! checks every request's SigV4 signature: the pools' walk, throttling, a
//! lost answer, auth failure, strays across pages, and credentials from the
//! environment, a profile file and IMDSv2.

use crate::fake_aws::{FakeEc2, FakeImds};
use crate::harness::*;

/// The fake EC2's access key and secret.
pub(crate) const KEY: &str = "AKIDORCATEST";
pub(crate) const SECRET: &str = "orca/test/secret+key";

/// The scheduler's environment for a fake EC2 at `ec2`: no real AWS, no
/// IMDS, the pool timing shortened.
pub(crate) fn ec2_env(ec2: &FakeEc2) -> Vec<(&'static str, String)> {
    vec![
        ("ORCA_EC2_ENDPOINT", ec2.url.clone()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent".into()),
        ("AWS_CONFIG_FILE", "/nonexistent".into()),
        ("ORCA_POOL_SCALE_SECONDS", "0.3".into()),
        ("ORCA_POOL_GROW_AFTER", "0".into()),
        ("ORCA_POOL_TRY_SECONDS", "0.3".into()),
    ]
}

/// `env` with the fake's keys and region.
pub(crate) fn with_keys(mut env: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    env.push(("AWS_ACCESS_KEY_ID", KEY.into()));
    env.push(("AWS_SECRET_ACCESS_KEY", SECRET.into()));
    env.push(("AWS_REGION", "eu-west-1".into()));
    env
}

/// A scheduler with `env` (later pairs win), no AWS setting of this
/// process's own.
pub(crate) fn start(db: &TestDb, dir: &TempDir, env: &[(&'static str, String)]) -> Proc {
    let mut c = db.orca(&["scheduler"]);
    c.env("ORCA_TICK_SECONDS", "0.2")
        .env("ORCA_STALE_SECONDS", "3")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION");
    for (k, v) in env {
        c.env(k, v);
    }
    Proc::spawn(c, &dir.path("scheduler.log"))
}

fn ec2_pool(types: &str, locations: &str) -> String {
    format!(
        r#"
[pools.p]
provider = "ec2"
ami = "ami-0123456789abcdef0"
instance_profile = "orca-worker"
security_groups = ["sg-1", "sg-2"]
types = [{types}]
locations = [{locations}]
max_machines = 2

[pipelines.job]
command = "true"
placement = "worker:p"
"#
    )
}

#[test]
fn an_ec2_pool_walks_locations_and_types_with_signed_calls() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    {
        let mut st = ec2.state.lock().unwrap();
        // c7g (arm64) has no capacity anywhere; m7i none in subnet-a.
        st.no_capacity.push(("c7g.large".into(), "*".into()));
        st.no_capacity.push(("m7i.large".into(), "subnet-a".into()));
        // The first calls are throttled: retried within the pass.
        st.throttle_next = 2;
    }
    // An AMI per architecture: c7g (arm64) is tried, from the arm64 one.
    let (db, dir) = setup(
        &ec2_pool(
            r#"{ type = "c7g.large", wait = 2 }, { type = "m7i.large", wait = 0 }"#,
            r#""subnet-a", "eu-west-1b""#,
        )
        .replace(
            r#"ami = "ami-0123456789abcdef0""#,
            r#"ami = { x86_64 = "ami-0123456789abcdef0", arm64 = "ami-arm64" }"#,
        ),
    );
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("an instance is made", 40.0, || !ec2.live().is_empty());
    let made = ec2.live();
    assert_eq!(made.len(), 1);
    let i = &made[0];
    assert_eq!(i.type_, "m7i.large");
    let p = &i.params;
    let get = |k: &str| p.get(k).map(String::as_str);
    // The second location is an availability zone, not a subnet.
    assert_eq!(get("Placement.AvailabilityZone"), Some("eu-west-1b"));
    assert_eq!(get("SubnetId"), None);
    assert_eq!(get("ImageId"), Some("ami-0123456789abcdef0"));
    assert_eq!(get("MetadataOptions.HttpTokens"), Some("required"));
    assert_eq!(get("IamInstanceProfile.Name"), Some("orca-worker"));
    assert_eq!(
        (get("SecurityGroupId.1"), get("SecurityGroupId.2")),
        (Some("sg-1"), Some("sg-2"))
    );
    let machine: String = db.one("SELECT name FROM orca.pool_machines");
    let stack: String = db.one("SELECT id FROM orca.stack");
    assert_eq!(i.tag("Name"), Some(machine.as_str()));
    assert_eq!(i.tag("orca-pool"), Some("p"));
    assert_eq!(i.tag("orca-stack"), Some(stack.as_str()));
    assert_eq!(get("TagSpecification.2.ResourceType"), Some("volume"));
    assert_eq!(
        get("TagSpecification.2.Tag.1.Value"),
        Some(machine.as_str())
    );
    let token = get("ClientToken").unwrap();
    assert!(
        token.starts_with(&format!("orca-{stack}-")) && token.len() <= 64,
        "{token}"
    );
    // The user-data: the machine's settings, then the boot script.
    use base64::Engine;
    let user_data = base64::engine::general_purpose::STANDARD
        .decode(get("UserData").unwrap())
        .unwrap();
    let user_data = String::from_utf8(user_data).unwrap();
    assert!(user_data.contains("export ORCA_POOL='p'"), "{user_data}");
    assert!(
        user_data.contains("export ORCA_TOKEN='orca_m_"),
        "{user_data}"
    );
    assert!(
        user_data.contains("worker --pool \"$ORCA_POOL\""),
        "{user_data}"
    );
    // The row holds the instance id.
    let provider_id: String = db.one("SELECT provider_id FROM orca.pool_machines");
    assert_eq!(provider_id, i.id);
    // c7g was kept for its wait (2 s) before m7i was tried.
    let kept: f64 = db.one(
        "SELECT extract(epoch FROM (SELECT made_at FROM orca.pool_machines)
           - (SELECT min(at) FROM orca.events WHERE kind = 'no capacity'))::float8",
    );
    assert!(kept >= 2.0, "c7g given up after {kept}s");
    let said: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'no capacity'");
    assert!(said.contains("InsufficientInstanceCapacity"), "{said}");
    assert!(ec2.state.lock().unwrap().throttled == 2);
    assert_eq!(
        ec2.bad_signatures(),
        0,
        "a request's signature did not check out"
    );
    s.stop();
    assert!(!s.output().contains(SECRET), "the secret key is in the log");
}

#[test]
fn a_lost_run_instances_answer_makes_one_instance() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    ec2.state.lock().unwrap().drop_next_run_answer = true;
    let (db, dir) = setup(&ec2_pool(
        r#"{ type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    ));
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("the machine's row is written", 40.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines") == 1
    });
    // The retry carried the same client token: EC2 answered with the same
    // instance instead of making a second.
    assert!(ec2.count("RunInstances") >= 2);
    let live = ec2.live();
    assert_eq!(live.len(), 1);
    let provider_id: String = db.one("SELECT provider_id FROM orca.pool_machines");
    assert_eq!(provider_id, live[0].id);
    s.stop();
}

#[test]
fn an_auth_failure_is_shown_and_nothing_is_made() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    ec2.state.lock().unwrap().fail_all = Some((
        401,
        "AuthFailure".into(),
        "AWS was not able to validate the provided access credentials".into(),
    ));
    let (db, dir) = setup(&ec2_pool(
        r#"{ type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    ));
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("orca pools says why", 40.0, || {
        db.ok(&["pools"])
            .contains("AuthFailure: AWS was not able to validate")
    });
    assert!(ec2.live().is_empty());
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.pool_machines"), 0);
    // No role is left behind for the machines that weren't made. The pool
    // tries again every pass (0.3 s here), each try making a role and
    // dropping it once the make has failed, so one may be there for a
    // moment (a check just after the first failure met the second try's
    // role once in a CI run): they don't pile up, and a moment later none
    // is there.
    let stack: String = db.one("SELECT id FROM orca.stack");
    let mut c = db.client();
    let mut most = 0;
    wait_until("no machine role left", 30.0, || {
        let roles: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_roles WHERE starts_with(rolname, $1)",
                &[&format!("orca_m_{stack}_")],
            )
            .unwrap()
            .get(0);
        most = most.max(roles);
        roles == 0
    });
    assert!(most <= 1, "{most} machine roles at once");
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "the scheduler exited"
    );
    let json = db.ok(&["pools", "--json"]);
    assert!(!json.contains(SECRET) && !s.output().contains(SECRET));
    s.stop();
}

/// An EC2 refusal is an event too (`orca events`), once per change of the
/// error for a pool: not one for each attempt.
#[test]
fn an_ec2_refusal_is_an_event_once_per_change() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let refuse = |code: &str, message: &str| {
        // RunInstances refused: the types' and the AMI's architectures
        // are read (they fit), the launches refused.
        ec2.state.lock().unwrap().fail_run = Some((403, code.into(), message.into()));
    };
    refuse(
        "UnauthorizedOperation",
        "You are not authorized to perform this operation.",
    );
    let (db, dir) = setup(&ec2_pool(
        r#"{ type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    ));
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    let events = |code: &str| {
        db.one::<i64>(&format!(
            "SELECT count(*) FROM orca.events WHERE kind = 'machine not made'
             AND why LIKE 'pool p: %{code}%'"
        ))
    };
    s.wait_for("an event saying why", 40.0, || {
        events("UnauthorizedOperation") >= 1
    });
    // Attempts go on (one every 0.3 s here): still one event.
    let tried = ec2.count("RunInstances");
    s.wait_for("three more attempts", 40.0, || {
        ec2.count("RunInstances") >= tried + 3
    });
    assert_eq!(events("UnauthorizedOperation"), 1, "{}", db.ok(&["events"]));
    // Another error: one event more.
    refuse(
        "InvalidAMIID.NotFound",
        "The image id '[ami-0]' does not exist",
    );
    s.wait_for("an event for the new error", 40.0, || {
        events("InvalidAMIID") >= 1
    });
    let tried = ec2.count("RunInstances");
    s.wait_for("three more attempts", 40.0, || {
        ec2.count("RunInstances") >= tried + 3
    });
    assert_eq!(events("InvalidAMIID"), 1, "{}", db.ok(&["events"]));
    assert_eq!(events(""), 2, "{}", db.ok(&["events"]));
    assert!(!db.ok(&["events"]).contains(SECRET));
    s.stop();
}

/// An instance of pool `p` named `orca-p-<n>`, labelled with stack
/// `stack`, that no row holds: a stray.
fn stray(n: u32, stack: &str) -> crate::fake_aws::Inst {
    crate::fake_aws::Inst {
        id: format!("i-stray{n}"),
        type_: "m7i.large".into(),
        tags: vec![
            ("Name".into(), format!("orca-p-{n}")),
            ("orca-pool".into(), "p".into()),
            ("orca-stack".into(), stack.to_string()),
        ],
        terminated: false,
        client_token: String::new(),
        params: Default::default(),
    }
}

/// This stack's id, once the scheduler has made it.
fn stack_id(db: &TestDb) -> String {
    let mut stack = String::new();
    wait_until("the stack id is made", 20.0, || {
        match db
            .client()
            .query_opt("SELECT id FROM orca.stack", &[])
            .unwrap()
        {
            Some(r) => {
                stack = r.get(0);
                true
            }
            None => false,
        }
    });
    stack
}

#[test]
fn strays_are_found_across_pages_and_terminated() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let (db, dir) = setup(&ec2_pool(
        r#"{ type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    ));
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    let stack = stack_id(&db);
    {
        let mut st = ec2.state.lock().unwrap();
        st.page_size = 1;
        for (n, owner) in [
            (901, stack.as_str()),
            (902, "another-stack"),
            (903, stack.as_str()),
        ] {
            st.instances.push(stray(n, owner));
        }
    }
    wait_until("this stack's strays are terminated", 40.0, || {
        let live = ec2.live();
        live.len() == 1 && live[0].id == "i-stray902"
    });
    assert!(db.events_of_kind("stray deleted") >= 2);
    assert_eq!(ec2.bad_signatures(), 0);
    s.stop();
}

#[test]
fn credentials_from_a_profile_file() {
    let ec2 = FakeEc2::start("AKIDPROFILE", "profile-secret");
    let db = TestDb::new();
    let dir = TempDir::new();
    let creds = dir.write(
        "credentials",
        "[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = nope\n\n[ci]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = profile-secret\n",
    );
    let config = dir.write("config", "[profile ci]\nregion = eu-central-1\n");
    db.register(
        &dir,
        &ec2_pool(r#"{ type = "m7i.large", wait = 0 }"#, r#""subnet-a""#),
    );
    db.queue("job");
    let mut env = ec2_env(&ec2);
    env.retain(|(k, _)| !k.starts_with("AWS_SHARED") && !k.starts_with("AWS_CONFIG"));
    env.push(("AWS_SHARED_CREDENTIALS_FILE", creds));
    env.push(("AWS_CONFIG_FILE", config));
    env.push(("AWS_PROFILE", "ci".into()));
    let mut s = start(&db, &dir, &env);
    wait_until("an instance is made", 40.0, || !ec2.live().is_empty());
    let st = ec2.state.lock().unwrap();
    assert!(
        st.log
            .iter()
            .all(|(_, key, good)| key == "AKIDPROFILE" && *good)
    );
    // The region from the profile's config.
    assert!(
        st.regions.iter().all(|r| r == "eu-central-1"),
        "{:?}",
        st.regions
    );
    drop(st);
    s.stop();
    assert!(!s.output().contains("profile-secret"));
}

#[test]
fn credentials_and_region_from_imdsv2_are_refreshed_before_they_expire() {
    let ec2 = FakeEc2::start("AKIDROLE1", "role-secret-1");
    ec2.state
        .lock()
        .unwrap()
        .secrets
        .insert("AKIDROLE2".into(), "role-secret-2".into());
    // The first credentials expire in 5 min 3 s: within the 5-minute
    // refresh margin after 3 s. The next last an hour.
    let imds = FakeImds::start(
        "orca-scheduler",
        "eu-north-1",
        vec![
            ("AKIDROLE1".into(), "role-secret-1".into(), 303),
            ("AKIDROLE2".into(), "role-secret-2".into(), 3600),
        ],
    );
    let (db, dir) = setup(&ec2_pool(
        r#"{ type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    ));
    let mut env = ec2_env(&ec2);
    env.retain(|(k, _)| *k != "AWS_EC2_METADATA_DISABLED");
    env.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url.clone()));
    let mut s = start(&db, &dir, &env);
    wait_until("calls signed with the refreshed credentials", 40.0, || {
        ec2.state
            .lock()
            .unwrap()
            .log
            .iter()
            .any(|(_, key, good)| key == "AKIDROLE2" && *good)
    });
    let st = ec2.state.lock().unwrap();
    assert!(st.log.iter().any(|(_, key, _)| key == "AKIDROLE1"));
    assert!(st.log.iter().all(|(_, _, good)| *good));
    // The region from the instance's metadata.
    assert!(
        st.regions.iter().all(|r| r == "eu-north-1"),
        "{:?}",
        st.regions
    );
    drop(st);
    assert!(*imds.fetches.lock().unwrap() >= 2);
    s.stop();
    let log = s.output();
    assert!(!log.contains("role-secret"), "a secret is in the log");
    assert!(log.contains("instance role orca-scheduler"), "{log}");
}

#[test]
fn a_wrong_secret_fails_the_endpoint_s_signature_check() {
    // The fake knows another secret for the key: every signature is wrong.
    let ec2 = FakeEc2::start(KEY, "not-the-secret-the-scheduler-has");
    let (db, dir) = setup(&ec2_pool(
        r#"{ type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    ));
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("orca pools says the credentials were refused", 40.0, || {
        db.ok(&["pools"]).contains("AuthFailure")
    });
    assert!(ec2.bad_signatures() > 0);
    assert!(ec2.live().is_empty());
    s.stop();
}

#[test]
fn a_slow_endpoint_cuts_passes_short_and_every_pool_gets_its_turn() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    {
        let mut st = ec2.state.lock().unwrap();
        st.delay_ms = 1200;
        st.no_capacity.push(("*".into(), "*".into()));
    }
    let db = TestDb::new();
    let dir = TempDir::new();
    let one = ec2_pool(r#"{ type = "m7i.large", wait = 0 }"#, r#""subnet-a""#);
    let file: String = ["a", "b", "c"]
        .iter()
        .map(|p| {
            one.replace("[pools.p]", &format!("[pools.{p}]"))
                .replace("[pipelines.job]", &format!("[pipelines.job-{p}]"))
                .replace("worker:p", &format!("worker:{p}"))
        })
        .collect();
    db.register(&dir, &file);
    for p in ["a", "b", "c"] {
        db.queue(&format!("job-{p}"));
    }
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    // Each pass runs out of its budget after a pool or two; the next goes
    // on from there, so every pool is tried.
    wait_until("every pool has tried to make a machine", 60.0, || {
        db.one::<i64>(
            "SELECT count(*) FROM orca.pools WHERE status LIKE '%InsufficientInstanceCapacity%'",
        ) == 3
    });
    assert!(
        s.output().contains("left to the next pass"),
        "{}",
        s.output()
    );
    s.stop();
}

#[test]
fn an_ec2_type_the_image_has_no_variant_for_is_skipped() {
    // The image is amd64 only; c7g (Graviton, arm64 by DescribeInstanceTypes)
    // is skipped, though an AMI fits it, m7i (x86_64) made.
    let reg = tiny_registry(&[("team/worker", &["amd64"])]);
    let ec2 = FakeEc2::start(KEY, SECRET);
    let db = TestDb::new();
    let dir = TempDir::new();
    let file = ec2_pool(
        r#"{ type = "c7g.large", wait = 600 }, { type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    )
    .replace(
        "max_machines = 2",
        &format!("max_machines = 2\nimage = \"{reg}/team/worker:v1\""),
    )
    .replace(
        r#"ami = "ami-0123456789abcdef0""#,
        r#"ami = { x86_64 = "ami-0123456789abcdef0", arm64 = "ami-arm64" }"#,
    );
    db.register(&dir, &file);
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("an instance is made", 40.0, || !ec2.live().is_empty());
    assert_eq!(ec2.live()[0].type_, "m7i.large");
    let said: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'type skipped'");
    assert!(
        said.contains("type c7g.large skipped") && said.contains("no arm64 variant"),
        "{said}"
    );
    assert!(ec2.count("DescribeInstanceTypes") >= 1);
    s.stop();
}

#[test]
fn a_machine_is_removed_in_the_region_it_was_made_in() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let db = TestDb::new();
    let dir = TempDir::new();
    let file = ec2_pool(r#"{ type = "m7i.large", wait = 0 }"#, r#""subnet-a""#);
    db.register(&dir, &file);
    db.queue("job");
    let mut env = with_keys(ec2_env(&ec2));
    // The fake's instances never boot: given up after 2 s.
    env.push(("ORCA_POOL_BOOT_SECONDS", "2".into()));
    let mut s = start(&db, &dir, &env);
    wait_until("an instance is made", 40.0, || !ec2.live().is_empty());
    let region: Option<String> = db.one("SELECT region FROM orca.pool_machines");
    assert_eq!(region.as_deref(), Some("eu-west-1"));
    // The pool moves to another region before the machine goes.
    db.register(
        &dir,
        &file.replace(
            "max_machines = 2",
            "max_machines = 2\nregion = \"us-east-2\"",
        ),
    );
    wait_until("the machine is terminated", 40.0, || {
        ec2.count("TerminateInstances") > 0
    });
    let st = ec2.state.lock().unwrap();
    let at = st
        .log
        .iter()
        .position(|l| l.0 == "TerminateInstances")
        .unwrap();
    assert_eq!(st.regions[at], "eu-west-1", "terminated in another region");
    drop(st);
    s.stop();
}

#[test]
fn an_ec2_run_s_instances_are_made_on_ec2_and_the_run_fails_when_its_head_never_serves() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let (db, dir) = setup(
        r#"
[pipelines.train]
command = "true"
placement = "ec2"

[pipelines.train.ec2]
provider = "ec2"
type = "m7i.large"
locations = ["subnet-a"]
ami = "ami-0123456789abcdef0"
workers = 1
"#,
    );
    let run = db.queue("train");
    let mut env = with_keys(ec2_env(&ec2));
    // The fake's instances never boot: the head is given up after 2 s.
    env.push(("ORCA_POOL_BOOT_SECONDS", "2".into()));
    let mut s = start(&db, &dir, &env);
    wait_until("a head and a worker are made", 40.0, || {
        ec2.live().len() == 2
    });
    let made = ec2.live();
    for i in &made {
        assert_eq!(i.tag("orca-pool"), Some("orca:ec2-runs"));
        use base64::Engine;
        let ud = base64::engine::general_purpose::STANDARD
            .decode(i.params.get("UserData").unwrap())
            .unwrap();
        let ud = String::from_utf8(ud).unwrap();
        assert!(
            ud.contains("ec2-serve") && ud.contains("export ORCA_RUN="),
            "{ud}"
        );
    }
    // A head that never serves is a failed attempt (no retries here): the
    // run fails for good, and no instance is made for it again.
    wait_until(
        "the run fails and its instances are terminated",
        40.0,
        || db.state(run) == "failed" && ec2.count("TerminateInstances") >= 2,
    );
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {run}"));
    assert!(why.contains("never started serving"), "{why}");
    assert_eq!(ec2.count("RunInstances"), 2);
    assert_eq!(ec2.bad_signatures(), 0);
    s.stop();
}

/// An endpoint that answers every call in ~2.2 s (slow, throttled)
/// still gets this stack's strays terminated.
#[test]
fn a_slow_endpoint_still_gets_strays_terminated() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let (db, dir) = setup(&ec2_pool(
        r#"{ type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    ));
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    let stack = stack_id(&db);
    {
        let mut st = ec2.state.lock().unwrap();
        st.delay_ms = 2200;
        st.instances.push(stray(901, &stack));
    }
    s.wait_for("the stray is terminated", 40.0, || ec2.live().is_empty());
    s.stop();
}

/// An endpoint that answers every call in ~2.2 s still gets a pool
/// with demand a machine.
#[test]
fn a_slow_endpoint_still_grows_a_pool() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    ec2.state.lock().unwrap().delay_ms = 2200;
    let (db, dir) = setup(&ec2_pool(
        r#"{ type = "m7i.large", wait = 0 }"#,
        r#""subnet-a""#,
    ));
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    s.wait_for("a machine is made", 40.0, || !ec2.live().is_empty());
    s.stop();
}
