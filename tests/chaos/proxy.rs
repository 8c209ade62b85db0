//! A small TCP proxy between one orca process (or the fleet) and Postgres,
//! made of threads and `std::net`: no root, no iptables. Its mode is
//! `Pass` (forward), `Stall` (stop forwarding, keep the sockets: a network
//! that drops everything and then heals; new connections wait too) or `Cut`
//! (every connection closed at once, new ones closed as they come).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forwards both ways.
    Pass,
    /// Forwards nothing, keeps every socket open.
    Stall,
    /// Closes every connection, and each new one.
    Cut,
}

struct Ctl {
    /// The mode, and how many cuts there were (a connection older than the
    /// last cut closes).
    state: Mutex<(Mode, u64)>,
    changed: Condvar,
    stop: AtomicBool,
}

impl Ctl {
    fn get(&self) -> (Mode, u64) {
        *self.state.lock().unwrap()
    }

    /// Waits while stalled (up to `most`); the state after.
    fn wait_unstalled(&self, most: Duration) -> (Mode, u64) {
        let g = self.state.lock().unwrap();
        let (g, _) = self
            .changed
            .wait_timeout_while(g, most, |s| s.0 == Mode::Stall)
            .unwrap();
        *g
    }
}

/// A proxy on 127.0.0.1 in front of `127.0.0.1:upstream`; stops on drop.
pub struct Proxy {
    /// The port it listens on.
    pub port: u16,
    ctl: Arc<Ctl>,
}

impl Proxy {
    /// Starts one, in `Pass`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let ctl = Arc::new(Ctl {
            state: Mutex::new((Mode::Pass, 0)),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let c = ctl.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if c.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let c = c.clone();
                std::thread::spawn(move || serve(conn, upstream, c));
            }
        });
        Proxy { port, ctl }
    }

    /// Sets its mode.
    pub fn set(&self, mode: Mode) {
        let mut s = self.ctl.state.lock().unwrap();
        if mode == Mode::Cut {
            s.1 += 1;
        }
        s.0 = mode;
        self.ctl.changed.notify_all();
    }

    /// Its mode.
    pub fn mode(&self) -> Mode {
        self.ctl.get().0
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.ctl.stop.store(true, Ordering::SeqCst);
        self.set(Mode::Cut);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(client: TcpStream, upstream: u16, ctl: Arc<Ctl>) {
    // A new connection waits out a stall before it reaches Postgres.
    let (mode, cut) = loop {
        let s = ctl.wait_unstalled(Duration::from_millis(200));
        if ctl.stop.load(Ordering::SeqCst) {
            return;
        }
        if s.0 != Mode::Stall {
            break s;
        }
    };
    if mode == Mode::Cut {
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => return,
    };
    let ctl2 = ctl.clone();
    std::thread::spawn(move || pump(c2, s2, cut, ctl2));
    pump(server, client, cut, ctl);
}

/// Copies `from` to `to` while the mode allows and no cut came since
/// connection `cut`; then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream, cut: u64, ctl: Arc<Ctl>) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = vec![0u8; 16384];
    loop {
        let (mode, cuts) = ctl.wait_unstalled(Duration::from_millis(100));
        if cuts != cut || ctl.stop.load(Ordering::SeqCst) {
            break;
        }
        if mode == Mode::Stall {
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Data read just before a stall is held until it ends.
                let (_, cuts) = ctl.wait_unstalled(Duration::from_secs(3600));
                if cuts != cut || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[test]
fn a_proxy_passes_stalls_and_cuts() {
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let up_port = up.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in up.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut b = [0u8; 64];
                while let Ok(n) = conn.read(&mut b) {
                    if n == 0 || conn.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let p = Proxy::start(up_port);
    let mut c = TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(600)))
        .unwrap();
    let mut b = [0u8; 4];
    c.write_all(b"ping").unwrap();
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
    p.set(Mode::Stall);
    c.write_all(b"held").unwrap();
    assert!(c.read_exact(&mut b).is_err(), "a stall forwards nothing");
    p.set(Mode::Pass);
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"held", "what a stall held arrives after it");
    p.set(Mode::Cut);
    let mut rest = Vec::new();
    assert!(
        matches!(c.read_to_end(&mut rest), Ok(0) | Err(_)),
        "a cut closes"
    );
    p.set(Mode::Pass);
    let mut d = TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    d.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    d.write_all(b"back").unwrap();
    d.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"back");
}
