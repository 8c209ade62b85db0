//! Log lines: `env_logger` through `RUST_LOG` (default `info`), with the
//! crates that would print secrets held at `warn` whatever `RUST_LOG` says.
//! The database driver logs every statement's parameters at `debug`
//! (pipeline env values, machine password verifiers); the HTTP client its
//! requests' headers (AWS session tokens, registry tokens).

/// Crates whose `debug` and `trace` lines can carry secrets.
const QUIET: &[&str] = &["tokio_postgres", "postgres", "ureq", "rustls"];

/// The filter for `RUST_LOG`'s value `user` (none: `info`): its directives,
/// less those naming a [`QUIET`] crate or a module of one, then each of
/// those at `warn`.
pub fn filter(user: Option<&str>) -> String {
    let user = user
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .unwrap_or("info");
    // `DIRECTIVES/REGEX`: the regex part is kept as it is.
    let (directives, regex) = match user.split_once('/') {
        Some((d, r)) => (d, Some(r)),
        None => (user, None),
    };
    let mut kept: Vec<&str> = directives
        .split(',')
        .map(str::trim)
        .filter(|d| {
            // env_logger matches a directive's name as a plain prefix of
            // a record's target, the longest winning: `tokio_postgres:`
            // would beat `tokio_postgres=warn`. Any name that starts with
            // a quiet crate's goes.
            let target = d.split('=').next().unwrap_or("").trim();
            !QUIET.iter().any(|q| target.starts_with(q))
        })
        .filter(|d| !d.is_empty())
        .collect();
    if kept.is_empty() {
        kept.push("info");
    }
    let quiet: Vec<String> = QUIET.iter().map(|q| format!("{q}=warn")).collect();
    kept.extend(quiet.iter().map(String::as_str));
    let mut out = kept.join(",");
    if let Some(r) = regex {
        out.push('/');
        out.push_str(r);
    }
    out
}

/// Sets up logging to stderr.
pub fn init() {
    let spec = filter(std::env::var("RUST_LOG").ok().as_deref());
    env_logger::Builder::new()
        .parse_filters(&spec)
        .format_target(false)
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_and_the_http_client_stay_at_warn_whatever_rust_log_says() {
        assert_eq!(
            filter(None),
            "info,tokio_postgres=warn,postgres=warn,ureq=warn,rustls=warn"
        );
        let f = filter(Some(
            "trace,tokio_postgres::query=trace,postgres=debug,orca=debug",
        ));
        assert_eq!(
            f,
            "trace,orca=debug,tokio_postgres=warn,postgres=warn,ureq=warn,rustls=warn"
        );
        assert!(filter(Some("debug/secret")).ends_with("rustls=warn/secret"));
        // Longer names that would match the crates' targets as prefixes go.
        for sneaky in [
            "tokio_postgres:=trace",
            "postgres::x=debug",
            "ureqx=trace",
            "rustls_y=debug",
        ] {
            let f = filter(Some(sneaky));
            assert_eq!(f, filter(None), "{sneaky}");
        }
    }
}
