//! The parts of `src/` stand in the layers ARCHITECTURE.md draws: each
//! imports (or links to in its docs) only parts on lines above its own, so
//! there is no import circle and nothing reaches up.

use crate::setup::{blocks, repo_file};
use std::collections::BTreeMap;
use std::path::Path;

/// The layers, lowest first, from ARCHITECTURE.md's `layers` block.
fn layers() -> Vec<Vec<String>> {
    let page = repo_file("ARCHITECTURE.md");
    let found = blocks(&page, "layers");
    assert_eq!(found.len(), 1, "ARCHITECTURE.md has one ```layers block");
    found[0]
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .filter(|l: &Vec<String>| !l.is_empty())
        .collect()
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The parts `text` names as `crate::PART`.
fn named_parts(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .map(|(i, m)| {
            text[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// The top-level part a file under `src/` belongs to (`src/db/sql.rs`:
/// `db`; `src/runs.rs`: `runs`).
fn part_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

#[test]
fn each_part_imports_only_parts_below_it() {
    let layers = layers();
    let mut layer_of = BTreeMap::new();
    for (n, line) in layers.iter().enumerate() {
        for part in line {
            assert!(
                layer_of.insert(part.clone(), n).is_none(),
                "{part} is on two lines of the layers block"
            );
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let part = part_of(&src, file);
        let Some(&mine) = layer_of.get(&part) else {
            wrong.push(format!("{part}: not in ARCHITECTURE.md's layers"));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for used in named_parts(&text) {
            if used == part {
                continue;
            }
            match layer_of.get(&used) {
                Some(&theirs) if theirs < mine => {}
                Some(_) => wrong.push(format!(
                    "{}: {part} uses crate::{used}, on its own line or below it",
                    file.strip_prefix(&src).unwrap().display()
                )),
                None => wrong.push(format!(
                    "{}: crate::{used} is in no layer",
                    file.strip_prefix(&src).unwrap().display()
                )),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "parts out of their layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_part_reaching_up_is_found() {
    // The check itself: a use of a part above is seen, `crate::` inside a
    // longer word is still a use, and the part is the path's first name.
    assert_eq!(
        named_parts("use crate::scheduler::tick; [`crate::db::Fault`]"),
        ["scheduler", "db"]
    );
    let src = Path::new("/r/src");
    assert_eq!(part_of(src, Path::new("/r/src/db/sql.rs")), "db");
    assert_eq!(part_of(src, Path::new("/r/src/runs.rs")), "runs");
}
