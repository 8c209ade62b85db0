//! Query plans: `EXPLAIN (ANALYZE, BUFFERS)` of the tick's statements on
//! the big database, read from the JSON form of the plan: execution time,
//! the top node's buffers, and each scan (which index) with the rows its
//! filter threw away.

use crate::ctx::{Bench, QUEUED};
use crate::out::{fig, heading};
use postgres::types::ToSql;
use serde_json::Value;

/// The statements the scheduler makes every tick, as it makes them.
const STARTABLE: &str = include_str!("../sql/startable.sql");
const SWEEP: &str = include_str!("../sql/sweep.sql");
const TICK_PIPELINES: &str = include_str!("../sql/tick_pipelines.sql");

/// The `Buffers:` figures of a plan node as `EXPLAIN`'s text form prints
/// them: `shared hit=N read=N ...`, only those not zero.
fn buffers(node: &Value) -> String {
    let mut groups = Vec::new();
    for (group, keys) in [
        ("shared", &["Hit", "Read", "Dirtied", "Written"][..]),
        ("local", &["Hit", "Read", "Dirtied", "Written"][..]),
        ("temp", &["Read", "Written"][..]),
    ] {
        let parts: Vec<String> = keys
            .iter()
            .filter_map(|k| {
                let title = format!("{} {k} Blocks", capitalised(group));
                let n = node.get(&title)?.as_u64()?;
                (n > 0).then(|| format!("{}={n}", k.to_lowercase()))
            })
            .collect();
        if !parts.is_empty() {
            groups.push(format!("{group} {}", parts.join(" ")));
        }
    }
    groups.join(", ")
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// Lines for the scans under `node` (itself first, then its children in
/// order, as the text form lists them): `Index Scan using IDX on REL ALIAS
/// (rows=N loops=N)` or `... (never executed)`, and `Rows Removed by
/// Filter: N` after a scan whose filter threw rows away.
fn scans(node: &Value, out: &mut Vec<String>) {
    let kind = node["Node Type"].as_str().unwrap_or("");
    if kind.contains("Index") || kind.contains("Seq Scan") || kind.contains("Heap Scan") {
        let mut line = kind.to_string();
        if node["Scan Direction"].as_str() == Some("Backward") {
            line += " Backward";
        }
        let index = node["Index Name"].as_str();
        match (kind, index) {
            ("Bitmap Index Scan", Some(i)) => line += &format!(" on {i}"),
            (_, Some(i)) => line += &format!(" using {i}"),
            _ => {}
        }
        if let Some(rel) = node["Relation Name"].as_str() {
            line += &format!(" on {rel}");
            if let Some(alias) = node["Alias"].as_str().filter(|a| *a != rel) {
                line += &format!(" {alias}");
            }
        }
        let loops = node["Actual Loops"].as_f64().unwrap_or(0.0);
        if loops == 0.0 {
            line += " (never executed)";
        } else {
            line += &format!(
                " (rows={} loops={})",
                node["Actual Rows"], node["Actual Loops"]
            );
        }
        out.push(line);
    }
    if let Some(n) = node["Rows Removed by Filter"].as_f64().filter(|n| *n > 0.0) {
        out.push(format!("Rows Removed by Filter: {n}"));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        scans(child, out);
    }
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of `sql` with `params` (a custom plan for
/// these values, as the shell bench's one `EXECUTE` of a `PREPARE`d
/// statement had); one that writes runs in a transaction rolled back.
fn explain(c: &mut postgres::Client, label: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) {
    let text = format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, FORMAT JSON)\n{sql}");
    let plan = c.transaction().and_then(|mut tx| {
        let row = tx.query_one(&text, params)?;
        tx.rollback()?;
        Ok(row.get::<_, Value>(0))
    });
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            fig(label, format!("EXPLAIN failed: {e}"));
            return;
        }
    };
    let top = &plan[0];
    fig(
        &format!("{label} execution ms"),
        format!("{:.3}", top["Execution Time"].as_f64().unwrap_or(f64::NAN)),
    );
    fig(
        &format!("{label} buffers (top node)"),
        buffers(&top["Plan"]),
    );
    let mut lines = Vec::new();
    scans(&top["Plan"], &mut lines);
    for l in lines {
        fig(&format!("{label} plan"), l);
    }
}

/// The plans of the tick's three statements on the big database.
pub fn run(b: &mut Bench) {
    b.big();
    let mut c = b.client(b.big.as_ref().unwrap());
    heading(&format!(
        "query plans ({} finished, {QUEUED} queued)",
        b.knobs.finished
    ));
    explain(&mut c, "startable", STARTABLE, &[&"local", &64i64]);
    explain(&mut c, "sweep", SWEEP, &[&10f64, &Vec::<i64>::new()]);
    explain(&mut c, "tick_pipelines", TICK_PIPELINES, &[]);
}
