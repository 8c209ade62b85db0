//! Pools and EC2 runs that walk both architectures (issue 34), with a real
//! scheduler against the EC2 double (`fake_aws`), which refuses, as EC2
//! does, a RunInstances of a type with an AMI of another architecture: a
//! mixed pool takes the arm64 AMI for a Graviton type and the x86_64 AMI
//! for an x86 type, falls back to the x86 type when the Graviton type has
//! no capacity, and skips (with an event) a type no AMI fits.

use crate::ec2::{KEY, SECRET, ec2_env, start, with_keys};
use crate::fake_aws::FakeEc2;
use crate::harness::*;

/// The arm64 and the x86_64 AMI (the double tells an id with `arm` in it
/// arm64, any other x86_64).
const ARM: &str = "ami-0arm64graviton";
const X86: &str = "ami-0123456789abcdef0";

/// A pool `p` on EC2 with `ami` (a TOML value) and `types`, and a
/// pipeline of it.
fn pool(ami: &str, types: &str, max: i32) -> String {
    format!(
        r#"
[pools.p]
provider = "ec2"
ami = {ami}
types = [{types}]
locations = ["subnet-a"]
max_machines = {max}

[pipelines.job]
command = "true"
placement = "worker:p"
max_runs = 2
"#
    )
}

fn mixed() -> String {
    format!(r#"{{ x86_64 = "{X86}", arm64 = "{ARM}" }}"#)
}

/// The AMI each live instance of type `type_` was launched from.
fn amis_of(ec2: &FakeEc2, type_: &str) -> Vec<String> {
    ec2.live()
        .iter()
        .filter(|i| i.type_ == type_)
        .map(|i| i.params.get("ImageId").cloned().unwrap_or_default())
        .collect()
}

/// No RunInstances of a type with an AMI of another architecture was sent.
fn none_refused(ec2: &FakeEc2) {
    assert_eq!(ec2.state.lock().unwrap().arch_refused, 0);
}

#[test]
fn a_mixed_pool_takes_each_types_ami_and_falls_back_to_x86_without_graviton_capacity() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let types = r#"{ type = "m7g.large", wait = 1 }, { type = "t3.micro", wait = 0 }"#;
    let file = pool(&mixed(), types, 2);
    let (db, dir) = setup(&file);
    db.queue("job");
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    // Graviton first, from the arm64 AMI.
    s.wait_for("a Graviton machine is made", 40.0, || {
        !ec2.live().is_empty()
    });
    assert_eq!(amis_of(&ec2, "m7g.large"), [ARM]);
    // Graviton has no capacity now; the machine's worker is seen (as its
    // boot would make it), so the pool makes one more for the second run:
    // after m7g's wait of 1 s, the x86 type from the x86_64 AMI.
    ec2.state
        .lock()
        .unwrap()
        .no_capacity
        .push(("m7g.large".into(), "*".into()));
    db.client()
        .execute("UPDATE orca.pool_machines SET seen_at = now()", &[])
        .unwrap();
    s.wait_for("an x86 machine is made", 40.0, || ec2.live().len() == 2);
    assert_eq!(amis_of(&ec2, "m7g.large"), [ARM]);
    assert_eq!(amis_of(&ec2, "t3.micro"), [X86]);
    let said: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'no capacity'",
    );
    assert!(said.contains("no capacity for type m7g.large"), "{said}");
    // Each machine's architecture: stored, and shown by orca pools.
    let arches: String =
        db.one("SELECT string_agg(type || '=' || arch, ' ' ORDER BY id) FROM orca.pool_machines");
    assert_eq!(arches, "m7g.large=arm64 t3.micro=x86_64");
    let shown = db.ok(&["pools"]);
    assert!(shown.contains(" ARCH "), "{shown}");
    let line = |t: &str| {
        shown
            .lines()
            .find(|l| l.starts_with("    orca-p-") && l.contains(t))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("m7g.large").contains(" arm64 "), "{shown}");
    assert!(line("t3.micro").contains(" x86_64 "), "{shown}");
    let json: serde_json::Value = serde_json::from_str(&db.ok(&["pools", "--json"])).unwrap();
    let got: Vec<(String, String)> = json[0]["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap().to_string(),
                m["arch"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("m7g.large".to_string(), "arm64".to_string()),
            ("t3.micro".to_string(), "x86_64".to_string())
        ]
    );
    // Each AMI's architecture was asked once (cached), not per make.
    assert!(
        ec2.count("DescribeImages") <= 2,
        "{}",
        ec2.count("DescribeImages")
    );
    none_refused(&ec2);
    s.stop();
}

#[test]
fn a_type_no_ami_fits_is_skipped_with_an_event_and_never_launched() {
    // The issue's case: an x86_64 AMI only, a Graviton type first.
    let ec2 = FakeEc2::start(KEY, SECRET);
    let file = pool(
        &format!("\"{X86}\""),
        r#"{ type = "m7g.large", wait = 600 }, { type = "t3.micro", wait = 0 }"#,
        1,
    );
    let (db, dir) = setup(&file);
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    s.wait_for("an instance is made", 40.0, || !ec2.live().is_empty());
    assert_eq!(amis_of(&ec2, "t3.micro"), [X86]);
    let said: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'type skipped'",
    );
    assert!(
        said.contains(&format!(
            "pool p: type m7g.large skipped: no AMI fits it (it runs arm64; {X86} is x86_64)"
        )),
        "{said}"
    );
    // Not even tried: every RunInstances the double saw was a t3.micro.
    let st = ec2.state.lock().unwrap();
    assert!(st.instances.iter().all(|i| i.type_ == "t3.micro"));
    assert_eq!(st.arch_refused, 0);
    drop(st);
    s.stop();
}

#[test]
fn with_no_type_fitting_the_pool_says_so_and_launches_nothing() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    // Pool p: an x86_64 AMI, Graviton types only. Pool q: an AMI given for
    // arm64 that is x86_64 (DescribeImages says so): never launched, not
    // even for the x86 type, which no AMI fits then.
    let file = format!(
        "{}\n[pools.q]\nprovider = \"ec2\"\nami = {{ arm64 = \"{X86}\" }}\n\
         types = [{{ type = \"c7g.large\", wait = 0 }}, {{ type = \"m7i.large\", wait = 0 }}]\n\
         locations = [\"subnet-a\"]\n\n[pipelines.qjob]\ncommand = \"true\"\nplacement = \"worker:q\"\n",
        pool(
            &format!("\"{X86}\""),
            r#"{ type = "m7g.large", wait = 0 }, { type = "c7g.xlarge", wait = 0 }"#,
            1,
        )
    );
    let (db, dir) = setup(&file);
    db.queue("job");
    db.queue("qjob");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    let status = |pool: &str| -> String {
        db.one(&format!(
            "SELECT status FROM orca.pools WHERE name = '{pool}'"
        ))
    };
    s.wait_for("both pools say no type fits", 40.0, || {
        status("p").starts_with("no type fits") && status("q").starts_with("no type fits")
    });
    let p = status("p");
    assert!(
        p.contains("type m7g.large skipped") && p.contains("type c7g.xlarge skipped"),
        "{p}"
    );
    let q = status("q");
    assert!(
        q.contains(&format!(
            "{X86} (given for arm64) is x86_64: never launched"
        )),
        "{q}"
    );
    assert!(q.contains("type m7i.large skipped"), "{q}");
    assert!(db.ok(&["pools"]).contains("no type fits"));
    let events: i64 = db.one("SELECT count(*) FROM orca.events WHERE kind = 'type skipped'");
    assert!(events >= 4, "{}", db.ok(&["events"]));
    assert_eq!(ec2.count("RunInstances"), 0);
    none_refused(&ec2);
    s.stop();
}

/// An `ec2` pipeline's instances of type `type_` with `ami`.
fn ec2_run(type_: &str, ami: &str) -> String {
    format!(
        r#"
[pipelines.train]
command = "true"
placement = "ec2"

[pipelines.train.ec2]
provider = "ec2"
type = "{type_}"
locations = ["subnet-a"]
ami = {ami}
workers = 1
"#
    )
}

#[test]
fn an_ec2_run_takes_the_ami_of_its_types_architecture() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let (db, dir) = setup(&ec2_run("c7g.large", &mixed()));
    db.queue("train");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    s.wait_for("its head and worker are made", 40.0, || {
        ec2.live().len() == 2
    });
    assert_eq!(amis_of(&ec2, "c7g.large"), [ARM, ARM]);
    none_refused(&ec2);
    s.stop();
}

#[test]
fn an_ec2_run_whose_type_no_ami_fits_is_queued_again_not_lost() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let (db, dir) = setup(&ec2_run("c7g.large", &format!("{{ x86_64 = \"{X86}\" }}")));
    let run = db.queue("train");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    let said = || -> String {
        db.one(&format!(
            "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE run = {run}"
        ))
    };
    s.wait_for("the run is queued again saying why", 40.0, || {
        said().contains("type c7g.large skipped: no AMI fits it (it runs arm64")
    });
    // Not lost: queued again, no attempt failed, nothing launched.
    wait_until("the run is queued", 20.0, || {
        matches!(db.state(run).as_str(), "queued" | "running")
    });
    assert_eq!(ec2.count("RunInstances"), 0);
    let failed: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.events WHERE run = {run} AND kind = 'failed'"
    ));
    assert_eq!(failed, 0, "{}", said());
    none_refused(&ec2);
    s.stop();
}

/// docs/aws.md's "A pool that walks Graviton first": its toml block, as
/// written, and a double that knows its arm64 AMI (whose id doesn't say
/// so) as arm64.
fn graviton_page(ec2: &FakeEc2) -> String {
    let page = crate::setup::repo_file("docs/aws.md");
    let found: Vec<String> = crate::setup::blocks(&page, "toml")
        .into_iter()
        .filter(|b| b.contains("[pools.batch]"))
        .collect();
    assert_eq!(found.len(), 1, "docs/aws.md: one toml block of pool batch");
    ec2.state
        .lock()
        .unwrap()
        .images
        .insert(PAGE_ARM.into(), "arm64".into());
    found.into_iter().next().unwrap()
}

/// The page's AMIs.
const PAGE_ARM: &str = "ami-0fedcba9876543210";
const PAGE_X86: &str = "ami-0123456789abcdef0";

#[test]
fn the_aws_page_s_graviton_pool_makes_graviton_from_the_arm64_ami() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let file = graviton_page(&ec2);
    let (db, dir) = setup(&file);
    db.queue("nightly");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    s.wait_for("a machine is made", 40.0, || !ec2.live().is_empty());
    assert_eq!(amis_of(&ec2, "c7g.xlarge"), [PAGE_ARM]);
    assert_eq!(ec2.live().len(), 1);
    none_refused(&ec2);
    s.stop();
}

#[test]
fn the_aws_page_s_graviton_pool_falls_back_to_x86_from_the_x86_64_ami() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    // The page's file with c7g's wait of 300 s cut to 1 s (the one change),
    // and no Graviton capacity in any location.
    let page = graviton_page(&ec2);
    let file = page.replace(
        r#"{ type = "c7g.xlarge", wait = 300 }"#,
        r#"{ type = "c7g.xlarge", wait = 1 }"#,
    );
    assert_ne!(file, page, "the page's c7g wait");
    ec2.state
        .lock()
        .unwrap()
        .no_capacity
        .push(("c7g.xlarge".into(), "*".into()));
    let (db, dir) = setup(&file);
    db.queue("nightly");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    s.wait_for("a machine is made", 40.0, || !ec2.live().is_empty());
    assert_eq!(amis_of(&ec2, "c7i.xlarge"), [PAGE_X86]);
    assert_eq!(ec2.live().len(), 1);
    let said: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'no capacity'",
    );
    assert!(said.contains("no capacity for type c7g.xlarge"), "{said}");
    none_refused(&ec2);
    s.stop();
}

/// The double's refusal is real, so `none_refused` can fail: an AMI that
/// DescribeImages said was arm64 (cached by the scheduler) is x86_64 when
/// the next Graviton machine is launched from it; the double refuses that
/// launch with InvalidParameterValue, counts it, and orca shows the
/// refusal and makes nothing.
#[test]
fn the_double_refuses_and_counts_a_launch_of_another_architecture() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    let file = pool(
        &format!("\"{ARM}\""),
        r#"{ type = "m7g.large", wait = 0 }"#,
        2,
    );
    let (db, dir) = setup(&file);
    db.queue("job");
    db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    s.wait_for("a Graviton machine is made", 40.0, || {
        !ec2.live().is_empty()
    });
    ec2.state
        .lock()
        .unwrap()
        .images
        .insert(ARM.into(), "x86_64".into());
    db.client()
        .execute("UPDATE orca.pool_machines SET seen_at = now()", &[])
        .unwrap();
    s.wait_for("the next launch is refused", 40.0, || {
        ec2.state.lock().unwrap().arch_refused > 0
    });
    wait_until("orca says it was refused", 20.0, || {
        let said: String = db.one(
            "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'machine not made'",
        );
        said.contains("InvalidParameterValue")
    });
    assert_eq!(ec2.live().len(), 1);
    s.stop();
}
