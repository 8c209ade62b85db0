//! Spot in a pool's walk (issue 35, stage 1), against the fake EC2: a spot
//! step launches a one-time, terminating spot instance (with its max
//! price), recorded and shown as spot; each of EC2's spot refusals is "no
//! capacity here", so the walk moves on to the on-demand step of the same
//! type, the code in the event; the missing service-linked role is a
//! refusal that says what to do; `orca check` refuses a bad market.

use std::process::Command;

use crate::ec2::{KEY, SECRET, ec2_env, start, with_keys};
use crate::fake_aws::FakeEc2;
use crate::harness::*;

/// Pool `name` on EC2 with `types`, and a pipeline `job-<name>` on it.
fn pool(name: &str, types: &str) -> String {
    format!(
        r#"
[pools.{name}]
provider = "ec2"
ami = "ami-0123456789abcdef0"
types = [{types}]
locations = ["subnet-a"]
max_machines = 1

[pipelines.job-{name}]
command = "true"
placement = "worker:{name}"
"#
    )
}

#[test]
fn a_spot_step_launches_spot_with_its_max_price_and_is_shown_as_spot() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let (db, dir) = setup(&pool(
        "p",
        r#"{ type = "m7i.large", market = "spot", max_price = "0.05" }, { type = "m7i.large" }"#,
    ));
    db.queue("job-p");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("an instance is made", 40.0, || !ec2.live().is_empty());
    let i = &ec2.live()[0];
    let get = |k: &str| i.params.get(k).map(String::as_str);
    assert_eq!(get("InstanceMarketOptions.MarketType"), Some("spot"));
    assert_eq!(
        get("InstanceMarketOptions.SpotOptions.SpotInstanceType"),
        Some("one-time")
    );
    assert_eq!(
        get("InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"),
        Some("terminate")
    );
    assert_eq!(
        get("InstanceMarketOptions.SpotOptions.MaxPrice"),
        Some("0.05")
    );
    wait_until("its row is written", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines") == 1
    });
    let market: String = db.one("SELECT market FROM orca.pool_machines");
    assert_eq!(market, "spot");
    let made: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'machine made'");
    assert!(made.contains("type m7i.large, spot,"), "{made}");
    let text = db.ok(&["pools"]);
    assert!(text.contains("MARKET"), "{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("orca-p-"))
        .unwrap();
    assert!(line.contains(" spot "), "{text}");
    // The pool's last attempt names the market too.
    assert!(
        text.contains("(type m7i.large (spot), location subnet-a)"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&db.ok(&["pools", "--json"])).unwrap();
    assert_eq!(json[0]["machines"][0]["market"], "spot", "{json}");
    // The machine's login can't change its market (nor write the row).
    let role: String = db.one("SELECT role FROM orca.pool_machines");
    let mut c = db.client();
    for privilege in ["UPDATE", "INSERT"] {
        let may: bool = c
            .query_one(
                "SELECT has_column_privilege($1, 'orca.pool_machines', 'market', $2)",
                &[&role, &privilege],
            )
            .unwrap()
            .get(0);
        assert!(!may, "{role} may {privilege} its market");
    }
    s.stop();
}

#[test]
fn each_spot_refusal_walks_on_to_the_on_demand_step_of_the_same_type() {
    let codes = [
        "InsufficientInstanceCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "UnfulfillableCapacity",
        "InsufficientCapacity",
    ];
    let ec2 = FakeEc2::start(KEY, SECRET);
    let mut toml = String::new();
    for (n, code) in codes.iter().enumerate() {
        let ty = format!("m7i.{n}xlarge");
        ec2.state
            .lock()
            .unwrap()
            .spot_refused
            .push((ty.clone(), code.to_string()));
        toml.push_str(&pool(
            &format!("p{n}"),
            &format!(r#"{{ type = "{ty}", market = "spot" }}, {{ type = "{ty}" }}"#),
        ));
    }
    let (db, dir) = setup(&toml);
    for n in 0..codes.len() {
        db.queue(&format!("job-p{n}"));
    }
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("an on-demand instance in each pool", 60.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines") == codes.len() as i64
    });
    let live = ec2.live();
    assert_eq!(live.len(), codes.len());
    for i in &live {
        assert!(
            !i.params
                .keys()
                .any(|k| k.starts_with("InstanceMarketOptions")),
            "{:?}",
            i.params
        );
    }
    let spot_asked = ec2
        .state
        .lock()
        .unwrap()
        .launches
        .iter()
        .filter(|(_, m)| {
            m.get("InstanceMarketOptions.MarketType")
                .map(String::as_str)
                == Some("spot")
        })
        .count();
    assert!(spot_asked >= codes.len(), "{spot_asked} spot launches");
    let markets: Vec<String> = db
        .client()
        .query("SELECT market FROM orca.pool_machines", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(markets.iter().all(|m| m == "on-demand"), "{markets:?}");
    for (n, code) in codes.iter().enumerate() {
        let said: String = db.one(&format!(
            "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events
             WHERE kind = 'no capacity' AND why LIKE 'pool p{n}:%'"
        ));
        let ty = format!("m7i.{n}xlarge");
        assert!(
            said.contains(&format!("no capacity for type {ty} (spot)"))
                && said.contains(code)
                && said.contains(&format!("next, type {ty}")),
            "pool p{n}: {said}"
        );
    }
    s.stop();
}

#[test]
fn a_missing_spot_service_linked_role_says_what_to_do() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    ec2.state.lock().unwrap().spot_refused.push((
        "*".into(),
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted".into(),
    ));
    let (db, dir) = setup(&pool("p", r#"{ type = "m7i.large", market = "spot" }"#));
    db.queue("job-p");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    let fix = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com";
    wait_until("orca pools says what to do", 40.0, || {
        db.ok(&["pools"]).contains(fix)
    });
    let said: String =
        db.one("SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'machine not made'");
    assert!(
        said.contains("AuthFailure.ServiceLinkedRoleCreationNotPermitted") && said.contains(fix),
        "{said}"
    );
    // A refusal, not no capacity: nothing made, the scheduler goes on.
    assert_eq!(db.events_of_kind("no capacity"), 0);
    assert!(ec2.live().is_empty());
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "the scheduler exited"
    );
    s.stop();
}

#[test]
fn orca_check_refuses_a_bad_market_or_max_price() {
    let dir = TempDir::new();
    for (types, says) in [
        (
            r#"{ type = "m7i.large", market = "auction" }"#,
            "bad market 'auction'",
        ),
        (
            r#"{ type = "m7i.large", market = "spot", max_price = "-1" }"#,
            "bad max_price \"-1\"",
        ),
        (
            r#"{ type = "m7i.large", max_price = "0.05" }"#,
            "max_price is for market = \"spot\" only",
        ),
        (
            r#"{ type = "m7i.large", market = "spot" }, { type = "m7i.large", market = "spot" }"#,
            "type m7i.large (spot) is listed twice",
        ),
    ] {
        let path = dir.write("orca.toml", &pool("p", types));
        let out = Command::new(bin())
            .args(["check", "-c", &path])
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{types}: {err}");
        assert!(err.contains(says), "{types}: {err}");
    }
    let path = dir.write(
        "orca.toml",
        &pool(
            "p",
            r#"{ type = "m7i.large", market = "spot" }, { type = "m7i.large" }"#,
        ),
    );
    let out = Command::new(bin())
        .args(["check", "-c", &path])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// docs/aws.md's mixed pool, as written, against the fake EC2: its first
/// step launches spot at its max price.
#[test]
fn the_aws_page_s_mixed_pool_launches_its_spot_step() {
    let page =
        std::fs::read_to_string(format!("{}/docs/aws.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let block = page
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .find(|b| b.contains("market = \"spot\""))
        .expect("docs/aws.md's toml block of a spot pool");
    assert!(block.contains("market = \"spot\""), "{block}");
    let ec2 = FakeEc2::start(KEY, SECRET);
    let (db, dir) = setup(block);
    db.queue("build");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("an instance is made", 40.0, || !ec2.live().is_empty());
    let i = &ec2.live()[0];
    assert_eq!(i.type_, "c7i.xlarge");
    let get = |k: &str| i.params.get(k).map(String::as_str);
    assert_eq!(get("InstanceMarketOptions.MarketType"), Some("spot"));
    assert_eq!(
        get("InstanceMarketOptions.SpotOptions.MaxPrice"),
        Some("0.12")
    );
    wait_until("its row says spot", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE market = 'spot'") == 1
    });
    s.stop();
}

/// An `[ec2]` table's spot: the run's head and workers all launch spot, and
/// their rows say so; a spot refusal queues the run again with EC2's code
/// (a run does not fall back to on-demand).
#[test]
fn an_ec2_run_s_instances_are_all_spot_and_a_refusal_queues_it_again() {
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
market = "spot"
max_price = "0.5"

[pipelines.short]
command = "true"
placement = "ec2"

[pipelines.short.ec2]
provider = "ec2"
type = "r7i.large"
locations = ["subnet-a"]
ami = "ami-0123456789abcdef0"
market = "spot"
"#,
    );
    ec2.state
        .lock()
        .unwrap()
        .spot_refused
        .push(("r7i.large".into(), "MaxSpotInstanceCountExceeded".into()));
    db.queue("train");
    let short = db.queue("short");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("a head and a worker are made", 40.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.instances") == 2
    });
    let made: Vec<_> = ec2
        .live()
        .into_iter()
        .filter(|i| i.type_ == "m7i.large")
        .collect();
    assert_eq!(made.len(), 2);
    for i in &made {
        let get = |k: &str| i.params.get(k).map(String::as_str);
        assert_eq!(get("InstanceMarketOptions.MarketType"), Some("spot"));
        assert_eq!(
            get("InstanceMarketOptions.SpotOptions.MaxPrice"),
            Some("0.5")
        );
    }
    let markets: i64 = db.one("SELECT count(*) FROM orca.instances WHERE market = 'spot'");
    assert_eq!(markets, 2);
    let said: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'instance made'");
    assert!(said.contains("(spot)"), "{said}");
    wait_until(
        "the refused run is queued again with the code",
        40.0,
        || {
            db.one::<i64>(&format!(
                "SELECT count(*) FROM orca.events WHERE run = {short}
             AND why LIKE '%MaxSpotInstanceCountExceeded%'"
            )) > 0
        },
    );
    assert!(
        ec2.live().iter().all(|i| i.type_ != "r7i.large"),
        "no on-demand fallback for a run"
    );
    s.stop();
}
