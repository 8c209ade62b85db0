//! Writes orca's shell completions and man pages, generated from its
//! command definitions (`src/cli.rs`) by clap's own generators, into a
//! folder laid out as `$PREFIX/share` is:
//!
//! ```text
//! gen-docs DIR
//!   DIR/bash-completion/completions/orca
//!   DIR/zsh/site-functions/_orca
//!   DIR/fish/vendor_completions.d/orca.fish
//!   DIR/man/man1/orca.1, and orca-COMMAND.1 for each command
//! ```
//!
//! An example target, so the generators (dev-dependencies) are never linked
//! into the orca binary, whose size has a budget. `make docs-gen` runs it;
//! `make install` installs what it wrote (`scripts/install.sh`). Each file
//! is written whole under a temporary name and renamed, so a reader (a
//! concurrent `make install`) never sees half of one; `orca.1` is written
//! last, as make judges the set by it.

#[allow(dead_code)]
#[path = "../src/cli.rs"]
mod cli;

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir] = args.as_slice() else {
        eprintln!("usage: gen-docs DIR");
        std::process::exit(2);
    };
    if let Err(e) = generate(Path::new(dir)) {
        eprintln!("gen-docs: {e}");
        std::process::exit(1);
    }
}

fn generate(dir: &Path) -> std::io::Result<()> {
    let mut cmd = cli::Cli::command();
    cmd.build();
    for (shell, path) in [
        (Shell::Bash, "bash-completion/completions/orca"),
        (Shell::Zsh, "zsh/site-functions/_orca"),
        (Shell::Fish, "fish/vendor_completions.d/orca.fish"),
    ] {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), "orca", &mut text);
        write(&dir.join(path), &text)?;
    }
    let man = dir.join("man/man1");
    pages(&cmd, "orca", &man)?;
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut page)?;
    write(&man.join("orca.1"), &page)
}

/// A page for each command under `cmd` (`orca-run.1`, `orca-deploy-check.1`
/// too), named as clap_mangen names them in its SUBCOMMANDS lists.
fn pages(cmd: &clap::Command, prefix: &str, man: &Path) -> std::io::Result<()> {
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        // clap's names are `&'static str` (its "string" feature is off, as
        // in orca): this process ends in a moment.
        let name: &'static str = format!("{prefix}-{}", sub.get_name()).leak();
        let mut page = Vec::new();
        clap_mangen::Man::new(sub.clone().name(name)).render(&mut page)?;
        write(&man.join(format!("{name}.1")), &page)?;
        pages(sub, name, man)?;
    }
    Ok(())
}

/// Writes `text` to `path` whole: under a name of this process's, then
/// renamed over it.
fn write(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let parent = path.parent().expect("a file in a folder");
    std::fs::create_dir_all(parent)?;
    let tmp: PathBuf = parent.join(format!(
        ".{}.{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
