//! The watchdog thread: holds timeouts with nothing but signals, so that
//! a tick held up by a hung call or a stalled connection can't hold them
//! up.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::state::Shared;

/// The watchdog thread: every 50 ms, holds the timeouts of the attempts
/// that have one, with nothing but signals (no I/O that could hang): at
/// the timeout SIGTERM to the attempt's process group, `grace` later the
/// keeper asked to kill everything the command started (by token: the
/// keeper signals only commands it has not reaped).
pub(super) fn watchdog_loop(shared: Arc<Mutex<Shared>>, grace: Duration) {
    loop {
        {
            let mut shared = shared.lock().expect("shared");
            if shared.done {
                return;
            }
            let now = Instant::now();
            for w in &mut shared.watches {
                match w.termed {
                    None if now >= w.deadline => {
                        log::info!("run {} attempt {}: Timeout: SIGTERM", w.id, w.start);
                        w.handle.signal(libc::SIGTERM);
                        w.termed = Some((now, false));
                    }
                    Some((at, false)) if now >= at + grace => {
                        log::info!(
                            "run {} attempt {}: still alive: SIGKILL to it and everything it started",
                            w.id,
                            w.start
                        );
                        w.handle.kill_all();
                        w.termed = Some((at, true));
                    }
                    _ => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
