//! Settings from the environment. Time constants all come from here, so the
//! tests run the real code with seconds where production has minutes.
//!
//! Every setting has a range (a [`Setting`]): a value outside it, or not a
//! number, is refused at start with one line naming the variable, its value
//! and the range (the command exits 2), never clamped in silence. The
//! ranges keep the tests' short values (a tick of 0.05 s, a stale limit of
//! 1 s) legal.

/// A setting of seconds (or of days: its `unit`): its variable, default
/// and range (inclusive).
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// The environment variable.
    pub name: &'static str,
    /// Its value when unset or empty.
    pub default: f64,
    /// The least value allowed.
    pub min: f64,
    /// The greatest value allowed.
    pub max: f64,
    /// What its number counts, as its refusal says it: `seconds`, `days`.
    pub unit: &'static str,
}

/// A day, in seconds.
const DAY: f64 = 86_400.0;

/// `ORCA_TICK_SECONDS`: how often the scheduler decides.
pub const TICK: Setting = Setting::new("ORCA_TICK_SECONDS", 1.0, 0.05, 60.0);
/// `ORCA_STALE_SECONDS`: a heartbeat older than this is stale.
pub const STALE: Setting = Setting::new("ORCA_STALE_SECONDS", 10.0, 1.0, DAY);
/// `ORCA_KILL_GRACE_SECONDS`: SIGTERM to SIGKILL (0: at once).
pub const KILL_GRACE: Setting = Setting::new("ORCA_KILL_GRACE_SECONDS", 10.0, 0.0, DAY);
/// `ORCA_STOP_GRACE_SECONDS`: how long a stopping process waits for its runs.
pub const STOP_GRACE: Setting = Setting::new("ORCA_STOP_GRACE_SECONDS", 30.0, 0.0, DAY);
/// `ORCA_LOGIN_XACT_SECONDS`: a login's longest transaction.
pub const LOGIN_XACT: Setting = Setting::new("ORCA_LOGIN_XACT_SECONDS", 10.0, 1.0, DAY);
/// `ORCA_POOL_SCALE_SECONDS`: how often the scaler passes (0: each tick).
pub const POOL_SCALE: Setting = Setting::new("ORCA_POOL_SCALE_SECONDS", 15.0, 0.0, DAY);
/// `ORCA_POOL_REMOVALS_SECONDS`: how often the removals thread looks for
/// idle machines (unset: `ORCA_POOL_SCALE_SECONDS`, at least 0.1).
pub const POOL_REMOVALS: Setting = Setting::new("ORCA_POOL_REMOVALS_SECONDS", 15.0, 0.1, DAY);
/// `ORCA_POOL_GROW_AFTER`: how long a run waits before it is demand.
pub const POOL_GROW_AFTER: Setting = Setting::new("ORCA_POOL_GROW_AFTER", 20.0, 0.0, DAY);
/// `ORCA_POOL_TRY_SECONDS`: at most one attempt to make a machine this often.
pub const POOL_TRY: Setting = Setting::new("ORCA_POOL_TRY_SECONDS", 60.0, 0.1, DAY);
/// `ORCA_POOL_BOOT_SECONDS`: a worker not seen by then is given up.
pub const POOL_BOOT: Setting = Setting::new("ORCA_POOL_BOOT_SECONDS", 900.0, 1.0, DAY);
/// `ORCA_POOL_LOST_SECONDS`: a worker silent this long is lost.
pub const POOL_LOST: Setting = Setting::new("ORCA_POOL_LOST_SECONDS", 300.0, 1.0, DAY);
/// `ORCA_POOL_IMAGE_SECONDS`: an image's architectures are read again after this.
pub const POOL_IMAGE: Setting = Setting::new("ORCA_POOL_IMAGE_SECONDS", 600.0, 1.0, DAY);
/// `ORCA_EC2_POOL_SECONDS`: how long an EC2 run's instances stay warm (0: not at all).
pub const EC2_POOL: Setting = Setting::new("ORCA_EC2_POOL_SECONDS", 0.0, 0.0, 7.0 * DAY);
/// `ORCA_POOL_NEXT_GRACE_SECONDS`: what `pool-next` waits beyond its seconds.
pub const POOL_NEXT_GRACE: Setting = Setting::new("ORCA_POOL_NEXT_GRACE_SECONDS", 60.0, 1.0, DAY);
/// `ORCA_WORKER_REFUSED_SECONDS`: a worker refused this long gives up.
pub const WORKER_REFUSED: Setting = Setting::new("ORCA_WORKER_REFUSED_SECONDS", 60.0, 1.0, DAY);
/// `ORCA_KEEP_DAYS`: history that ended longer ago than this is pruned by
/// the leader (in days: up to ten years).
pub const KEEP_DAYS: Setting = Setting::days("ORCA_KEEP_DAYS", 30.0, 1.0, 3650.0);
/// `ORCA_KEEP_SECONDS`: for tests and the bench, the same in seconds;
/// when set it wins over `ORCA_KEEP_DAYS` (unset: no default of its own).
pub const KEEP_SECONDS: Setting = Setting::new("ORCA_KEEP_SECONDS", 0.0, 1.0, 3650.0 * DAY);

/// How long history is kept, in seconds: `ORCA_KEEP_SECONDS` when set,
/// else `ORCA_KEEP_DAYS` (30 days by default). Either out of its range is
/// refused.
pub fn keep_seconds() -> Result<f64, String> {
    let days = KEEP_DAYS.read()?;
    let seconds = std::env::var(KEEP_SECONDS.name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| KEEP_SECONDS.parse(Some(&v)))
        .transpose()?;
    Ok(keep(days, seconds))
}

/// The keep from its two settings: the seconds' when given, else the days'.
pub fn keep(days: f64, seconds: Option<f64>) -> f64 {
    seconds.unwrap_or(days * DAY)
}

/// Every setting of seconds, for the tests (each default in its range).
#[cfg(test)]
const ALL: [Setting; 16] = [
    TICK,
    STALE,
    KILL_GRACE,
    STOP_GRACE,
    LOGIN_XACT,
    POOL_SCALE,
    POOL_REMOVALS,
    POOL_GROW_AFTER,
    POOL_TRY,
    POOL_BOOT,
    POOL_LOST,
    POOL_IMAGE,
    EC2_POOL,
    POOL_NEXT_GRACE,
    WORKER_REFUSED,
    KEEP_DAYS,
];

impl Setting {
    const fn new(name: &'static str, default: f64, min: f64, max: f64) -> Setting {
        Setting {
            name,
            default,
            min,
            max,
            unit: "seconds",
        }
    }

    const fn days(name: &'static str, default: f64, min: f64, max: f64) -> Setting {
        Setting {
            unit: "days",
            ..Setting::new(name, default, min, max)
        }
    }

    /// Its value from the environment (see [`Setting::parse`]).
    pub fn read(&self) -> Result<f64, String> {
        self.parse(std::env::var(self.name).ok().as_deref())
    }

    /// Its value given what it is set to (`None`: unset): the default when
    /// unset or empty, else a number in its range, else an error naming the
    /// variable, the value and the range.
    pub fn parse(&self, set: Option<&str>) -> Result<f64, String> {
        let Some(v) = set.filter(|v| !v.trim().is_empty()) else {
            return Ok(self.default);
        };
        match v.trim().parse::<f64>() {
            Ok(n) if n.is_finite() && (self.min..=self.max).contains(&n) => Ok(n),
            _ => Err(format!(
                "{}={v} is out of range: a number of {} from {} to {}",
                self.name, self.unit, self.min, self.max
            )),
        }
    }
}

/// The scheduler's timing, read once at start.
#[derive(Clone, Debug)]
pub struct Timing {
    /// `ORCA_TICK_SECONDS` (1): how often the tick runs.
    pub tick: f64,
    /// `ORCA_STALE_SECONDS` (10): a heartbeat older than this is stale.
    pub stale: f64,
    /// `ORCA_KILL_GRACE_SECONDS` (10): SIGTERM to SIGKILL on cancel and timeout.
    pub kill_grace: f64,
    /// `ORCA_STOP_GRACE_SECONDS` (30): how long a stopping scheduler waits for its children.
    pub stop_grace: f64,
    /// `ORCA_LOGIN_XACT_SECONDS` (10): a machine or instance login in one
    /// transaction longer than this has its session ended by the leader.
    pub login_xact: f64,
}

impl Timing {
    /// Reads the settings.
    pub fn from_env() -> Result<Timing, String> {
        Ok(Timing {
            tick: TICK.read()?,
            stale: STALE.read()?,
            kill_grace: KILL_GRACE.read()?,
            stop_grace: STOP_GRACE.read()?,
            login_xact: LOGIN_XACT.read()?,
        })
    }
}

/// The pool autoscaler's timing (`ORCA_POOL_*`), read once at start.
#[derive(Clone, Debug)]
pub struct PoolTiming {
    /// `ORCA_POOL_SCALE_SECONDS` (15): how often the scaler passes.
    pub scale: f64,
    /// `ORCA_POOL_REMOVALS_SECONDS` (unset: `scale`, at least 0.1): how
    /// often the removals thread (`pools::mark`) looks.
    pub removals: f64,
    /// `ORCA_POOL_GROW_AFTER` (20): how long a run waits before it is demand.
    pub grow_after: f64,
    /// `ORCA_POOL_TRY_SECONDS` (60): at most one attempt to make a machine this often.
    pub try_every: f64,
    /// `ORCA_POOL_BOOT_SECONDS` (900): a worker not seen by then is given up.
    pub boot: f64,
    /// `ORCA_POOL_LOST_SECONDS` (300): a worker silent this long is lost.
    pub lost: f64,
    /// `ORCA_POOL_IMAGE_SECONDS` (600): an image's architectures are read again after this.
    pub image: f64,
}

impl PoolTiming {
    /// Reads the settings.
    pub fn from_env() -> Result<PoolTiming, String> {
        let scale = POOL_SCALE.read()?;
        let removals = std::env::var(POOL_REMOVALS.name).ok();
        Ok(PoolTiming {
            scale,
            removals: removals_every(
                scale,
                POOL_REMOVALS.parse(removals.as_deref())?,
                removals.as_deref(),
            ),
            grow_after: POOL_GROW_AFTER.read()?,
            try_every: POOL_TRY.read()?,
            boot: POOL_BOOT.read()?,
            lost: POOL_LOST.read()?,
            image: POOL_IMAGE.read()?,
        })
    }
}

/// How often the removals thread looks: `set` (`ORCA_POOL_REMOVALS_SECONDS`,
/// parsed as `parsed`) if set, else the scaler's `scale` (at least
/// [`POOL_REMOVALS`]' least, 0.1 s: a scaler passing each tick does not
/// make the removals thread look without pause).
fn removals_every(scale: f64, parsed: f64, set: Option<&str>) -> f64 {
    match set.filter(|v| !v.trim().is_empty()) {
        Some(_) => parsed,
        None => scale.max(POOL_REMOVALS.min),
    }
}

/// `ORCA_LISTEN`: `on` (the default) or `off`. On, the scheduler (on a
/// session of its own, while it leads: `scheduler::wake`), pool
/// workers and `pool-next` wait on Postgres `LISTEN`, so a run starts (a warm instance is handed over) when
/// it is queued rather than at the next tick or poll; the tick and the poll
/// stay the floor either way. `off` is for a connection pooler in
/// transaction mode (where `LISTEN` does not reach the session) and for the
/// bench's comparison.
pub fn listen_on() -> Result<bool, String> {
    listen_parse(std::env::var("ORCA_LISTEN").ok().as_deref())
}

/// [`listen_on`]'s decision on the variable's value (`None`: unset).
fn listen_parse(v: Option<&str>) -> Result<bool, String> {
    match v.map(str::trim) {
        None | Some("") | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(format!("ORCA_LISTEN={other}: want on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_is_in_its_range() {
        for s in ALL {
            assert_eq!(s.parse(None), Ok(s.default), "{}", s.name);
            assert_eq!(s.parse(Some(" ")), Ok(s.default), "{}", s.name);
            assert!(s.min <= s.default && s.default <= s.max, "{}", s.name);
        }
    }

    #[test]
    fn the_removals_thread_looks_as_often_as_the_scaler_passes_unless_told() {
        assert_eq!(removals_every(15.0, 15.0, None), 15.0);
        assert_eq!(removals_every(0.0, 15.0, None), 0.1, "a pass each tick");
        assert_eq!(removals_every(2.0, 15.0, Some(" ")), 2.0, "empty: unset");
        assert_eq!(removals_every(0.0, 15.0, Some("15")), 15.0);
        assert!(POOL_REMOVALS.parse(Some("0.05")).is_err());
    }

    #[test]
    fn a_value_out_of_range_is_refused_naming_it() {
        assert_eq!(TICK.parse(Some("0.05")), Ok(0.05), "the tests' tick");
        assert_eq!(STALE.parse(Some("1")), Ok(1.0));
        assert_eq!(KILL_GRACE.parse(Some("0")), Ok(0.0), "no grace: legal");
        assert_eq!(
            TICK.parse(Some("0")),
            Err("ORCA_TICK_SECONDS=0 is out of range: a number of seconds from 0.05 to 60".into())
        );
        assert_eq!(
            STALE.parse(Some("0.5")),
            Err(
                "ORCA_STALE_SECONDS=0.5 is out of range: a number of seconds from 1 to 86400"
                    .into()
            )
        );
        for bad in ["-1", "nan", "inf", "1e9", "ten"] {
            let e = KILL_GRACE.parse(Some(bad)).unwrap_err();
            assert!(
                e.starts_with(&format!("ORCA_KILL_GRACE_SECONDS={bad} ")),
                "{e}"
            );
            assert!(e.ends_with("from 0 to 86400"), "{e}");
        }
    }

    #[test]
    fn the_keep_is_the_seconds_when_set_else_the_days() {
        assert_eq!(keep(30.0, None), 30.0 * 86_400.0, "30 days by default");
        assert_eq!(keep(30.0, Some(5.0)), 5.0, "the tests' seconds win");
        assert_eq!(KEEP_DAYS.parse(None), Ok(30.0));
        assert_eq!(
            KEEP_DAYS.parse(Some("0.5")),
            Err("ORCA_KEEP_DAYS=0.5 is out of range: a number of days from 1 to 3650".into())
        );
        assert_eq!(KEEP_SECONDS.parse(Some("2")), Ok(2.0));
        assert!(
            KEEP_SECONDS.parse(Some("0")).is_err(),
            "nothing kept: refused"
        );
    }

    #[test]
    fn listen_is_on_unless_said_off() {
        assert_eq!(listen_parse(None), Ok(true));
        assert_eq!(listen_parse(Some("")), Ok(true));
        assert_eq!(listen_parse(Some("on")), Ok(true));
        assert_eq!(listen_parse(Some("off")), Ok(false));
        assert_eq!(
            listen_parse(Some("no")),
            Err("ORCA_LISTEN=no: want on or off".into())
        );
    }
}
