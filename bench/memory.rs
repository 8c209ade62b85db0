//! The scheduler's peak RSS (`VmHWM` just before SIGTERM) in the tick and
//! start-rate measurements.

use crate::ctx::{Bench, SMALL_FINISHED};
use crate::out::{count_label, f2, fig, heading};

/// Prints the peaks the tick and rate sections saw (n/a for one not run).
pub fn run(b: &mut Bench) {
    heading("scheduler peak RSS (VmHWM just before SIGTERM; goal <= 16 MiB)");
    let tick = |t: &Option<crate::ctx::TickRun>| f2(t.as_ref().and_then(|t| t.rss_mib));
    fig(
        &format!("tick, {} finished MiB", count_label(SMALL_FINISHED.into())),
        tick(&b.tick_small),
    );
    fig(
        &format!(
            "tick, {} finished MiB",
            count_label(b.knobs.finished.into())
        ),
        tick(&b.tick_big),
    );
    fig("runs per second MiB", f2(b.rate_rss_mib));
}
