//! The workload: pipelines of every placement (local, a worker pool on the
//! local provider, `ec2` on the local provider with a warm pool), each with
//! `max_runs` > 1 or a schedule, retries and timeouts, and one of each
//! placement with `on_lost = "fail"` (`*_once`); their command, which
//! writes the ledger; and the thread that queues runs (fills among them)
//! and cancels a few, throughout.
//!
//! A workload is a [`Workload`]: its part of `orca.toml` and the pipelines
//! runs are queued for. A later one (a thousand-machine churn against a
//! fake EC2) adds its own part and pipelines; the ledger, the faults and
//! the checker are the same for every workload.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::harness::*;
use crate::rng::Rng;

/// A pipeline runs are queued for, and how often (relative weight).
pub struct Queued {
    /// Its name.
    pub name: &'static str,
    /// How often it is picked.
    pub weight: u32,
}

/// One kind of work the chaos run drives.
pub trait Workload {
    /// Its part of `orca.toml`. `cmd` is the command line that runs the
    /// ledger-writing script with the pipeline's timeout as its argument
    /// (`{cmd} 5`); `env` the pipeline `env` every pipeline must carry.
    fn toml(&self, cmd: &str, env: &str) -> String;
    /// Its pipelines the queuer picks from.
    fn queued(&self) -> Vec<Queued>;
    /// Its part of the file once faults stop: what fires by itself (a
    /// schedule) no longer does, so that the queue can drain.
    fn settled_toml(&self, cmd: &str, env: &str) -> String {
        self.toml(cmd, env)
    }
    /// Its part of the file with every `ec2`-placed pipeline left out (the
    /// last ones retired mid-flight: [`crate::faults::Fault::RetireEc2`]).
    fn without_ec2_toml(&self, cmd: &str, env: &str) -> String {
        self.toml(cmd, env)
    }
}

/// Whether pipeline `name` is one of the workload's `on_lost = "fail"`
/// ones (named `*_once`, no retries): none of its runs may begin two
/// attempts, whatever the faults.
pub fn runs_once(name: &str) -> bool {
    name.ends_with("_once")
}

/// Local, pool and EC2 pipelines, and one on a schedule.
pub struct Mixed;

impl Mixed {
    fn file(&self, cmd: &str, env: &str, schedule: bool, ec2: bool) -> String {
        let schedule = if schedule {
            "schedule = \"*/5 * * * * *\"\n"
        } else {
            ""
        };
        let mut file = self.local_and_pool(cmd, env, schedule);
        if ec2 {
            file.push_str(&self.ec2(cmd, env));
        }
        file
    }

    /// The local and pool pipelines, and the pool.
    fn local_and_pool(&self, cmd: &str, env: &str, schedule: &str) -> String {
        format!(
            r#"
[pools.wp]
provider = "local"
types = [{{ type = "small", wait = 0 }}]
locations = ["here"]
max_machines = 3
idle_seconds = 4
slots = 2

[pipelines.loc_a]
command = "{cmd} 5"
max_runs = 2
retries = 2
retry_delay = 0.5
timeout = 5
env = {env}

[pipelines.loc_b]
command = "{cmd} 4"
max_runs = 3
retries = 1
retry_delay = 1
timeout = 4
env = {env}

[pipelines.loc_sched]
command = "{cmd} 4"
max_runs = 1
timeout = 4
{schedule}env = {env}

[pipelines.pool_a]
command = "{cmd} 5"
placement = "worker:wp"
max_runs = 3
retries = 2
retry_delay = 0.5
timeout = 5
env = {env}

[pipelines.pool_b]
command = "{cmd} 4"
placement = "worker:wp"
max_runs = 2
retries = 1
retry_delay = 1
timeout = 4
env = {env}

[pipelines.loc_once]
command = "{cmd} 4"
max_runs = 2
timeout = 4
on_lost = "fail"
env = {env}

[pipelines.pool_once]
command = "{cmd} 4"
placement = "worker:wp"
max_runs = 2
timeout = 4
on_lost = "fail"
env = {env}
"#
        )
    }

    /// The EC2 pipelines (retired for a while by [`crate::faults::Fault::RetireEc2`]).
    fn ec2(&self, cmd: &str, env: &str) -> String {
        format!(
            r#"
[pipelines.ec2_a]
command = "{cmd} 6"
placement = "ec2"
max_runs = 2
retries = 1
retry_delay = 0.5
timeout = 6
env = {env}

[pipelines.ec2_a.ec2]
provider = "local"
type = "small"
locations = ["here"]
workers = 1
worker_service = "exec sleep 600"

[pipelines.ec2_b]
command = "{cmd} 6"
placement = "ec2"
max_runs = 2
retries = 1
retry_delay = 1
timeout = 6
env = {env}

[pipelines.ec2_b.ec2]
provider = "local"
type = "small"
locations = ["here"]
workers = 1
worker_service = "exec sleep 600"

[pipelines.ec2_once]
command = "{cmd} 6"
placement = "ec2"
max_runs = 2
timeout = 6
on_lost = "fail"
env = {env}

[pipelines.ec2_once.ec2]
provider = "local"
type = "small"
locations = ["here"]
workers = 0
"#
        )
    }
}

impl Workload for Mixed {
    fn toml(&self, cmd: &str, env: &str) -> String {
        self.file(cmd, env, true, true)
    }

    fn settled_toml(&self, cmd: &str, env: &str) -> String {
        self.file(cmd, env, false, true)
    }

    fn without_ec2_toml(&self, cmd: &str, env: &str) -> String {
        self.file(cmd, env, true, false)
    }

    fn queued(&self) -> Vec<Queued> {
        [
            ("loc_a", 3),
            ("loc_b", 3),
            ("pool_a", 3),
            ("pool_b", 2),
            ("ec2_a", 2),
            ("ec2_b", 1),
            ("loc_once", 1),
            ("pool_once", 1),
            ("ec2_once", 1),
        ]
        .into_iter()
        .map(|(name, weight)| Queued { name, weight })
        .collect()
    }
}

/// A worker pool on the EC2 provider (the fake EC2 whose instances boot
/// here: `ec2fleet.rs`), walking two types and two locations.
pub struct Ec2Pool;

impl Workload for Ec2Pool {
    fn toml(&self, cmd: &str, env: &str) -> String {
        format!(
            r#"
[pools.ep]
provider = "ec2"
ami = "ami-0123456789abcdef0"
region = "eu-west-1"
types = [{{ type = "m7i.large", wait = 0 }}, {{ type = "m6i.large", wait = 0 }}]
locations = ["subnet-a", "subnet-b"]
max_machines = 2
idle_seconds = 4
slots = 2

[pipelines.epool_a]
command = "{cmd} 5"
placement = "worker:ep"
max_runs = 2
retries = 1
retry_delay = 1
timeout = 5
env = {env}
"#
        )
    }

    fn queued(&self) -> Vec<Queued> {
        vec![Queued {
            name: "epool_a",
            weight: 2,
        }]
    }
}

/// The command every pipeline runs (`/bin/sh SCRIPT TIMEOUT`): it appends
/// `begin RUN START PID T SUPERVISOR SUPERVISOR_GROUP PIPELINE` to the
/// ledger (O_APPEND, one write a line), then sleeps, fails or overruns its
/// timeout (some deaf to SIGTERM, leaving a process of another session
/// behind) as `hash(seed, run, start)` says, and appends
/// `end RUN START PID T CODE` (`term` when SIGTERM stopped it). T is
/// seconds since boot (`/proc/uptime`). A SIGKILL leaves no `end`.
pub fn command_script(ledger: &str) -> String {
    format!(
        r#"#!/bin/sh
# A chaos pipeline's command (tests/chaos/workload.rs).
L='{ledger}'
T=$1
read -r up _ < /proc/uptime
read -r st < /proc/$PPID/stat; set -- $st; sup=$4
supg=0
if read -r st < /proc/$sup/stat; then set -- $st; supg=$5; fi
echo "begin $ORCA_RUN_ID $ORCA_RUN_START $$ $up $sup $supg $ORCA_PIPELINE" >> "$L"
trap 'read -r up _ < /proc/uptime; echo "end $ORCA_RUN_ID $ORCA_RUN_START $$ $up term" >> "$L"; exit 143' TERM
h=$(( (ORCA_RUN_ID * 7919 + ORCA_RUN_START * 104729 + CHAOS_SEED) % 100 ))
code=0
if [ $h -lt 7 ]; then
  secs=$(( T + 3 ))
elif [ $h -lt 10 ]; then
  # Deaf to SIGTERM, and leaves a process in a session of its own behind:
  # the keeper must kill both when the attempt ends.
  trap '' TERM
  setsid sleep 60 &
  secs=$(( T + 3 ))
elif [ $h -lt 25 ]; then
  secs=0.$(( h % 10 )); code=$(( h % 5 + 1 ))
else
  secs=$(( h % 25 / 10 )).$(( h % 10 ))
fi
sleep $secs & wait $!
read -r up _ < /proc/uptime
echo "end $ORCA_RUN_ID $ORCA_RUN_START $$ $up $code" >> "$L"
exit $code
"#
    )
}

/// What the queuer did.
#[derive(Default)]
pub struct Queue {
    /// Runs queued (their ids), fills among them.
    pub ids: Vec<i64>,
    /// Fill runs queued.
    pub fills: u64,
    /// Cancels asked.
    pub cancels: Vec<i64>,
    /// `orca run` calls that failed (the database down: not queued).
    pub refused: u64,
}

/// Queues runs of `pipelines` every 0.3-1.2 s (one in ten a fill) and
/// cancels one of the last ten queued one time in thirty, until `stop`; `orca run` as an operator's shell
/// does it, straight to Postgres.
pub fn queuer(
    db_url: String,
    mut rng: Rng,
    pipelines: Vec<Queued>,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Queue>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let weights: Vec<u32> = pipelines.iter().map(|p| p.weight).collect();
        let orca = |args: &[&str]| {
            std::process::Command::new(bin())
                .args(args)
                .env("ORCA_DATABASE_URL", &db_url)
                .env("RUST_LOG", "warn")
                .stdin(std::process::Stdio::null())
                .output()
        };
        while !stop.load(Ordering::SeqCst) {
            let pause = rng.range(0.3, 1.2);
            std::thread::sleep(std::time::Duration::from_secs_f64(pause));
            if rng.chance(1.0 / 30.0) {
                let known = out.lock().unwrap().ids.clone();
                if !known.is_empty() {
                    // One of the last ten: queued or running, mostly.
                    let back = rng.below(known.len().min(10) as u64) as usize;
                    let id = known[known.len() - 1 - back];
                    let _ = orca(&["cancel", &id.to_string(), "--db-wait", "3"]);
                    out.lock().unwrap().cancels.push(id);
                }
                continue;
            }
            let p = pipelines[rng.weighted(&weights)].name;
            let fill = rng.chance(0.1);
            let mut args = vec!["run", p, "--db-wait", "3"];
            if fill {
                args.push("--fill");
            }
            match orca(&args) {
                Ok(o) if o.status.success() => {
                    let mut q = out.lock().unwrap();
                    if let Ok(id) = text(&o.stdout).trim().parse() {
                        q.ids.push(id);
                        q.fills += fill as u64;
                    }
                }
                _ => out.lock().unwrap().refused += 1,
            }
        }
    })
}
