//! A worker pool on the EC2 provider against the fake EC2 endpoint of
//! `tests/it/fake_aws.rs`, whose instances really boot: a thread of the
//! test runs each new instance's user-data (the real boot script, with its
//! settings) as a process group of this host, kills the group when the
//! instance is terminated, and terminates an instance whose script shut it
//! down (as `InstanceInitiatedShutdownBehavior=terminate` does). The fake
//! can fail, hang, run out of capacity or lose an answer on demand: the
//! provider faults. An instance can be left unbooted: a machine that never
//! boots.

use std::collections::{HashMap, HashSet};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fake_aws::FakeEc2;
use crate::harness::*;

const KEY: &str = "AKIDORCACHAOS";
const SECRET: &str = "orca/chaos/secret+key";

/// A booted instance: its script's process group.
struct Booted {
    child: Child,
    pgid: i32,
}

#[derive(Default)]
struct Boots {
    booted: HashMap<String, Booted>,
    /// Instances left unbooted (never booting).
    unbooted: HashSet<String>,
    /// How many of the next instances to leave unbooted.
    never: u32,
    /// Unbooted instances: (id, when).
    never_booted: Vec<(String, f64)>,
}

/// The fake EC2 and the thread that boots its instances; the instances'
/// processes are killed on drop.
pub struct Ec2Fleet {
    /// The fake endpoint.
    pub fake: FakeEc2,
    boots: Arc<Mutex<Boots>>,
    stop: Arc<AtomicBool>,
}

impl Ec2Fleet {
    /// Starts the fake and the booting thread; instances' logs and token
    /// files go in `dir`.
    pub fn start(dir: PathBuf) -> Ec2Fleet {
        let fake = FakeEc2::start(KEY, SECRET);
        let boots: Arc<Mutex<Boots>> = Arc::default();
        let stop: Arc<AtomicBool> = Arc::default();
        let (state, b, s) = (fake.state.clone(), boots.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                step(&state, &b, &dir);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Ec2Fleet { fake, boots, stop }
    }

    /// What a scheduler needs to reach the fake with signed calls.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("ORCA_EC2_ENDPOINT", self.fake.url.clone()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent".into()),
            ("AWS_CONFIG_FILE", "/nonexistent".into()),
            ("AWS_ACCESS_KEY_ID", KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
            ("AWS_REGION", "eu-west-1".into()),
        ]
    }

    /// The next instance made is never booted.
    pub fn never_boot_next(&self) {
        self.boots.lock().unwrap().never += 1;
    }

    /// No more instances are left unbooted.
    pub fn disarm(&self) {
        self.boots.lock().unwrap().never = 0;
    }

    /// Instances left unbooted: (id, when, uptime).
    pub fn never_booted(&self) -> Vec<(String, f64)> {
        self.boots.lock().unwrap().never_booted.clone()
    }

    /// Every call fails with this answer (None: none fails).
    pub fn fail(&self, answer: Option<(u16, &str, &str)>) {
        self.fake.state.lock().unwrap().fail_all =
            answer.map(|(s, c, m)| (s, c.to_string(), m.to_string()));
    }

    /// Every answer comes this late.
    pub fn delay(&self, ms: u64) {
        self.fake.state.lock().unwrap().delay_ms = ms;
    }

    /// A location without capacity for any type (None: every one has).
    pub fn no_capacity(&self, location: Option<&str>) {
        let mut st = self.fake.state.lock().unwrap();
        st.no_capacity.clear();
        if let Some(l) = location {
            st.no_capacity.push(("*".into(), l.into()));
        }
    }

    /// The next RunInstances that makes an instance gets no answer.
    pub fn drop_next_answer(&self) {
        self.fake.state.lock().unwrap().drop_next_run_answer = true;
    }

    /// Booted instances whose processes run: (process group, instance id).
    pub fn groups(&self) -> Vec<(i32, String)> {
        let mut out: Vec<(i32, String)> = self
            .boots
            .lock()
            .unwrap()
            .booted
            .iter()
            .map(|(id, b)| (b.pgid, id.clone()))
            .collect();
        out.sort();
        out
    }

    /// Instances the fake has running: (id, Name tag).
    pub fn live(&self) -> Vec<(String, String)> {
        self.fake
            .live()
            .into_iter()
            .map(|i| (i.id.clone(), i.tag("Name").unwrap_or("").to_string()))
            .collect()
    }
}

impl Drop for Ec2Fleet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for b in self.boots.lock().unwrap().booted.values_mut() {
            // SAFETY: kill(2) on a process group this fleet started.
            unsafe { libc::kill(-b.pgid, libc::SIGKILL) };
            let _ = b.child.wait();
        }
    }
}

/// One round: boot what is new, kill what was terminated, terminate what
/// shut itself down.
fn step(state: &Mutex<crate::fake_aws::Ec2State>, boots: &Mutex<Boots>, dir: &std::path::Path) {
    let instances = state.lock().unwrap().instances.clone();
    let mut b = boots.lock().unwrap();
    for i in &instances {
        let known = b.booted.contains_key(&i.id) || b.unbooted.contains(&i.id);
        if i.terminated {
            if let Some(mut gone) = b.booted.remove(&i.id) {
                // SAFETY: kill(2) on the group this fleet started for it.
                unsafe { libc::kill(-gone.pgid, libc::SIGKILL) };
                let _ = gone.child.wait();
            }
            continue;
        }
        if known {
            continue;
        }
        if b.never > 0 {
            b.never -= 1;
            b.unbooted.insert(i.id.clone());
            b.never_booted
                .push((i.id.clone(), crate::observe::uptime()));
            continue;
        }
        let Some(child) = boot(i, dir) else {
            b.unbooted.insert(i.id.clone());
            continue;
        };
        let pgid = child.id() as i32;
        b.booted.insert(i.id.clone(), Booted { child, pgid });
    }
    // An instance whose script shut it down is terminated, as EC2 does.
    let mut shut = Vec::new();
    for (id, booted) in b.booted.iter_mut() {
        if let Ok(Some(_)) = booted.child.try_wait()
            && dir.join(format!("{id}.shutdown")).exists()
        {
            shut.push(id.clone());
        }
    }
    drop(b);
    if !shut.is_empty() {
        let mut st = state.lock().unwrap();
        for i in st.instances.iter_mut().filter(|i| shut.contains(&i.id)) {
            i.terminated = true;
        }
    }
}

/// Runs an instance's user-data as a process group with what a fresh
/// machine would have, orca on PATH as `ORCA_BIN`.
fn boot(i: &crate::fake_aws::Inst, dir: &std::path::Path) -> Option<Child> {
    use base64::Engine;
    let data = i.params.get("UserData")?;
    let script = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())?;
    let token_dir = dir.join(format!("{}.token", i.id));
    let log = std::fs::File::create(dir.join(format!("{}.log", i.id))).ok()?;
    let shutdown = format!("touch {}", dir.join(format!("{}.shutdown", i.id)).display());
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .env("RUST_LOG", "info")
        .env("ORCA_BIN", bin())
        .env("ORCA_SHUTDOWN", shutdown)
        .env("ORCA_RUN_AS", "")
        .env("ORCA_TOKEN_FILE", token_dir.join("token"))
        .env("ORCA_TICK_SECONDS", "0.2")
        .env("ORCA_STALE_SECONDS", "3")
        .env("ORCA_KILL_GRACE_SECONDS", "2")
        .env("ORCA_STOP_GRACE_SECONDS", "5")
        .env("ORCA_WORKER_REFUSED_SECONDS", "30")
        .env("CHAOS_EC2_INSTANCE", &i.id)
        .stdin(Stdio::null())
        .stdout(log.try_clone().ok()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .ok()
}
