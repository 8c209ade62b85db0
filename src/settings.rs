//! Settings from the environment. Time constants all come from here, so the
//! tests run the real code with seconds where production has minutes.

/// A number of seconds from environment variable `name`, else `default`.
/// A value that is not a non-negative number is an error naming the variable.
pub fn seconds(name: &str, default: f64) -> Result<f64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) if v.trim().is_empty() => Ok(default),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(n) if n.is_finite() && (0.0..=1e7).contains(&n) => Ok(n),
            _ => Err(format!("{name}={v} is not a number of seconds")),
        },
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
            tick: seconds("ORCA_TICK_SECONDS", 1.0)?.max(0.05),
            stale: seconds("ORCA_STALE_SECONDS", 10.0)?.max(1.0),
            kill_grace: seconds("ORCA_KILL_GRACE_SECONDS", 10.0)?,
            stop_grace: seconds("ORCA_STOP_GRACE_SECONDS", 30.0)?,
            login_xact: seconds("ORCA_LOGIN_XACT_SECONDS", 10.0)?.max(1.0),
        })
    }
}

/// The pool autoscaler's timing (`ORCA_POOL_*`), read once at start.
#[derive(Clone, Debug)]
pub struct PoolTiming {
    /// `ORCA_POOL_SCALE_SECONDS` (15): how often the scaler passes.
    pub scale: f64,
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
        Ok(PoolTiming {
            scale: seconds("ORCA_POOL_SCALE_SECONDS", 15.0)?,
            grow_after: seconds("ORCA_POOL_GROW_AFTER", 20.0)?,
            try_every: seconds("ORCA_POOL_TRY_SECONDS", 60.0)?,
            boot: seconds("ORCA_POOL_BOOT_SECONDS", 900.0)?,
            lost: seconds("ORCA_POOL_LOST_SECONDS", 300.0)?,
            image: seconds("ORCA_POOL_IMAGE_SECONDS", 600.0)?,
        })
    }
}
