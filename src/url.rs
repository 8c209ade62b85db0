//! URLs split at their delimiters, as written (nothing decoded), the way
//! libpq reads a `postgres://` URL: the authority ends at the first `/`
//! after `://` (or at the query), its user info at its last `@`, the query
//! begins at the first `?`, and `#` is not special (a password may hold
//! one). Used for the database URL machines get (without credentials) and
//! an endpoint's host in messages.
//!
//! A webhook URL (`scheduler::alerts::redact_url`) is not split here: it may
//! have a fragment, which ends its authority and path.

/// The parts of a URL, each a slice of it.
#[derive(Debug, PartialEq, Eq)]
pub struct Parts<'a> {
    /// Before `://`: `postgres`.
    pub scheme: &'a str,
    /// The authority's user info (`user:password`, secret), if it has one.
    pub userinfo: Option<&'a str>,
    /// The authority without its user info: `host:port` (libpq: several,
    /// comma-separated).
    pub host: &'a str,
    /// From the authority's end to the query: `/db`, or empty.
    pub path: &'a str,
    /// After the first `?`, if there is one.
    pub query: Option<&'a str>,
}

/// `url` split into its [`Parts`]; `None` if it has no `://` (a libpq
/// `key=value` string, say).
pub fn split(url: &str) -> Option<Parts<'_>> {
    let scheme_end = url.find("://")?;
    let scheme = &url[..scheme_end];
    let after = &url[scheme_end + 3..];
    let (rest, query) = match after.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (after, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    Some(Parts {
        scheme,
        userinfo,
        host,
        path,
        query,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_libpq_url_splits_into_its_parts() {
        let url = "postgres://orca:s3cret@db.internal:5433/orca?sslmode=require&x=1";
        assert_eq!(
            split(url),
            Some(Parts {
                scheme: "postgres",
                userinfo: Some("orca:s3cret"),
                host: "db.internal:5433",
                path: "/orca",
                query: Some("sslmode=require&x=1"),
            })
        );
    }

    #[test]
    fn parts_may_be_missing() {
        let p = split("postgres://h").unwrap();
        assert_eq!((p.userinfo, p.host, p.path, p.query), (None, "h", "", None));
        let p = split("postgresql://h?user=a").unwrap();
        assert_eq!((p.host, p.path, p.query), ("h", "", Some("user=a")));
        let p = split("postgres://?host=/run/pg").unwrap();
        assert_eq!((p.host, p.path, p.query), ("", "", Some("host=/run/pg")));
        assert_eq!(split("host=h user=a"), None);
    }

    #[test]
    fn user_info_ends_at_the_last_at_and_a_hash_is_not_special() {
        let p = split("postgres://u@x:p#w@h1,h2:5433/db").unwrap();
        assert_eq!(p.userinfo, Some("u@x:p#w"));
        assert_eq!(p.host, "h1,h2:5433");
        assert_eq!(p.path, "/db");
        let p = split("https://ec2.eu-west-1.amazonaws.com/").unwrap();
        assert_eq!(
            (p.scheme, p.host, p.path),
            ("https", "ec2.eu-west-1.amazonaws.com", "/")
        );
    }
}
