//! The stored spec: what `orca register` writes of a pipeline
//! (`orca.pipelines.spec`) and of a pool (`orca.pools.spec`), serialized
//! with serde as JSON, and what the scheduler, a worker and an instance read
//! back. It is a format, not just types: other binary versions read it (an
//! older scheduler beside a newer one during a deploy, a worker on a
//! machine image baked earlier), and plpgsql and the SQL in `sql/` read
//! parts of it (`orca.finish_attempt` reads `retries`, `retry_delay` and
//! `alert`; `sql/ec2_runs_short.sql` reads `spec -> 'ec2' ->> 'workers'`;
//! an EC2 run's instances' kind is the md5 of `spec -> 'ec2'` as text).
//!
//! Invariants:
//! * It changes compatibly: a field is added with a default an older spec
//!   reads (`#[serde(default)]`), never renamed or retyped; the unit tests
//!   below pin the JSON form.
//! * What this binary registers passed [`crate::config::check`] (its
//!   bounds, no NUL): Postgres can store it. A reader still takes what an
//!   older binary registered (a schedule is read with
//!   `cron::parse_stored_schedule`), and one it can't read is skipped and
//!   said, never guessed at.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A command: a string for `/bin/sh -c`, or an argument vector.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum Command {
    /// Run by `/bin/sh -c`; a run's args become `$1`, `$2`, ...
    Shell(String),
    /// Executed as is; a run's args are appended.
    Argv(Vec<String>),
}

impl Command {
    /// The argument vector to execute, with a run's `args` added.
    pub fn argv(&self, args: &[String]) -> Vec<String> {
        match self {
            Command::Shell(s) => {
                let mut v = vec!["/bin/sh".into(), "-c".into(), s.clone(), "orca".into()];
                v.extend(args.iter().cloned());
                v
            }
            Command::Argv(a) => a.iter().chain(args).cloned().collect(),
        }
    }
}

/// Where a pipeline's runs start.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Placement {
    /// On the scheduler's own machine.
    Local,
    /// On a machine of the named worker pool.
    Worker(String),
    /// On EC2 machines of the run's own.
    Ec2,
}

impl Placement {
    /// Parses `local`, `worker:<pool>` or `ec2`.
    pub fn parse(s: &str) -> Option<Placement> {
        match s {
            "local" => Some(Placement::Local),
            "ec2" => Some(Placement::Ec2),
            _ => s
                .strip_prefix("worker:")
                .filter(|p| valid_name(p))
                .map(|p| Placement::Worker(p.to_string())),
        }
    }

    /// The text form, as stored in `orca.pipelines.placement`.
    pub fn as_text(&self) -> String {
        match self {
            Placement::Local => "local".into(),
            Placement::Worker(p) => format!("worker:{p}"),
            Placement::Ec2 => "ec2".into(),
        }
    }
}

/// One `[pipelines.NAME]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Pipeline {
    /// Its name (the table's key).
    pub name: String,
    /// What a run executes.
    pub command: Command,
    /// Where its runs start.
    pub placement: Placement,
    /// Runs running at once (fill runs not counted).
    pub max_runs: i32,
    /// Fill runs (`orca run --fill`) running at once, on top of
    /// `max_runs`; those beyond wait. Read by `sql/startable.sql` and
    /// `orca.worker_round` as `spec ->> 'max_fills'`, [`DEFAULT_MAX_FILLS`]
    /// for a spec stored before it existed.
    #[serde(default = "default_max_fills")]
    pub max_fills: i32,
    /// A cron expression, UTC: 5 fields, or 6 with seconds first.
    pub schedule: Option<String>,
    /// Failed attempts retried before the run fails for good.
    pub retries: i32,
    /// Seconds between a failure and its retry.
    pub retry_delay: f64,
    /// Seconds a run may take before it is killed and failed as timed out.
    pub timeout: Option<f64>,
    /// Environment a run gets beside `ORCA_RUN_ID`, `ORCA_RUN_START`, `ORCA_PIPELINE`.
    pub env: BTreeMap<String, String>,
    /// A webhook URL that gets a JSON POST when a run fails for good.
    pub alert: Option<String>,
    /// A command whose exit 0 queues a run.
    pub sensor: Option<Command>,
    /// Seconds between sensor runs (also the sensor's time limit).
    pub sensor_every: f64,
    /// `placement = "ec2"`: its instances.
    #[serde(default)]
    pub ec2: Option<Ec2Spec>,
    /// What an attempt whose supervisor was lost comes to (also stored in
    /// `orca.pipelines.on_lost`, which migration 22's trigger reads).
    #[serde(default)]
    pub on_lost: OnLost,
}

/// A pipeline's `on_lost`: what becomes of an attempt whose supervisor was
/// lost or stopped while its command may have run (a stale scheduler's
/// sweep, a lost or removed machine, a lost EC2 head, a stop that hands it
/// back).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnLost {
    /// Queued again (a command may run twice).
    #[default]
    Retry,
    /// Failed with its alert, never run again without a person (`orca
    /// retry`): for pipelines that must not run twice.
    Fail,
}

impl OnLost {
    /// Parses `retry` or `fail`.
    pub fn parse(s: &str) -> Option<OnLost> {
        match s {
            "retry" => Some(OnLost::Retry),
            "fail" => Some(OnLost::Fail),
            _ => None,
        }
    }

    /// The text form, as stored in `orca.pipelines.on_lost`.
    pub fn as_text(self) -> &'static str {
        match self {
            OnLost::Retry => "retry",
            OnLost::Fail => "fail",
        }
    }
}

/// Where a pool's machines come from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub enum Provider {
    /// Processes on the scheduler's host (the demo and the tests).
    #[default]
    Local,
    /// EC2 instances.
    Ec2,
}

/// How a machine is bought: on-demand, or spot (EC2's spare capacity,
/// cheaper, which EC2 may refuse to launch or take back).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Market {
    /// Bought on demand (the default, and all a spec stored before spot
    /// existed holds).
    #[default]
    #[serde(rename = "on-demand")]
    OnDemand,
    /// A one-time spot instance, terminated when EC2 takes it back.
    #[serde(rename = "spot")]
    Spot,
}

impl Market {
    /// Parses `on-demand` or `spot`.
    pub fn parse(s: &str) -> Option<Market> {
        match s {
            "on-demand" => Some(Market::OnDemand),
            "spot" => Some(Market::Spot),
            _ => None,
        }
    }

    /// The text form, as stored (`orca.machines.market`) and shown.
    pub fn as_text(self) -> &'static str {
        match self {
            Market::OnDemand => "on-demand",
            Market::Spot => "spot",
        }
    }

    /// Whether it is the default (not stored in a spec, so an on-demand
    /// entry keeps the form, and md5, it had before spot existed).
    pub fn is_on_demand(&self) -> bool {
        *self == Market::OnDemand
    }
}

/// One entry of a pool's `types`, a step of its walk: an instance type
/// and its market (the same type may be a step twice, spot then
/// on-demand), and how long to keep trying it when no location has it
/// before moving to the next.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PoolType {
    /// The provider's name for it (`c7g.large`; anything for `local`).
    pub name: String,
    /// Seconds to keep trying it (ignored for the last type).
    pub wait: f64,
    /// How it is bought (not stored when on-demand).
    #[serde(default, skip_serializing_if = "Market::is_on_demand")]
    pub market: Market,
    /// Spot only: the most paid an hour, a decimal string (`"0.05"`);
    /// none: EC2's on-demand price. Not stored when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<String>,
}

impl PoolType {
    /// An on-demand step of type `name`, kept `wait` seconds.
    #[cfg(test)]
    pub fn on_demand(name: &str, wait: f64) -> PoolType {
        PoolType {
            name: name.to_string(),
            wait,
            market: Market::OnDemand,
            max_price: None,
        }
    }

    /// The step as logs and events name it: `c7g.large`, `c7g.large (spot)`.
    pub fn called(&self) -> String {
        match self.market {
            Market::OnDemand => self.name.clone(),
            Market::Spot => format!("{} (spot)", self.name),
        }
    }
}

/// Where machines come from and how they are made: the settings a pool and
/// an EC2 run (`[pipelines.NAME.ec2]`) share (stored flat in their specs).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct MachineSettings {
    /// Where the machines come from.
    pub provider: Provider,
    /// Locations (subnets, zones; for `local`, names), in order of preference.
    pub locations: Vec<String>,
    /// `local`: machines a location (or `TYPE@LOCATION`) has room for.
    pub capacity: BTreeMap<String, i32>,
    /// `ec2`: the AMI (`ami = "ami-..."`), launched for a type only if it
    /// is of one of the type's architectures.
    pub ami: Option<String>,
    /// `ec2`: one AMI per architecture (`ami = { x86_64 = "ami-...", arm64
    /// = "ami-..." }`), by EC2's names of them
    /// ([`crate::config::arch::AMI_KEYS`]); empty with a single `ami`.
    /// Not stored when empty, so a spec with one AMI keeps its form (and an
    /// EC2 run's instances' kind, the md5 of its `ec2` table, stays).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub amis: BTreeMap<String, String>,
    /// `ec2`: the instance profile (name or ARN).
    pub instance_profile: Option<String>,
    /// `ec2`: security group ids.
    pub security_groups: Vec<String>,
    /// `ec2`: the region.
    pub region: Option<String>,
}

/// `[pipelines.NAME.ec2]`: an EC2 run's instances of its own.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Ec2Spec {
    /// Where its instances come from and how they are made.
    #[serde(flatten)]
    pub machines: MachineSettings,
    /// The instance type of the head and its workers.
    #[serde(rename = "type")]
    pub type_: String,
    /// Instances beside the head.
    pub workers: i32,
    /// The cluster engine's head service, run beside the driver.
    pub head_service: Option<Command>,
    /// The engine's worker service, run on each worker.
    pub worker_service: Option<Command>,
    /// What an instance runs to take new code (on a run's first start).
    pub update: Option<Command>,
    /// How its instances are bought, all of them alike (not stored when
    /// on-demand: the kind, the md5 of this table, stays).
    #[serde(default, skip_serializing_if = "Market::is_on_demand")]
    pub market: Market,
    /// Spot only: the most paid an hour (see [`PoolType::max_price`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<String>,
}

/// One `[pools.NAME]`: machines that run `worker:NAME` pipelines.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Pool {
    /// Its name (the table's key).
    pub name: String,
    /// Instance types, in order of preference.
    pub types: Vec<PoolType>,
    /// Machines at most.
    pub max_machines: i32,
    /// Seconds a machine may run nothing before it is removed (with no demand).
    pub idle_seconds: f64,
    /// Runs a worker takes at once.
    pub slots: i32,
    /// The worker image, whose architectures decide which types fit.
    pub image: Option<String>,
    /// Where its machines come from and how they are made.
    #[serde(flatten)]
    pub machines: MachineSettings,
}

/// A pipeline's `max_fills` when `orca.toml` doesn't say (and in a spec
/// stored before the field existed): 10 fill runs at once, a backfill's
/// usual width, so that one `orca run --fill` loop can't start hundreds of
/// runs at once while one run or ten backfill as quickly as before.
pub const DEFAULT_MAX_FILLS: i32 = 10;

fn default_max_fills() -> i32 {
    DEFAULT_MAX_FILLS
}

/// Whether `s` is a usable pipeline or pool name.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pipeline() -> Pipeline {
        Pipeline {
            name: "nightly".into(),
            command: Command::Shell("python etl.py \"$1\"".into()),
            placement: Placement::Worker("gpu".into()),
            max_runs: 2,
            max_fills: 3,
            schedule: Some("0 3 * * *".into()),
            retries: 1,
            retry_delay: 60.0,
            timeout: Some(3600.0),
            env: BTreeMap::from([("A".to_string(), "b".to_string())]),
            alert: None,
            sensor: Some(Command::Argv(vec!["test".into(), "-f".into(), "/x".into()])),
            sensor_every: 5.0,
            ec2: None,
            on_lost: OnLost::Fail,
        }
    }

    #[test]
    fn a_pipeline_is_stored_in_this_form() {
        assert_eq!(
            serde_json::to_value(pipeline()).unwrap(),
            json!({
                "name": "nightly",
                "command": "python etl.py \"$1\"",
                "placement": { "Worker": "gpu" },
                "max_runs": 2,
                "max_fills": 3,
                "schedule": "0 3 * * *",
                "retries": 1,
                "retry_delay": 60.0,
                "timeout": 3600.0,
                "env": { "A": "b" },
                "alert": null,
                "sensor": ["test", "-f", "/x"],
                "sensor_every": 5.0,
                "ec2": null,
                "on_lost": "fail",
            })
        );
        // `sql/startable.sql` and `orca.worker_round` read max_fills.
        assert_eq!(
            serde_json::to_value(pipeline()).unwrap()["max_fills"],
            json!(3)
        );
        // `orca.finish_attempt` (plpgsql) reads these three by name.
        let stored = serde_json::to_value(pipeline()).unwrap();
        assert_eq!(stored["retries"], json!(1));
        assert_eq!(stored["retry_delay"], json!(60.0));
        assert_eq!(stored["alert"], json!(null));
        for (placement, stored) in [
            (Placement::Local, json!("Local")),
            (Placement::Ec2, json!("Ec2")),
        ] {
            assert_eq!(serde_json::to_value(placement).unwrap(), stored);
        }
    }

    #[test]
    fn on_lost_is_retry_when_a_stored_spec_has_none() {
        let mut old = serde_json::to_value(pipeline()).unwrap();
        old.as_object_mut().unwrap().remove("on_lost");
        let read: Pipeline = serde_json::from_value(old).unwrap();
        assert_eq!(read.on_lost, OnLost::Retry);
        for t in ["retry", "fail"] {
            assert_eq!(OnLost::parse(t).unwrap().as_text(), t);
        }
        assert_eq!(OnLost::parse("Fail"), None);
    }

    #[test]
    fn an_ec2_table_is_stored_flat_with_its_machine_settings() {
        let e = Ec2Spec {
            machines: MachineSettings {
                provider: Provider::Ec2,
                locations: vec!["subnet-a".into()],
                capacity: BTreeMap::new(),
                ami: Some("ami-1".into()),
                amis: BTreeMap::new(),
                instance_profile: None,
                security_groups: vec!["sg-1".into()],
                region: Some("eu-west-1".into()),
            },
            type_: "g6.xlarge".into(),
            workers: 2,
            head_service: Some(Command::Shell("ray start --head".into())),
            worker_service: None,
            update: None,
            market: Market::OnDemand,
            max_price: None,
        };
        // `sql/ec2_runs_short.sql` reads `spec -> 'ec2' ->> 'workers'`.
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({
                "provider": "Ec2",
                "locations": ["subnet-a"],
                "capacity": {},
                "ami": "ami-1",
                "instance_profile": null,
                "security_groups": ["sg-1"],
                "region": "eu-west-1",
                "type": "g6.xlarge",
                "workers": 2,
                "head_service": "ray start --head",
                "worker_service": null,
                "update": null,
            })
        );
        let back: Ec2Spec = serde_json::from_value(serde_json::to_value(&e).unwrap()).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn an_ami_per_architecture_is_stored_as_amis_and_one_ami_as_before() {
        let m = MachineSettings {
            provider: Provider::Ec2,
            amis: BTreeMap::from([
                ("x86_64".to_string(), "ami-x".to_string()),
                ("arm64".to_string(), "ami-a".to_string()),
            ]),
            ..MachineSettings::default()
        };
        let stored = serde_json::to_value(&m).unwrap();
        assert_eq!(
            stored["amis"],
            json!({ "x86_64": "ami-x", "arm64": "ami-a" })
        );
        assert_eq!(stored["ami"], json!(null));
        let back: MachineSettings = serde_json::from_value(stored).unwrap();
        assert_eq!(back, m);
        // One AMI: no `amis` key, the form (and md5) of before.
        let one = MachineSettings {
            ami: Some("ami-1".into()),
            ..MachineSettings::default()
        };
        assert!(serde_json::to_value(&one).unwrap().get("amis").is_none());
    }

    #[test]
    fn a_pool_is_stored_in_this_form() {
        let pool = Pool {
            name: "builders".into(),
            types: vec![PoolType::on_demand("big", 600.0)],
            max_machines: 4,
            idle_seconds: 300.0,
            slots: 2,
            image: None,
            machines: MachineSettings {
                locations: vec!["rack-a".into()],
                capacity: BTreeMap::from([("rack-a".to_string(), 2)]),
                ..MachineSettings::default()
            },
        };
        assert_eq!(
            serde_json::to_value(&pool).unwrap(),
            json!({
                "name": "builders",
                "types": [{ "name": "big", "wait": 600.0 }],
                "max_machines": 4,
                "idle_seconds": 300.0,
                "slots": 2,
                "image": null,
                "provider": "Local",
                "locations": ["rack-a"],
                "capacity": { "rack-a": 2 },
                "ami": null,
                "instance_profile": null,
                "security_groups": [],
                "region": null,
            })
        );
    }

    #[test]
    fn a_spot_step_stores_its_market_and_an_on_demand_one_its_old_form() {
        let spot = PoolType {
            market: Market::Spot,
            max_price: Some("0.05".into()),
            ..PoolType::on_demand("c7g.large", 0.0)
        };
        assert_eq!(
            serde_json::to_value(&spot).unwrap(),
            json!({ "name": "c7g.large", "wait": 0.0, "market": "spot", "max_price": "0.05" })
        );
        let back: PoolType = serde_json::from_value(serde_json::to_value(&spot).unwrap()).unwrap();
        assert_eq!(back, spot);
        // On-demand: the form (and md5) of before spot existed.
        let od = PoolType::on_demand("c7g.large", 60.0);
        assert_eq!(
            serde_json::to_value(&od).unwrap(),
            json!({ "name": "c7g.large", "wait": 60.0 })
        );
        let old: PoolType = serde_json::from_value(json!({ "name": "t", "wait": 1.0 })).unwrap();
        assert_eq!(old.market, Market::OnDemand);
        assert_eq!(spot.called(), "c7g.large (spot)");
        assert_eq!(od.called(), "c7g.large");
        for t in ["on-demand", "spot"] {
            assert_eq!(Market::parse(t).unwrap().as_text(), t);
        }
        assert_eq!(Market::parse("Spot"), None);
    }

    #[test]
    fn a_spec_stored_before_ec2_and_machine_settings_existed_still_reads() {
        let mut old = serde_json::to_value(pipeline()).unwrap();
        old.as_object_mut().unwrap().remove("ec2");
        old.as_object_mut().unwrap().remove("max_fills");
        let p: Pipeline = serde_json::from_value(old).unwrap();
        assert_eq!(p.max_fills, DEFAULT_MAX_FILLS, "as the SQL's coalesce");
        assert_eq!(
            p,
            Pipeline {
                max_fills: DEFAULT_MAX_FILLS,
                ..pipeline()
            }
        );
        let pool: Pool = serde_json::from_value(json!({
            "name": "p",
            "types": [{ "name": "t", "wait": 0.0 }],
            "max_machines": 1,
            "idle_seconds": 300.0,
            "slots": 1,
            "image": null,
        }))
        .unwrap();
        assert_eq!(pool.machines, MachineSettings::default());
    }

    #[test]
    fn a_spec_stored_by_a_newer_binary_still_reads() {
        // A newer version may add fields: this one ignores what it doesn't
        // know, in the pipeline, its ec2 table and a pool.
        let mut newer = serde_json::to_value(pipeline()).unwrap();
        newer["priority"] = json!(7);
        let p: Pipeline = serde_json::from_value(newer).unwrap();
        assert_eq!(p, pipeline());
        let pool: Pool = serde_json::from_value(json!({
            "name": "p",
            "types": [{ "name": "t", "wait": 0.0, "spot": true }],
            "max_machines": 1,
            "idle_seconds": 300.0,
            "slots": 1,
            "image": null,
            "zones": ["a"],
        }))
        .unwrap();
        assert_eq!(pool.types[0].name, "t");
    }

    #[test]
    fn placements_read_and_write_their_stored_text() {
        for text in ["local", "ec2", "worker:gpu", "worker:a.b-c_1"] {
            assert_eq!(Placement::parse(text).unwrap().as_text(), text);
        }
        for bad in ["", "mars", "worker:", "worker:a b", "Local"] {
            assert_eq!(Placement::parse(bad), None, "{bad}");
        }
    }
}
