//! The poll of a pool machine's instance metadata for spot notices (issue
//! #35, stage 2a), in a thread of its own so that it never holds up the
//! worker's beat: every [`EVERY`] it asks IMDS (IMDSv2, each call bounded
//! by [`TIMEOUT`]) for `spot/instance-action` and
//! `events/recommendations/rebalance`, decides what they say
//! ([`crate::pools::notice::decide`]) and keeps the most pressing notice
//! heard, which the worker's loop reads each tick ([`Poll::notice`]).
//!
//! Where: `AWS_EC2_METADATA_SERVICE_ENDPOINT` when set, else IMDS's own
//! address on an EC2 instance (one whose DMI asset tag or hypervisor says
//! so); a machine elsewhere (a local provider's) polls nothing, and
//! `AWS_EC2_METADATA_DISABLED=true` turns it off. An instance whose
//! `instance-life-cycle` is `on-demand` is never interrupted: its poll ends
//! there. (Stage 1's `market` column on the machine's row is the better
//! source once it lands; see the README's pools section.)

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::db::{Link, sql};
use crate::pools::notice::{self, ANSWER_MAX, Answer, Notice};
use crate::supervise::Supervisor;

/// How often IMDS is asked.
pub const EVERY: Duration = Duration::from_secs(5);

/// The bound on each call to IMDS (its token's and each GET).
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// The paths asked, in order: the interruption, the rebalance.
const PATHS: [&str; 2] = [
    "/latest/meta-data/spot/instance-action",
    "/latest/meta-data/events/recommendations/rebalance",
];

/// The poll thread of a worker, and what it has heard.
pub struct Poll {
    heard: Arc<Mutex<Notice>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Whether this host is an EC2 instance: its DMI asset tag is its
/// instance id (Nitro), or its hypervisor's uuid begins with `ec2` (Xen).
fn on_ec2() -> bool {
    let starts = |path: &str, prefix: &str| {
        std::fs::read_to_string(path).is_ok_and(|t| t.trim_start().starts_with(prefix))
    };
    starts("/sys/devices/virtual/dmi/id/board_asset_tag", "i-")
        || starts("/sys/hypervisor/uuid", "ec2")
}

/// Where to poll: see the module's comment. `None`: nowhere.
pub fn endpoint() -> Option<String> {
    let set = std::env::var("AWS_EC2_METADATA_SERVICE_ENDPOINT").is_ok_and(|v| !v.is_empty());
    if !set && !on_ec2() {
        return None;
    }
    crate::aws::credentials::imds_base()
}

impl Poll {
    /// Starts polling [`endpoint`] (`None`: nowhere to poll).
    pub fn start() -> Option<Poll> {
        let base = endpoint()?;
        let heard = Arc::new(Mutex::new(Notice::Nothing));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (heard, stop) = (heard.clone(), stop.clone());
            std::thread::Builder::new()
                .name("spot notices".into())
                .spawn(move || poll_loop(&base, &heard, &stop))
                .map_err(|e| log::warn!("can't start the spot notices' poll: {e}"))
                .ok()?
        };
        Some(Poll {
            heard,
            stop,
            thread: Some(thread),
        })
    }

    /// The most pressing notice heard so far.
    pub fn notice(&self) -> Notice {
        self.heard.lock().expect("heard").clone()
    }
}

impl Drop for Poll {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Says `what` once (a warning repeated each poll would flood the log).
fn once(said: &mut HashSet<String>, what: String) {
    if said.len() < 64 && said.insert(what.clone()) {
        log::warn!("spot notices: {what}");
    }
}

fn poll_loop(base: &str, heard: &Mutex<Notice>, stop: &AtomicBool) {
    let mut said = HashSet::new();
    // An on-demand instance is never interrupted: nothing to poll.
    if let Ok(a) = crate::aws::credentials::imds_answers(
        base,
        &["/latest/meta-data/instance-life-cycle"],
        TIMEOUT,
        64,
    ) && let Some(Some(body)) = a.first()
        && body.trim_ascii() == b"on-demand"
    {
        log::info!("spot notices: an on-demand instance: not polled");
        return;
    }
    log::info!("spot notices: polling the instance metadata every {EVERY:?}");
    loop {
        let began = Instant::now();
        match crate::aws::credentials::imds_answers(base, &PATHS, TIMEOUT, ANSWER_MAX) {
            Ok(answers) => {
                let answer = |i: usize| match answers.get(i) {
                    Some(Some(b)) => Answer::Body(b.clone()),
                    _ => Answer::Missing,
                };
                let (n, warnings) = notice::decide(&answer(0), &answer(1));
                for w in warnings {
                    once(&mut said, w);
                }
                let mut h = heard.lock().expect("heard");
                if n.rank() > h.rank() {
                    *h = n;
                }
                if h.rank() == 2 {
                    // Interrupted: nothing more to hear.
                    return;
                }
            }
            Err(e) => once(&mut said, e),
        }
        while began.elapsed() < EVERY {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A worker's hook: the poll, and what the worker did about it.
pub struct Hook {
    poll: Poll,
    /// The notice acted on.
    acted: Notice,
    /// Whether it is recorded on the machine's row (tried again each tick
    /// while the database is away).
    recorded: bool,
    /// Whether it said it could not record it yet.
    said_unrecorded: bool,
    machine: String,
    kill_grace: f64,
    /// The interruption's grace and why, once heard.
    interrupt: Option<(f64, String)>,
}

impl Hook {
    /// The hook of the worker of machine `machine`, whose kill grace is
    /// `kill_grace`; `None` where nothing is polled ([`endpoint`]).
    pub fn start(machine: &str, kill_grace: f64) -> Option<Hook> {
        Some(Hook {
            poll: Poll::start()?,
            acted: Notice::Nothing,
            recorded: true,
            said_unrecorded: false,
            machine: machine.to_string(),
            kill_grace,
            interrupt: None,
        })
    }

    /// Whether the worker takes no more runs: it heard a notice.
    pub fn draining(&self) -> bool {
        self.acted.rank() > 0
    }

    /// A tick's look: a notice newly heard is recorded (the machine's row
    /// and its event: `orca.worker_notice`, which tells the time left by
    /// the database's clock) and, an interruption, its runs handed back
    /// ([`Supervisor::interrupt`], again each tick for any begun since).
    pub fn tick(&mut self, link: &Link, sup: &mut Supervisor) {
        let heard = self.poll.notice();
        if heard.rank() > self.acted.rank() {
            log::warn!("{}", notice::why(&self.machine, &heard));
            self.acted = heard;
            self.recorded = false;
        }
        let at = match &self.acted {
            Notice::Nothing => return,
            Notice::Drain { at } | Notice::Interrupted { at, .. } => *at,
        };
        // Seconds left by this host's clock, until the database says.
        let mut left = (at - chrono::Utc::now()).num_milliseconds() as f64 / 1000.0;
        if !self.recorded {
            let action = match &self.acted {
                Notice::Interrupted { action, .. } => Some(action.clone()),
                _ => None,
            };
            let kind = self.acted.kind();
            match link
                .lock()
                .run(|c| c.query_one(sql::WORKER_NOTICE, &[&kind, &action, &at]))
            {
                Ok(row) => {
                    self.recorded = true;
                    left = row.get::<_, Option<f64>>("left").unwrap_or(left);
                }
                Err(e) => {
                    if !self.said_unrecorded {
                        log::warn!(
                            "can't record the spot notice yet ({e}): trying again each tick"
                        );
                        self.said_unrecorded = true;
                    }
                }
            }
        }
        if matches!(self.acted, Notice::Interrupted { .. }) {
            let (grace, why) = self.interrupt.get_or_insert_with(|| {
                (
                    notice::grace(self.kill_grace, left),
                    notice::why(&self.machine, &self.acted),
                )
            });
            sup.interrupt(*grace, why);
        }
    }
}
