//! Names the commit the binary is built from, for `orca --version`
//! (`ORCA_COMMIT`): `git rev-parse --short HEAD` when the source is a git
//! checkout (a `.git` beside `Cargo.toml`), `unknown` otherwise (a tarball,
//! no git). Built again when the checkout's HEAD or its branch moves. And
//! the architecture it is built for (`ORCA_ARCH`: `x86_64`, `aarch64`, as
//! cargo names the target's).
//!
//! And writes the `.sql` files of `sql/`, `sql/migrations/` and
//! `sql/functions/` as the binary embeds them, without their whole-line comments (`src/db/strip.rs`), to
//! `OUT_DIR/sql/`.

use std::path::Path;
use std::process::Command;

#[path = "src/db/strip.rs"]
mod strip;

/// Writes every `.sql` file of `sql/`, `sql/migrations/` and `sql/functions/` under `root`,
/// stripped, to the same place under `OUT_DIR/sql/`.
fn strip_sql_files(root: &Path) {
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("sql");
    for sub in ["", "migrations", "functions"] {
        let from = root.join("sql").join(sub);
        let to = out.join(sub);
        std::fs::create_dir_all(&to).expect("OUT_DIR/sql is writable");
        for entry in std::fs::read_dir(&from).expect("sql/ is readable") {
            let path = entry.expect("sql/ is readable").path();
            if path.extension().is_some_and(|e| e == "sql") {
                let text = std::fs::read_to_string(&path).expect("a .sql file is UTF-8");
                let name = path.file_name().expect("a file's name");
                std::fs::write(to.join(name), strip::strip_sql(&text))
                    .expect("OUT_DIR/sql is writable");
            }
        }
    }
    println!("cargo:rerun-if-changed=sql");
}

/// `git ARGS` in `dir`: its output's first line, if it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let line = String::from_utf8(out.stdout).ok()?;
    let line = line.lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

fn main() {
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&root);
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/db/strip.rs");
    strip_sql_files(root);
    let commit = if root.join(".git").exists() {
        // A worktree's HEAD, the branch it is on and packed refs live in
        // git's own directories, wherever they are: ask git for their paths.
        let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
        if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
            watched.push(branch);
        }
        for name in watched {
            if let Some(path) = git(root, &["rev-parse", "--git-path", &name]) {
                let path = root.join(path);
                if path.exists() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
        }
        git(root, &["rev-parse", "--short", "HEAD"])
    } else {
        None
    };
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    println!("cargo:rustc-env=ORCA_ARCH={arch}");
    println!(
        "cargo:rustc-env=ORCA_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
