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

/// An identifier at the start of `text`.
fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The first names of a group's paths: `a, b::c, d as e}` → `a`, `b`, `d`.
fn group_heads(text: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut at_head = true;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_head = true,
            c if at_head && !c.is_whitespace() => {
                heads.push(ident(&text[i..]));
                at_head = false;
            }
            _ => {}
        }
    }
    heads
}

/// The parts `text`, the text of a file whose module path is `module`
/// (`src/machines/walk.rs`: `["machines", "walk"]`), names: `crate::PART`,
/// each head of a group `crate::{A, B::…}`, and a `super::` chain that
/// climbs to the crate's root (`super::PART` in `src/runs.rs`,
/// `super::super::PART` in `src/machines/walk.rs`). From a `super::` chain
/// only names in `parts` count: in a file's own `mod tests`, `super::` is
/// the file itself, whose items aren't parts.
fn named_parts(text: &str, module: &[String], parts: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, m) in text.match_indices("crate::") {
        let rest = &text[i + m.len()..];
        match rest.strip_prefix('{') {
            Some(group) => out.extend(group_heads(group)),
            None => out.push(ident(rest)),
        }
    }
    let mut i = 0;
    while let Some(at) = text[i..].find("super::") {
        let begin = i + at;
        let mut end = begin;
        let mut climbs = 0;
        while text[end..].starts_with("super::") {
            climbs += 1;
            end += "super::".len();
        }
        // Only a chain that starts a path: not the tail of another word.
        let starts = !text[..begin].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        if starts && climbs >= module.len() {
            let rest = &text[end..];
            let names = match rest.strip_prefix('{') {
                Some(group) => group_heads(group),
                None => vec![ident(rest)],
            };
            out.extend(names.into_iter().filter(|n| parts.contains(&n.as_str())));
        }
        i = end;
    }
    out.retain(|p| !p.is_empty() && p != "self");
    out
}

/// The module path of a file under `src/`: `src/db/sql.rs` is
/// `["db", "sql"]`, `src/db/mod.rs` and `src/db.rs` are `["db"]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if path.last().is_some_and(|l| l == "mod") {
        path.pop();
    }
    path
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
        let parts: Vec<&str> = layer_of.keys().map(String::as_str).collect();
        for used in named_parts(&text, &module_of(&src, file), &parts) {
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
    // The check itself: every way a file can name another part is seen.
    let parts = ["db", "lead", "pools", "runs", "scheduler", "warm_pool"];
    let top = vec!["runs".to_string()];
    let nested = vec!["machines".to_string(), "walk".to_string()];
    assert_eq!(
        named_parts(
            "use crate::scheduler::tick; [`crate::db::Fault`]",
            &top,
            &parts
        ),
        ["scheduler", "db"]
    );
    assert_eq!(
        named_parts(
            "use crate::{db as a, scheduler::{X, Y}, self};",
            &top,
            &parts
        ),
        ["db", "scheduler"]
    );
    assert_eq!(
        named_parts(
            "use super::warm_pool::Role; use super::{lead, db};",
            &top,
            &parts
        ),
        ["warm_pool", "lead", "db"]
    );
    assert_eq!(
        named_parts("use super::super::pools::decide;", &nested, &parts),
        ["pools"]
    );
    // Within its own part, `super::` names no other part.
    assert!(named_parts("use super::fleet; use super::*;", &nested, &parts).is_empty());
    assert!(named_parts("let x = super::helper(1);", &top, &parts).is_empty());
    assert!(named_parts("not_super::x", &top, &parts).is_empty());
    let src = Path::new("/r/src");
    assert_eq!(part_of(src, Path::new("/r/src/db/sql.rs")), "db");
    assert_eq!(part_of(src, Path::new("/r/src/runs.rs")), "runs");
    assert_eq!(module_of(src, Path::new("/r/src/db/mod.rs")), ["db"]);
    assert_eq!(module_of(src, Path::new("/r/src/machines/walk.rs")), nested);
}
