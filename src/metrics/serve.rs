//! The `/metrics` listener: a small HTTP/1.1 responder on
//! [`std::net::TcpListener`], in a thread of its own, each connection on a
//! short-lived thread of its own, at most [`MAX_CLIENTS`] at once.
//! `GET /metrics` is answered 200 with the registry's text
//! ([`super::render`]); anything else 404, a request it can't read 400.
//!
//! Invariants:
//! * It never touches the database: it renders what the registry holds.
//! * A client gets at most [`CLIENT_SECONDS`] in all and [`MAX_REQUEST`]
//!   bytes of request: a slow or hostile one can't pin a thread or its
//!   memory. Clients are served side by side, so a scrape doesn't queue
//!   behind slow ones; past [`MAX_CLIENTS`] at once a client is answered
//!   503 at once and let go.
//! * A bad `ORCA_METRICS_ADDR`, or one that can't be listened on (the port
//!   taken), is said in one line before the process starts its work.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The variable naming the address to serve on (unset or empty: off).
pub const VAR: &str = "ORCA_METRICS_ADDR";

/// The most bytes of a request read (its line and headers).
pub const MAX_REQUEST: usize = 8 * 1024;

/// The longest a client is given to send its request and take the answer.
pub const CLIENT_SECONDS: f64 = 2.0;

/// The most clients served at once (each on its own thread).
pub const MAX_CLIENTS: usize = 32;

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// `GET /metrics` (a query string is ignored).
    Metrics,
    /// Any other method or path.
    Other,
    /// Not an HTTP request line, or its headers past [`MAX_REQUEST`].
    Bad,
    /// Not read: [`MAX_CLIENTS`] are being served.
    Busy,
}

/// The address `ORCA_METRICS_ADDR` names, given its value (`None`:
/// unset): `None` when unset or empty; an IP address and port, else an
/// error line naming the variable.
pub fn parse_addr(set: Option<&str>) -> Result<Option<SocketAddr>, String> {
    let Some(v) = set.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    v.parse::<SocketAddr>().map(Some).map_err(|_| {
        let shown: String = v.chars().take(100).collect();
        format!(
            "{VAR}={} is not an address: an IP address and a port, e.g. 127.0.0.1:9187",
            shown.escape_debug()
        )
    })
}

/// What `head` (a request's bytes up to its blank line, or all read so
/// far) asks for; `None` while more must be read to tell.
pub fn asked(head: &[u8]) -> Option<Asked> {
    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if head.len() >= MAX_REQUEST {
            Some(Asked::Bad)
        } else {
            None
        };
    };
    let Ok(text) = std::str::from_utf8(&head[..end]) else {
        return Some(Asked::Bad);
    };
    let line = text.lines().next().unwrap_or("");
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Some(Asked::Bad);
    };
    if !version.starts_with("HTTP/1.") {
        return Some(Asked::Bad);
    }
    let path = target.split('?').next().unwrap_or("");
    Some(if method == "GET" && path == "/metrics" {
        Asked::Metrics
    } else {
        Asked::Other
    })
}

/// The whole answer to `asked` (`body`: the metrics' text).
pub fn answer(asked: &Asked, body: impl FnOnce() -> String) -> Vec<u8> {
    let (status, kind, body) = match asked {
        Asked::Metrics => ("200 OK", "text/plain; version=0.0.4", body()),
        Asked::Other => ("404 Not Found", "text/plain", "not found\n".to_string()),
        Asked::Bad => ("400 Bad Request", "text/plain", "bad request\n".to_string()),
        Asked::Busy => (
            "503 Service Unavailable",
            "text/plain",
            "too many clients\n".to_string(),
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Listens on the address `ORCA_METRICS_ADDR` names, if it names one, and
/// serves on a thread of its own; the address it listens on. An error line
/// for an address that is not one or can't be listened on.
pub fn start_from_env() -> Result<Option<SocketAddr>, String> {
    let set = std::env::var(VAR).ok();
    let Some(addr) = parse_addr(set.as_deref())? else {
        return Ok(None);
    };
    let listener =
        TcpListener::bind(addr).map_err(|e| format!("{VAR}={addr}: can't listen there: {e}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serve(listener))
        .map_err(|e| format!("{VAR}: can't start its thread: {e}"))?;
    super::ON.store(true, std::sync::atomic::Ordering::Relaxed);
    log::info!("metrics served at http://{bound}/metrics");
    Ok(Some(bound))
}

/// Answers connections, each on a thread of its own, at most
/// [`MAX_CLIENTS`] at once, for ever.
fn serve(listener: TcpListener) {
    let serving = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                use std::sync::atomic::Ordering::SeqCst;
                if serving.fetch_add(1, SeqCst) >= MAX_CLIENTS {
                    serving.fetch_sub(1, SeqCst);
                    busy(stream);
                    continue;
                }
                let held = serving.clone();
                let spawned = std::thread::Builder::new()
                    .name("metrics client".into())
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        if let Err(e) = one(stream) {
                            log::debug!("metrics: a client: {e}");
                        }
                        held.fetch_sub(1, SeqCst);
                    });
                if let Err(e) = spawned {
                    serving.fetch_sub(1, SeqCst);
                    log::debug!("metrics: can't start a client's thread: {e}");
                }
            }
            Err(e) => {
                // Out of descriptors, say: don't spin.
                log::debug!("metrics: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Answers 503 to a client past [`MAX_CLIENTS`] without reading it, never
/// waiting on it.
fn busy(mut stream: TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let _ = stream.write(&answer(&Asked::Busy, String::new));
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Reads one request within its time and size and answers it.
fn one(mut stream: TcpStream) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs_f64(CLIENT_SECONDS);
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let what = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        let room = MAX_REQUEST.saturating_sub(head.len());
        head.extend_from_slice(&buf[..n.min(room)]);
        if let Some(what) = asked(&head) {
            break what;
        }
    };
    let text = answer(&what, || super::render(&super::ALL, &super::snapshot()));
    // Written within the same deadline, however slowly the client reads.
    let mut rest = &text[..];
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        stream.set_write_timeout(Some(left.max(Duration::from_millis(100))))?;
        let n = stream.write(rest)?;
        if n == 0 || left.is_zero() {
            break;
        }
        rest = &rest[n..];
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_an_ip_and_port_or_unset() {
        assert_eq!(parse_addr(None), Ok(None));
        assert_eq!(parse_addr(Some(" ")), Ok(None));
        assert_eq!(
            parse_addr(Some("127.0.0.1:9187")),
            Ok(Some("127.0.0.1:9187".parse().unwrap()))
        );
        assert!(parse_addr(Some("[::1]:9187")).unwrap().is_some());
        for bad in [
            "9187",
            "localhost:9187",
            "127.0.0.1",
            "1.2.3.4:99999",
            "x\ny",
        ] {
            let e = parse_addr(Some(bad)).unwrap_err();
            assert!(e.starts_with("ORCA_METRICS_ADDR="), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn only_get_metrics_is_answered_with_metrics() {
        let req = |s: &str| asked(s.as_bytes());
        assert_eq!(
            req("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Asked::Metrics)
        );
        assert_eq!(
            req("GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Some(Asked::Metrics)
        );
        assert_eq!(req("GET / HTTP/1.1\r\n\r\n"), Some(Asked::Other));
        assert_eq!(req("POST /metrics HTTP/1.1\r\n\r\n"), Some(Asked::Other));
        assert_eq!(
            req("GET /metrics HTTP/1.1\r\nHost: x\r\n"),
            None,
            "headers not over"
        );
        assert_eq!(req("hello\r\n\r\n"), Some(Asked::Bad));
        assert_eq!(req("GET /metrics SMTP\r\n\r\n"), Some(Asked::Bad));
        assert_eq!(asked(&vec![b'a'; MAX_REQUEST]), Some(Asked::Bad));
    }

    #[test]
    fn the_answer_has_the_formats_content_type_and_its_length() {
        let a = String::from_utf8(answer(&Asked::Metrics, || "x 1\n".into())).unwrap();
        assert_eq!(
            a,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
             Content-Length: 4\r\nConnection: close\r\n\r\nx 1\n"
        );
        let a = String::from_utf8(answer(&Asked::Other, || unreachable!())).unwrap();
        assert!(a.starts_with("HTTP/1.1 404 Not Found\r\n"), "{a}");
    }
}
