//! The binary's size: the static one `make static` builds (budget 3.5 MiB)
//! and the one the bench measures.

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
    let musl = target.join("x86_64-unknown-linux-musl/release/orca");
    match std::fs::metadata(&musl) {
        Ok(m) => {
            fig("static binary bytes", m.len());
            fig("static binary MiB", mib(m.len()));
        }
        Err(_) => fig("static binary", "not built (make static)"),
    }
    let size = std::fs::metadata(bin()).map_or(0, |m| m.len());
    fig(&format!("bench binary ({}) MiB", bin()), mib(size));
}
