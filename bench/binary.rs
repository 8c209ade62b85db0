//! The binary's size: the static ones `make static` builds, x86_64 and
//! aarch64 (budget 3.5 MiB each), and the one the bench measures.

use crate::ctx::Bench;
use crate::harness::bin;
use crate::out::{fig, heading, mib};
use std::path::Path;

/// Prints the sizes.
pub fn run(_: &mut Bench) {
    heading("binary size (budget 3.5 MiB)");
    // The target directory this bench was built in: CARGO_BIN_EXE_orca is
    // its release/orca.
    let target = Path::new(env!("CARGO_BIN_EXE_orca"))
        .parent()
        .and_then(Path::parent)
        .unwrap();
    for (arch, name) in [
        ("x86_64-unknown-linux-musl", "static binary"),
        ("aarch64-unknown-linux-musl", "static aarch64 binary"),
    ] {
        match std::fs::metadata(target.join(arch).join("release/orca")) {
            Ok(m) => {
                fig(&format!("{name} bytes"), m.len());
                fig(&format!("{name} MiB"), mib(m.len()));
            }
            Err(_) => fig(name, "not built (make static)"),
        }
    }
    let size = std::fs::metadata(bin()).map_or(0, |m| m.len());
    fig(&format!("bench binary ({}) MiB", bin()), mib(size));
}
