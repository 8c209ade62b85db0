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
}

impl Timing {
    /// Reads the settings.
    pub fn from_env() -> Result<Timing, String> {
        Ok(Timing {
            tick: seconds("ORCA_TICK_SECONDS", 1.0)?.max(0.05),
            stale: seconds("ORCA_STALE_SECONDS", 10.0)?.max(1.0),
            kill_grace: seconds("ORCA_KILL_GRACE_SECONDS", 10.0)?,
            stop_grace: seconds("ORCA_STOP_GRACE_SECONDS", 30.0)?,
        })
    }
}
