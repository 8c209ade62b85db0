//! The real processes of a chaos run and the faults done to them: a
//! Postgres cluster of the run's own, orca's database on it (as orca's
//! non-superuser role), schedulers with `ORCA_OVERLAP=on` each behind a
//! proxy of its own, one proxy for every machine and instance (the fleet),
//! and the faults' doing and undoing, each recorded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::ec2fleet::Ec2Fleet;
use crate::faults::{Block, Effect, Fault, Record, Side, Target};
use crate::harness::*;
use crate::observe::{Observer, uptime};
use crate::proxy::{Mode, Proxy};

mod inflict;

/// A scheduler the run started.
pub struct Sched {
    /// Its number (1, 2, ...: its image is `vN`).
    pub n: u32,
    /// The process.
    pub proc: Proc,
    /// Its own way to Postgres.
    pub proxy: Proxy,
    /// SIGSTOPped now.
    pub stopped: bool,
    /// Killed with SIGKILL by a fault.
    pub killed: bool,
    /// How it exited, once it did.
    pub exited: Option<std::process::ExitStatus>,
}

/// Something to undo (or do) later.
#[derive(Debug, Clone, Copy)]
pub enum Later {
    /// SIGCONT scheduler `n`; closes fault record `rec`.
    Cont { n: u32, rec: usize },
    /// Ends a partition or an unreachable spell (record `rec`).
    Heal { rec: usize },
    /// Starts Postgres again (record `rec`).
    PgStart { rec: usize },
    /// The fake EC2 answers as it should again (record `rec`).
    Ec2Heal { rec: usize },
    /// SIGCONT machine (or instance) group `pgid`, named `name`, if it is
    /// still that one; closes fault record `rec`.
    ContGroup {
        pgid: i32,
        instance: bool,
        rec: usize,
    },
    /// Starts a scheduler (a restart after a kill).
    Spawn,
    /// Registers the whole file again (record `rec`): the retired `ec2`
    /// pipelines are back.
    Reregister { rec: usize },
}

/// Every process of the run and what was done to them.
pub struct World {
    /// orca's database (dropped before the cluster).
    pub db: TestDb,
    /// The run's own Postgres.
    pub cluster: Cluster,
    /// Scratch: config, ledger, logs.
    pub dir: TempDir,
    /// The fleet's proxy (`ORCA_POOL_DATABASE_URL`).
    pub fleet: Proxy,
    /// The fake EC2 of the EC2 pool, whose instances boot here.
    pub ec2: Ec2Fleet,
    /// Schedulers, in the order started.
    pub scheds: Vec<Sched>,
    /// Faults done.
    pub records: Vec<Record>,
    /// Partitions in force: record → (proxies by scheduler number or the
    /// fleet (0), cut).
    partitions: BTreeMap<usize, (Vec<u32>, bool)>,
    /// What is still to undo: (when, what).
    pub later: Vec<(f64, Later)>,
    /// Postgres is down (a fault's record).
    pub pg_down: Option<usize>,
    /// The stack's id, once known.
    pub stack: Option<String>,
    /// Watching /proc.
    pub observer: Observer,
    /// When the chaos began (uptime).
    pub t0: f64,
    /// Problems seen on the way (a scheduler that exited badly).
    pub problems: Vec<String>,
    /// What the run says, as it says it.
    pub log: Vec<String>,
    /// The workload's file, and the same without its `ec2`-placed
    /// pipelines (what [`Fault::RetireEc2`] registers for a while).
    pub files: (String, String),
    /// Instances left behind by [`Fault::KillLeaderLeavingStray`] (reaped
    /// once orca deletes them).
    pub strays: Vec<std::process::Child>,
}

impl World {
    /// A cluster, a migrated database, the fleet's proxy and the observer.
    pub fn new(token: &str) -> World {
        let cluster = Cluster::new("max_connections = 200\n");
        cluster.start();
        let db = TestDb::on(&cluster.url());
        let fleet = Proxy::start(cluster.port());
        let dir = TempDir::new();
        std::fs::create_dir_all(dir.path("ec2")).unwrap();
        World {
            db,
            cluster,
            ec2: Ec2Fleet::start(dir.path("ec2")),
            dir,
            fleet,
            scheds: Vec::new(),
            records: Vec::new(),
            partitions: BTreeMap::new(),
            later: Vec::new(),
            pg_down: None,
            stack: None,
            observer: Observer::start(token),
            t0: uptime(),
            problems: Vec::new(),
            log: Vec::new(),
            files: (String::new(), String::new()),
            strays: Vec::new(),
        }
    }

    /// Says `line` (with the time since the chaos began) and keeps it.
    pub fn say(&mut self, line: String) {
        let line = format!("{:7.2} {line}", uptime() - self.t0);
        println!("chaos: {line}");
        self.log.push(line);
    }

    /// orca's URL through proxy `port`.
    fn via(&self, port: u16) -> String {
        self.db
            .url
            .replace(&format!(":{}/", self.cluster.port()), &format!(":{port}/"))
    }

    /// Starts a scheduler (a new image number) behind a proxy of its own.
    pub fn spawn(&mut self, why: &str) {
        let n = self.scheds.len() as u32 + 1;
        let proxy = Proxy::start(self.cluster.port());
        let url = self.via(proxy.port);
        let fleet = self.via(self.fleet.port);
        let image = format!("v{n}");
        let aws = self.ec2.env();
        let mut env: Vec<(&str, &str)> = vec![
            ("ORCA_DATABASE_URL", &url),
            ("ORCA_POOL_DATABASE_URL", &fleet),
            ("ORCA_OVERLAP", "on"),
            ("ORCA_IMAGE", &image),
            ("ORCA_POOL_SCALE_SECONDS", "0.5"),
            ("ORCA_POOL_GROW_AFTER", "1"),
            ("ORCA_POOL_TRY_SECONDS", "0.5"),
            ("ORCA_POOL_BOOT_SECONDS", "10"),
            ("ORCA_POOL_LOST_SECONDS", "8"),
            ("ORCA_EC2_POOL_SECONDS", "6"),
            ("ORCA_POOL_NEXT_GRACE_SECONDS", "2"),
            ("ORCA_WORKER_REFUSED_SECONDS", "30"),
            // The removals thread's looks, for a late removal's evidence.
            ("RUST_LOG", "info,orca::pools::mark=debug"),
        ];
        env.extend(aws.iter().map(|(k, v)| (*k, v.as_str())));
        let proc = self.db.scheduler(&self.dir, &env);
        let pid = proc.pid();
        self.scheds.push(Sched {
            n,
            proc,
            proxy,
            stopped: false,
            killed: false,
            exited: None,
        });
        self.say(format!("scheduler {n} (pid {pid}) starts: {why}"));
    }

    /// Notes schedulers that exited; one that exited other than by our
    /// SIGKILL must have exited 0 (a drain).
    pub fn reap(&mut self) {
        self.strays
            .retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
        let mut said = Vec::new();
        for s in self.scheds.iter_mut().filter(|s| s.exited.is_none()) {
            if let Ok(Some(status)) = s.proc.child.try_wait() {
                s.exited = Some(status);
                // Exit 1 for a database it couldn't reach at its start is
                // what it promises (a service manager starts it again).
                let gave_up = status.code() == Some(1) && s.proc.output().contains("gave up after");
                if !s.killed && !status.success() && !gave_up {
                    let log = s.proc.output();
                    let tail: Vec<&str> = log.lines().rev().take(15).collect();
                    self.problems.push(format!(
                        "scheduler {} (pid {}) exited with {status}; its log ends:\n    {}",
                        s.n,
                        s.proc.pid(),
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n    ")
                    ));
                }
                said.push(format!(
                    "scheduler {} (pid {}) exited: {status}",
                    s.n,
                    s.proc.pid()
                ));
            }
        }
        for line in said {
            self.say(line);
        }
    }

    /// Schedulers still running (stopped ones too).
    pub fn alive(&self) -> Vec<&Sched> {
        self.scheds.iter().filter(|s| s.exited.is_none()).collect()
    }

    /// Starts a scheduler when none is left and no restart is due, as a
    /// service manager would.
    pub fn watchdog(&mut self) {
        self.reap();
        let restarting = self.later.iter().any(|(_, l)| matches!(l, Later::Spawn));
        if self.alive().is_empty() && !restarting {
            self.spawn("none was running");
        }
    }

    /// A client on orca's database straight to Postgres, if it answers.
    fn client(&self) -> Option<postgres::Client> {
        let mut cfg: postgres::Config = self.db.url.parse().ok()?;
        cfg.connect_timeout(Duration::from_secs(2));
        cfg.connect(postgres::NoTls).ok()
    }

    /// The stack's id (read once it exists).
    pub fn stack(&mut self) -> Option<String> {
        if self.stack.is_none() {
            let id = self
                .client()
                .and_then(|mut c| c.query_opt("SELECT id FROM orca.stack", &[]).ok())
                .flatten()
                .map(|r| r.get::<_, String>(0));
            if let Some(id) = &id {
                self.observer.set_stack(id);
            }
            self.stack = id;
        }
        self.stack.clone()
    }

    /// The leader's scheduler number: the one whose row leads, else the
    /// newest running and not stopped.
    fn leader(&self) -> Option<u32> {
        let pid: Option<i32> = self
            .client()
            .and_then(|mut c| {
                c.query_opt(
                    "SELECT pid FROM orca.schedulers WHERE leads AND ended_at IS NULL ORDER BY id DESC LIMIT 1",
                    &[],
                )
                .ok()
            })
            .flatten()
            .map(|r| r.get(0));
        let alive = self.alive();
        pid.and_then(|p| alive.iter().find(|s| s.proc.pid() == p).map(|s| s.n))
            .or_else(|| alive.iter().rev().find(|s| !s.stopped).map(|s| s.n))
    }

    fn sched(&mut self, n: u32) -> &mut Sched {
        self.scheds.iter_mut().find(|s| s.n == n).unwrap()
    }

    /// Records a fault from now: an instant one (`Some`: a kill) ends now,
    /// one with a window (`None`) when [`World::close`] says.
    fn record(&mut self, what: String, target: Target, effect: Effect, end: Option<f64>) -> usize {
        let now = uptime();
        let end = end.map(|_| now);
        self.say(format!("fault: {what}"));
        self.records.push(Record {
            what,
            target,
            effect,
            start: now,
            end: end.unwrap_or(f64::INFINITY),
            blocks: Block::No,
        });
        self.records.len() - 1
    }

    fn close(&mut self, rec: usize) {
        self.records[rec].end = uptime();
    }

    /// Registers `file` as `orca register` does (it may be refused while
    /// Postgres is away): what it said.
    fn register(&mut self, file: &str) -> String {
        let path = self.dir.write("orca-now.toml", file);
        let out = self.db.run(&["register", "-c", &path, "--db-wait", "5"]);
        if out.status.success() {
            text(&out.stdout).trim().to_string()
        } else {
            format!("refused: {}", text(&out.stderr).trim())
        }
    }

    /// Ends every fault in force now (the machines stopped at birth stay
    /// stopped: orca must remove them).
    pub fn heal_all(&mut self) {
        self.observer.disarm();
        self.ec2.disarm();
        let pending: Vec<Later> = self.later.drain(..).map(|(_, l)| l).collect();
        for l in pending {
            self.undo(l);
        }
    }

    /// The records, with the machines stopped at birth added.
    pub fn all_records(&self) -> Vec<Record> {
        let mut out = self.records.clone();
        for s in self.observer.stopped() {
            out.push(Record {
                what: format!(
                    "never boots: {} (group {}) stopped {:.2}s after it was made",
                    s.name, s.pgid, s.after
                ),
                target: Target::Group(s.pgid),
                effect: Effect::CutOff,
                start: s.at,
                end: f64::INFINITY,
                blocks: Block::Stopped,
            });
        }
        for (id, at) in self.ec2.never_booted() {
            out.push(Record {
                what: format!("never boots: EC2 instance {id}"),
                target: Target::Nobody,
                effect: Effect::Other,
                start: at,
                end: f64::INFINITY,
                blocks: Block::No,
            });
        }
        out
    }

    /// Where the run's files are.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path(name)
    }

    /// An empty ledger and the command that writes it, for a run of
    /// `token` and `seed`: the command line (`{cmd} TIMEOUT`) and the
    /// pipeline `env` every pipeline carries (see [`crate::workload`]).
    pub fn ledger_command(&self, token: &str, seed: u64) -> (String, String) {
        let ledger = self.path("ledger");
        std::fs::write(&ledger, "").unwrap();
        let script = self.dir.write(
            "command.sh",
            &crate::workload::command_script(&ledger.display().to_string()),
        );
        let cmd = format!("exec /bin/sh {script}");
        let env = format!(
            "{{ CHAOS_TOKEN = \"{token}\", CHAOS_SEED = \"{}\" }}",
            seed % 1_000_003
        );
        (cmd, env)
    }
}

/// The worker processes (`orca worker`) in process group `pgid`.
fn workers_in(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: getpgid(2) only reads.
        if unsafe { libc::getpgid(pid) } != pgid {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        if cmd.split('\0').any(|a| a == "worker") {
            out.push(pid);
        }
    }
    out
}
