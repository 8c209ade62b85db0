//! Small things every test uses: scratch directories, unique names,
//! waiting on a condition with a deadline, bytes as text, TOML strings.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub(super) fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// Waits until `f` holds, polling every 100 ms; panics naming `what` when
/// `secs` pass first.
pub fn wait_until(what: &str, secs: f64, f: impl FnMut() -> bool) {
    if !within(secs, Duration::from_millis(100), f) {
        panic!("timed out after {secs}s waiting for: {what}");
    }
}

/// Whether `f` holds within `secs`, polled every `every` (at once first).
pub fn within(secs: f64, every: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// A scratch directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory under the system's temp dir.
    pub fn new() -> TempDir {
        let p = std::env::temp_dir().join(unique("orca-test"));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// A path inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `text` to `name` inside it and returns the path as a string.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Bytes as text, for messages.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `text` as a TOML basic string, quotes included.
pub fn toml_str(text: &str) -> String {
    format!("{text:?}")
}

/// `scripts/NAME` as orca embeds it (after `scripts/machine-prelude.sh`),
/// written into `dir`; its path, to run with `sh`.
pub fn machine_script(dir: &TempDir, name: &str) -> String {
    let read = |f: &str| {
        let path = format!("{}/scripts/{f}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    dir.write(
        &format!("embedded-{name}"),
        &(read("machine-prelude.sh") + &read(name)),
    )
}

/// What `orca logs` printed of a run with one attempt, without the line
/// naming the attempt (`--- attempt 1 of …`) it prints first.
pub fn logs_body(out: &[u8]) -> &[u8] {
    match out.iter().position(|&b| b == b'\n') {
        Some(i) if out.starts_with(b"--- attempt 1 of ") => &out[i + 1..],
        _ => out,
    }
}
