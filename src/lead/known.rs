//! Who leads, as this process's other threads see it: the alert thread
//! (alerts are the leader's to send) and the removals thread (its marks
//! are fenced on the leading session's backend pid). Told by the lead's
//! step each tick ([`crate::lead::hold::Leadership::step`]) and nowhere
//! else, so who leads is known in one part.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Whether this process leads, and on which backend pid; cloned to each
/// thread that asks.
#[derive(Clone, Default)]
pub struct Known {
    leads: Arc<AtomicBool>,
    /// The leading session's backend pid (0: not known, or not leading).
    pid: Arc<AtomicI32>,
}

impl Known {
    /// Whether this process leads now.
    pub fn leads(&self) -> bool {
        self.leads.load(Ordering::SeqCst)
    }

    /// The leading session's backend pid, if this process leads and it is
    /// known.
    pub fn pid(&self) -> Option<i32> {
        Some(self.pid.load(Ordering::SeqCst)).filter(|p| *p > 0)
    }

    /// Whether this process leads now.
    pub(super) fn set_leads(&self, leads: bool) {
        self.leads.store(leads, Ordering::SeqCst);
    }

    /// The leading session's backend pid (`None`: not known, or not
    /// leading).
    pub(super) fn set_pid(&self, pid: Option<i32>) {
        self.pid.store(pid.unwrap_or(0), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_is_known_only_while_set() {
        let k = Known::default();
        assert!(!k.leads());
        assert_eq!(k.pid(), None);
        k.set_leads(true);
        k.set_pid(Some(4242));
        let other = k.clone();
        assert!(other.leads());
        assert_eq!(other.pid(), Some(4242));
        k.set_pid(None);
        assert!(other.leads(), "leading, its pid not read yet");
        assert_eq!(other.pid(), None);
        k.set_leads(false);
        assert!(!other.leads());
    }
}
