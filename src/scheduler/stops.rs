//! The scheduler's stops: SIGTERM and SIGINT counted, not obeyed at once
//! (with overlap on, the first means drain and a second means stop now);
//! the tick loop and the starts ask how many came.

use std::sync::atomic::{AtomicUsize, Ordering};

/// How many SIGTERM/SIGINT arrived. With overlap on, the first means drain
/// and a second means stop now.
static STOPS: AtomicUsize = AtomicUsize::new(0);

/// The handler: counts the signal, nothing else.
extern "C" fn on_stop(_: libc::c_int) {
    STOPS.fetch_add(1, Ordering::SeqCst);
}

/// How many SIGTERM/SIGINT arrived so far.
pub fn stops() -> usize {
    STOPS.load(Ordering::SeqCst)
}

/// Counts SIGTERM and SIGINT (see [`stops`]) from now on, instead of
/// their default of ending the process.
pub fn install_stop_handlers() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGINT,
            on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}
