//! ARCHITECTURE.md is a map of `src/` that must stay true: no file of
//! `src/` imports itself back through others (file to file, not only part
//! to part, which `layers.rs` checks), no source file is over 700 lines,
//! and every path and code name the page cites exists.

use crate::setup::repo_file;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a source file may be, in lines.
const MAX_LINES: usize = 700;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` whose name ends with one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, exts, out);
        } else if exts
            .iter()
            .any(|e| path.extension().is_some_and(|x| x == *e))
        {
            out.push(path);
        }
    }
}

/// The module path of a file under `src/`: `src/db/sql.rs` is
/// `["db", "sql"]`, `src/db/mod.rs` is `["db"]`, `src/main.rs` is `[]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if path.last().is_some_and(|l| l == "mod" || l == "main") {
        path.pop();
    }
    path
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths of a use tree at the start of `text`, each as its segments:
/// `a::b::{c, d::e}` → `a::b::c`, `a::b::d::e`.
fn use_tree(text: &str) -> Vec<Vec<String>> {
    fn tree(text: &str, at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let bytes = text.as_bytes();
        let mut path = prefix.to_vec();
        loop {
            while *at < bytes.len() && (bytes[*at] as char).is_whitespace() {
                *at += 1;
            }
            if *at < bytes.len() && bytes[*at] == b'{' {
                *at += 1;
                loop {
                    tree(text, at, &path, out);
                    while *at < bytes.len() && (bytes[*at] as char).is_whitespace() {
                        *at += 1;
                    }
                    match bytes.get(*at) {
                        Some(b',') => *at += 1,
                        Some(b'}') => {
                            *at += 1;
                            return;
                        }
                        _ => return,
                    }
                    while *at < bytes.len() && (bytes[*at] as char).is_whitespace() {
                        *at += 1;
                    }
                    if bytes.get(*at) == Some(&b'}') {
                        *at += 1;
                        return;
                    }
                }
            }
            let start = *at;
            while *at < bytes.len() && is_ident(bytes[*at] as char) {
                *at += 1;
            }
            if start == *at {
                break;
            }
            path.push(text[start..*at].to_string());
            if text[*at..].starts_with("::") {
                *at += 2;
            } else {
                break;
            }
        }
        if path.len() > prefix.len() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    tree(text, &mut 0, &[], &mut out);
    out
}

/// The text of a Rust file without its comments and its `#[cfg(test)]`
/// modules (a test module's `super::*` is the file itself).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i32> = None;
    let mut test_next = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(depth) = skip_depth.as_mut() {
            *depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if *depth <= 0 {
                skip_depth = None;
            }
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            test_next = true;
            continue;
        }
        if test_next && trimmed.starts_with("mod ") {
            test_next = false;
            let depth = line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if depth > 0 {
                skip_depth = Some(depth);
            }
            continue;
        }
        test_next = false;
        if trimmed.starts_with("//") {
            continue;
        }
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The module paths `text` (the code of the file of module `module`)
/// names: `crate::…`, `super::…` and `self::…` paths and use trees, and
/// bare paths through its own child modules (`child::Tail` in a `mod.rs`).
fn named_modules(
    text: &str,
    module: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        let starts = is_ident(c) && !text[..i].ends_with(|p: char| is_ident(p) || p == ':');
        if !starts {
            i += c.len_utf8();
            continue;
        }
        let rest = &text[i..];
        let (base, skip): (Option<Vec<String>>, usize) =
            if let Some(r) = rest.strip_prefix("crate::") {
                (Some(Vec::new()), rest.len() - r.len())
            } else if rest.starts_with("super::") {
                let mut climbs = 0;
                let mut r = rest;
                while let Some(t) = r.strip_prefix("super::") {
                    climbs += 1;
                    r = t;
                }
                let base = module[..module.len().saturating_sub(climbs)].to_vec();
                (Some(base), rest.len() - r.len())
            } else if let Some(r) = rest.strip_prefix("self::") {
                (Some(module.to_vec()), rest.len() - r.len())
            } else {
                let word: String = rest.chars().take_while(|&c| is_ident(c)).collect();
                let mut child = module.to_vec();
                child.push(word.clone());
                if rest[word.len()..].starts_with("::") && modules.contains(&child) {
                    (Some(module.to_vec()), 0)
                } else {
                    (None, word.len().max(1))
                }
            };
        match base {
            Some(base) => {
                for path in use_tree(&rest[skip..]) {
                    let mut full = base.clone();
                    full.extend(path);
                    out.push(full);
                }
                i += skip.max(1);
            }
            None => i += skip,
        }
    }
    out
}

/// The file a module path lands in: its longest prefix that is a module.
fn file_of(path: &[String], modules: &BTreeMap<Vec<String>, PathBuf>) -> Option<PathBuf> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).cloned())
}

/// Each file of `src/` and the files of `src/` it imports.
fn import_graph() -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let src = root().join("src");
    let mut found = Vec::new();
    files(&src, &["rs"], &mut found);
    let modules: BTreeMap<Vec<String>, PathBuf> = found
        .iter()
        .map(|f| {
            (
                module_of(&src, f),
                f.strip_prefix(root()).unwrap().to_path_buf(),
            )
        })
        .collect();
    let names: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for file in &found {
        let me = file.strip_prefix(root()).unwrap().to_path_buf();
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let mut to = BTreeSet::new();
        for path in named_modules(&code, &module_of(&src, file), &names) {
            // `crate::x` alone names the crate root only through `main.rs`.
            if let Some(target) = file_of(&path, &modules)
                && target != me
                && !(path.is_empty())
            {
                to.insert(target);
            }
        }
        graph.insert(me, to);
    }
    graph
}

/// The circles of `graph`: each strongly connected set of two or more.
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    // Tarjan's algorithm, recursive (the graph is a few dozen files).
    struct T<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a PathBuf) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = t.graph.get_key_value(w) else {
                continue;
            };
            if !t.index.contains_key(w) {
                visit(t, w);
                let low = t.low[v].min(t.low[w]);
                t.low.insert(v, low);
            } else if t.on.contains(w) {
                let low = t.low[v].min(t.index[w]);
                t.low.insert(v, low);
            }
        }
        if t.low[v] == t.index[v] {
            let mut set = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                set.push(w.clone());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                t.out.push(set);
            }
        }
    }
    let mut t = T {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_file_of_src_imports_itself_back() {
    let graph = import_graph();
    let found = circles(&graph);
    let said: Vec<String> = found
        .iter()
        .map(|set| {
            let ties: Vec<String> = set
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| set.contains(b))
                        .map(move |b| format!("{} -> {}", a.display(), b.display()))
                })
                .collect();
            ties.join(", ")
        })
        .collect();
    assert!(said.is_empty(), "import circles:\n{}", said.join("\n"));
}

#[test]
fn a_circle_of_files_is_found() {
    // The check itself: each way a file names another is an arrow.
    let modules: BTreeSet<Vec<String>> = [
        vec![],
        vec!["s".to_string()],
        vec!["s".to_string(), "child".to_string()],
        vec!["s".to_string(), "output".to_string()],
    ]
    .into_iter()
    .collect();
    let s = vec!["s".to_string()];
    let child = vec!["s".to_string(), "child".to_string()];
    let named = |text: &str, m: &[String]| named_modules(&code_of(text), m, &modules);
    assert_eq!(
        named("use super::output::read_into;", &child),
        [vec!["s", "output", "read_into"]]
    );
    assert_eq!(
        named("use crate::s::{child::Tail, output};", &child),
        [vec!["s", "child", "Tail"], vec!["s", "output"]]
    );
    assert_eq!(
        named("let t = child::Tail::new();", &s),
        [vec!["s", "child", "Tail", "new"]]
    );
    assert_eq!(named("self::output::go()", &s), [vec!["s", "output", "go"]]);
    // Comments, test modules and words that merely end in a path don't count.
    assert!(named("// use super::output;\n/// [`crate::s`]", &child).is_empty());
    assert!(named("#[cfg(test)]\nmod tests {\n    use super::*;\n}\n", &child).is_empty());
    assert!(named("not_super::x; a::child::b", &s).is_empty());

    let p = |s: &str| PathBuf::from(s);
    let mut graph = BTreeMap::new();
    graph.insert(p("a"), [p("b")].into_iter().collect());
    graph.insert(p("b"), [p("c")].into_iter().collect());
    graph.insert(p("c"), [p("a")].into_iter().collect());
    graph.insert(p("d"), [p("a")].into_iter().collect());
    assert_eq!(circles(&graph), [vec![p("a"), p("b"), p("c")]]);
    graph.insert(p("c"), BTreeSet::new());
    assert!(circles(&graph).is_empty());
}

#[test]
fn no_source_file_is_over_700_lines() {
    let mut found = Vec::new();
    for dir in ["src", "tests", "bench"] {
        files(&root().join(dir), &["rs"], &mut found);
    }
    let mut long: Vec<String> = found
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > MAX_LINES)
                .then(|| format!("{}: {lines}", f.strip_prefix(root()).unwrap().display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The text between each pair of backticks of `page`, outside fenced blocks.
fn cited(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            out.push(inside.to_string());
        }
    }
    out
}

/// A cited path of the repository (`src/db/mod.rs`, `sql/`,
/// `supervise/keeper.rs` under `src/`), if the citation is one.
fn as_path(cite: &str) -> Option<&str> {
    let known = [
        "src/",
        "sql/",
        "tests/",
        "scripts/",
        "docs/",
        "bench/",
        "examples/",
    ];
    let path = cite.split_whitespace().next()?;
    let ext = [".rs", ".sql", ".sh", ".md", ".toml", "/"];
    let looks = path.contains('/')
        && !path.starts_with('/')
        && !path.contains('*')
        && !path.contains("NNNN")
        && !path.contains('<')
        && !path.contains("OUT_DIR")
        && ext.iter().any(|e| path.ends_with(e));
    (looks && (known.iter().any(|k| path.starts_with(k)) || path.ends_with(".rs"))).then_some(path)
}

/// A cited code name (`Leadership::step`, `orca.worker_claim`,
/// `ORCA_TICK_SECONDS`, `judge_lead`), as the words it is made of, if the
/// citation is one: plain words (`local`) and text (`orca runs`) are not.
fn as_name(cite: &str) -> Option<Vec<&str>> {
    let name = cite.trim_end_matches("()");
    let ok = !name.is_empty()
        && name.chars().all(|c| is_ident(c) || c == ':' || c == '.')
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && !name.ends_with('.');
    let codey = name.contains("::")
        || name.contains('_')
        || name.starts_with("orca.")
        || name.chars().skip(1).any(|c| c.is_ascii_uppercase());
    (ok && codey).then(|| {
        name.split([':', '.'])
            .filter(|w| !w.is_empty() && *w != "orca" && *w != "crate")
            .collect()
    })
}

/// Every word of the code, SQL, scripts and tests orca is made of (not of
/// its prose: a page citing a name doesn't make it exist).
fn words() -> BTreeSet<String> {
    let mut found = Vec::new();
    for dir in ["src", "sql", "scripts", "tests", "bench", "examples"] {
        files(
            &root().join(dir),
            &["rs", "sql", "sh", "service", "toml"],
            &mut found,
        );
    }
    // Of this file only its functions' names: its self-checks spell out
    // names that need not exist.
    found.retain(|f| !f.ends_with("tests/it/map.rs"));
    let mut words: BTreeSet<String> = repo_file("tests/it/map.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("fn "))
        .map(|l| l.chars().take_while(|&c| is_ident(c)).collect())
        .collect();
    for top in ["Makefile", "build.rs", "Cargo.toml"] {
        found.push(root().join(top));
    }
    for f in found {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for w in text.split(|c: char| !is_ident(c)) {
            if !w.is_empty() {
                words.insert(w.to_string());
            }
        }
    }
    words
}

#[test]
fn every_path_and_name_architecture_cites_exists() {
    let page = repo_file("ARCHITECTURE.md");
    let words = words();
    let mut sources = Vec::new();
    files(&root().join("src"), &["rs"], &mut sources);
    let mut missing = BTreeSet::new();
    for cite in cited(&page) {
        if let Some(path) = as_path(&cite) {
            // A path within a part's folder (`check/tests.rs`) may be cited
            // by its tail, where the row around it names the folder.
            let exists = root().join(path).exists()
                || sources
                    .iter()
                    .any(|f| f.to_string_lossy().ends_with(&format!("/{path}")));
            if !exists {
                missing.insert(format!("path `{path}`"));
            }
        } else if let Some(parts) = as_name(&cite) {
            for part in parts {
                if !words.contains(part) {
                    missing.insert(format!("name `{cite}` ({part})"));
                }
            }
        }
    }
    let missing: Vec<String> = missing.into_iter().collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md cites what the tree doesn't have:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_citation_is_read_as_a_path_or_a_name() {
    assert_eq!(as_path("src/db/mod.rs"), Some("src/db/mod.rs"));
    assert_eq!(as_path("supervise/keeper.rs"), Some("supervise/keeper.rs"));
    assert_eq!(as_path("sql/"), Some("sql/"));
    assert_eq!(as_path("sql/*.sql"), None);
    assert_eq!(as_path("/proc"), None);
    assert_eq!(
        as_name("Leadership::step"),
        Some(vec!["Leadership", "step"])
    );
    assert_eq!(as_name("orca.worker_claim"), Some(vec!["worker_claim"]));
    assert_eq!(
        as_name("ORCA_TICK_SECONDS"),
        Some(vec!["ORCA_TICK_SECONDS"])
    );
    assert_eq!(as_name("judge_lead()"), Some(vec!["judge_lead"]));
    assert_eq!(as_name("local"), None);
    assert_eq!(as_name("orca runs"), None);
    assert_eq!(as_name("file:LINE: message"), None);
    let page = "a `x_y` b `src/a.rs`\n```\n`not_this`\n```\n";
    assert_eq!(cited(page), ["x_y", "src/a.rs"]);
}
