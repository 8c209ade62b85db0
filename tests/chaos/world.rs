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

    /// Machines (or instances) of the stack: process groups.
    fn groups(&mut self, instances: bool) -> Vec<(i32, String)> {
        let Some(stack) = self.stack() else {
            return Vec::new();
        };
        let mut out: Vec<(i32, String)> = local_machines(&stack)
            .into_iter()
            .filter_map(|pid| {
                let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                let get = |k: &str| {
                    env.split(|&b| b == 0).find_map(|kv| {
                        kv.strip_prefix(format!("{k}=").as_bytes())
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                    })
                };
                let is_instance = get("ORCA_LOCAL_LABELS")?.contains("orca:ec2-runs");
                if is_instance != instances {
                    return None;
                }
                Some((pid, get("ORCA_LOCAL_MACHINE")?))
            })
            .collect();
        if !instances {
            out.extend(self.ec2.groups());
        }
        out.sort();
        out
    }

    /// Sets each proxy to what the partitions in force say.
    fn apply_partitions(&mut self) {
        let mut want: BTreeMap<u32, Mode> = BTreeMap::new();
        for (ns, cut) in self.partitions.values() {
            for n in ns {
                let m = if *cut { Mode::Cut } else { Mode::Stall };
                let e = want.entry(*n).or_insert(Mode::Pass);
                if *e != Mode::Cut {
                    *e = m;
                }
            }
        }
        let get = |n: u32| want.get(&n).copied().unwrap_or(Mode::Pass);
        if self.fleet.mode() != get(0) {
            self.fleet.set(get(0));
        }
        for s in &self.scheds {
            if s.proxy.mode() != get(s.n) {
                s.proxy.set(get(s.n));
            }
        }
    }

    /// Does fault `f` now.
    pub fn inflict(&mut self, f: Fault) {
        let now = uptime();
        match f {
            Fault::KillLeader { restart_after } => {
                let Some(n) = self.leader() else {
                    return self.say("skipped: kill the leader: no scheduler".into());
                };
                let s = self.sched(n);
                s.killed = true;
                s.proc.signal(libc::SIGKILL);
                let pid = s.proc.pid();
                self.record(
                    format!(
                        "kill -9 leader: scheduler {n} (pid {pid}); restart in {restart_after:.1}s"
                    ),
                    Target::Scheduler(pid),
                    Effect::Killed,
                    Some(now),
                );
                self.later.push((now + restart_after, Later::Spawn));
            }
            Fault::StopLeader { secs, join } => {
                let Some(n) = self.leader() else {
                    return self.say("skipped: stop the leader: no scheduler".into());
                };
                let s = self.sched(n);
                if s.stopped {
                    return self.say(format!("skipped: scheduler {n} is stopped already"));
                }
                s.stopped = true;
                s.proc.signal(libc::SIGSTOP);
                let pid = s.proc.pid();
                let rec = self.record(
                    format!(
                        "SIGSTOP leader: scheduler {n} (pid {pid}) for {secs:.1}s{}",
                        if join { ", a new one joins" } else { "" }
                    ),
                    Target::Scheduler(pid),
                    Effect::CutOff,
                    None,
                );
                self.records[rec].blocks = Block::Stopped;
                self.later.push((now + secs, Later::Cont { n, rec }));
                if join {
                    self.spawn("joins while the leader is stopped");
                }
            }
            Fault::Deploy => {
                self.record(
                    "rolling deploy".into(),
                    Target::Nobody,
                    Effect::Other,
                    Some(now),
                );
                self.spawn("a deploy");
            }
            Fault::PgRestart { immediate } => {
                if self.pg_down.is_some() {
                    return self.say("skipped: restart Postgres: it is down".into());
                }
                let rec = self.record(
                    format!(
                        "Postgres restarted ({})",
                        if immediate { "immediate" } else { "fast" }
                    ),
                    Target::All,
                    Effect::CutOff,
                    None,
                );
                if immediate {
                    self.cluster.stop_immediate();
                    self.cluster.start();
                } else {
                    self.cluster.restart();
                }
                self.close(rec);
            }
            Fault::PgDown { secs } => {
                if self.pg_down.is_some() {
                    return self.say("skipped: stop Postgres: it is down".into());
                }
                let rec = self.record(
                    format!("Postgres down for {secs:.1}s"),
                    Target::All,
                    Effect::CutOff,
                    None,
                );
                self.cluster.stop();
                self.pg_down = Some(rec);
                self.later.push((now + secs, Later::PgStart { rec }));
            }
            Fault::Unreachable { secs } => {
                let mut all: Vec<u32> = self.alive().iter().map(|s| s.n).collect();
                all.push(0);
                let rec = self.record(
                    format!("Postgres unreachable (every connection stalls) for {secs:.1}s"),
                    Target::All,
                    Effect::CutOff,
                    None,
                );
                self.records[rec].blocks = Block::Io;
                self.partitions.insert(rec, (all, false));
                self.apply_partitions();
                self.later.push((now + secs, Later::Heal { rec }));
            }
            Fault::Partition { side, cut, secs } => {
                let how = if cut { "cut" } else { "stalled" };
                let (n, target, whom) = match side {
                    Side::Fleet => (0, Target::Fleet, "the fleet".to_string()),
                    Side::Leader | Side::AnyScheduler(_) => {
                        let n = match side {
                            Side::AnyScheduler(pick) => {
                                let alive: Vec<u32> = self.alive().iter().map(|s| s.n).collect();
                                if alive.is_empty() {
                                    None
                                } else {
                                    Some(alive[(pick % alive.len() as u64) as usize])
                                }
                            }
                            _ => self.leader(),
                        };
                        let Some(n) = n else {
                            return self.say("skipped: partition: no scheduler".into());
                        };
                        let pid = self.sched(n).proc.pid();
                        (
                            n,
                            Target::Scheduler(pid),
                            format!("scheduler {n} (pid {pid})"),
                        )
                    }
                };
                let rec = self.record(
                    format!("partition: {whom} {how} from Postgres for {secs:.1}s"),
                    target,
                    Effect::CutOff,
                    None,
                );
                if !cut {
                    self.records[rec].blocks = Block::Io;
                }
                self.partitions.insert(rec, (vec![n], cut));
                self.apply_partitions();
                self.later.push((now + secs, Later::Heal { rec }));
            }
            Fault::KillWorker { pick } => {
                let workers: Vec<(i32, i32)> = self
                    .groups(false)
                    .into_iter()
                    .flat_map(|(g, _)| workers_in(g).into_iter().map(move |p| (p, g)))
                    .collect();
                if workers.is_empty() {
                    return self.say("skipped: kill a worker: none".into());
                }
                let (pid, pgid) = workers[(pick % workers.len() as u64) as usize];
                // SAFETY: kill(2) on a worker of this run's stack.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                self.record(
                    format!("kill -9 worker pid {pid} (machine group {pgid})"),
                    Target::Process { pid, pgid },
                    Effect::Killed,
                    Some(now),
                );
            }
            Fault::KillMachine { pick } | Fault::KillInstance { pick } => {
                let instance = matches!(f, Fault::KillInstance { .. });
                let groups = self.groups(instance);
                let what = if instance { "instance" } else { "machine" };
                if groups.is_empty() {
                    return self.say(format!("skipped: kill -9 {what}: none"));
                }
                let (pgid, name) = groups[(pick % groups.len() as u64) as usize].clone();
                // SAFETY: kill(2) on a process group of this run's stack.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                self.record(
                    format!("kill -9 {what} {name} (group {pgid})"),
                    Target::Group(pgid),
                    Effect::Killed,
                    Some(now),
                );
            }
            Fault::StopMachine {
                pick,
                instance,
                secs,
            } => {
                let groups = self.groups(instance);
                let what = if instance { "instance" } else { "machine" };
                if groups.is_empty() {
                    return self.say(format!("skipped: stop a {what}: none"));
                }
                let (pgid, name) = groups[(pick % groups.len() as u64) as usize].clone();
                // SAFETY: kill(2) on a process group of this run's stack.
                unsafe { libc::kill(-pgid, libc::SIGSTOP) };
                let rec = self.record(
                    format!("SIGSTOP {what} {name} (group {pgid}) for {secs:.1}s"),
                    Target::Group(pgid),
                    Effect::CutOff,
                    None,
                );
                self.records[rec].blocks = Block::Stopped;
                self.later.push((
                    now + secs,
                    Later::ContGroup {
                        pgid,
                        instance,
                        rec,
                    },
                ));
            }
            Fault::NeverBoot { whose } => {
                let what = match whose {
                    0 => "local pool machine",
                    1 => "instance",
                    _ => "EC2 pool machine",
                };
                if whose == 2 {
                    self.ec2.never_boot_next();
                } else {
                    self.observer.arm_never_boot(whose == 1);
                }
                self.say(format!("fault: the next {what} made never boots (armed)"));
            }
            Fault::Ec2Fail { secs, retried } => {
                let (answer, what) = if retried {
                    (
                        (503, "Unavailable", "The service is unavailable."),
                        "503 Unavailable",
                    )
                } else {
                    (
                        (403, "UnauthorizedOperation", "You are not authorized."),
                        "UnauthorizedOperation",
                    )
                };
                self.ec2.fail(Some(answer));
                let rec = self.record(
                    format!("EC2 answers every call {what} for {secs:.1}s"),
                    Target::Schedulers,
                    Effect::Other,
                    None,
                );
                if retried {
                    self.records[rec].blocks = Block::Io;
                }
                self.later.push((now + secs, Later::Ec2Heal { rec }));
            }
            Fault::Ec2Hang { secs, ms } => {
                self.ec2.delay(ms);
                let rec = self.record(
                    format!("EC2 answers {:.1}s late for {secs:.1}s", ms as f64 / 1000.0),
                    Target::Schedulers,
                    Effect::Other,
                    None,
                );
                self.records[rec].blocks = Block::Io;
                self.later.push((now + secs, Later::Ec2Heal { rec }));
            }
            Fault::Ec2NoCapacity { secs } => {
                self.ec2.no_capacity(Some("subnet-a"));
                let rec = self.record(
                    format!("EC2 has no capacity in subnet-a for {secs:.1}s"),
                    Target::Nobody,
                    Effect::Other,
                    None,
                );
                self.later.push((now + secs, Later::Ec2Heal { rec }));
            }
            Fault::RetireEc2 { secs } => {
                let file = self.files.1.clone();
                let said = self.register(&file);
                let rec = self.record(
                    format!("every ec2 pipeline retired for {secs:.1}s: {said}"),
                    Target::Nobody,
                    Effect::Other,
                    None,
                );
                self.later.push((now + secs, Later::Reregister { rec }));
            }
            Fault::KillLeaderLeavingStray { restart_after } => {
                let Some(stack) = self.stack() else {
                    return self.say("skipped: leave a stray: no stack id yet".into());
                };
                let Some(n) = self.leader() else {
                    return self
                        .say("skipped: kill the leader, leave a stray: no scheduler".into());
                };
                let s = self.sched(n);
                s.killed = true;
                s.proc.signal(libc::SIGKILL);
                let pid = s.proc.pid();
                // What its make left: a local instance with the stack's
                // labels, its row never written.
                let name = format!("orca-i-stray-{}", self.records.len() + 1);
                let stray = {
                    use std::os::unix::process::CommandExt;
                    std::process::Command::new("sleep")
                        .arg("600")
                        .env("ORCA_LOCAL_MACHINE", &name)
                        .env(
                            "ORCA_LOCAL_LABELS",
                            format!("orca-pool=orca:ec2-runs orca-stack={stack}"),
                        )
                        .process_group(0)
                        .spawn()
                        .unwrap()
                };
                let group = stray.id();
                self.strays.push(stray);
                self.record(
                    format!(
                        "kill -9 leader: scheduler {n} (pid {pid}) between a make and its row \
                         (stray {name}, group {group}); restart in {restart_after:.1}s"
                    ),
                    Target::Scheduler(pid),
                    Effect::Killed,
                    Some(now),
                );
                self.later.push((now + restart_after, Later::Spawn));
            }
            Fault::Ec2LostAnswer => {
                self.ec2.drop_next_answer();
                self.record(
                    "EC2 loses the next RunInstances answer".into(),
                    Target::Nobody,
                    Effect::Other,
                    Some(now),
                );
            }
        }
    }

    /// Does what is due from `later`.
    pub fn due(&mut self, now: f64) {
        let (due, rest): (Vec<_>, Vec<_>) = self.later.drain(..).partition(|(t, _)| *t <= now);
        self.later = rest;
        for (_, l) in due {
            self.undo(l);
        }
    }

    fn undo(&mut self, l: Later) {
        match l {
            Later::Cont { n, rec } => {
                let s = self.sched(n);
                s.proc.signal(libc::SIGCONT);
                s.stopped = false;
                self.close(rec);
                self.say(format!("healed: scheduler {n} continues"));
            }
            Later::Heal { rec } => {
                self.partitions.remove(&rec);
                self.apply_partitions();
                self.close(rec);
                let what = self.records[rec].what.clone();
                self.say(format!("healed: {what}"));
            }
            Later::PgStart { rec } => {
                self.cluster.start();
                self.pg_down = None;
                self.close(rec);
                self.say("healed: Postgres is up".into());
            }
            Later::Ec2Heal { rec } => {
                self.ec2.fail(None);
                self.ec2.delay(0);
                self.ec2.no_capacity(None);
                self.close(rec);
                let what = self.records[rec].what.clone();
                self.say(format!("healed: {what}"));
            }
            Later::ContGroup {
                pgid,
                instance,
                rec,
            } => {
                // Only if it is still there (orca may have removed it, and
                // its pid be another's now).
                if self.groups(instance).iter().any(|(g, _)| *g == pgid) {
                    // SAFETY: kill(2) on a process group of this run's stack.
                    unsafe { libc::kill(-pgid, libc::SIGCONT) };
                }
                self.close(rec);
                let what = self.records[rec].what.clone();
                self.say(format!("healed: {what}"));
            }
            Later::Spawn => self.spawn("a restart after kill -9"),
            Later::Reregister { rec } => {
                self.close(rec);
                let file = self.files.0.clone();
                let said = self.register(&file);
                self.say(format!(
                    "healed: the ec2 pipelines registered again: {said}"
                ));
            }
        }
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
