//! What a supervisor and its keeper ([`super::keeper`]) say to each other
//! over their socket: requests one way, events the other, each a frame (a
//! little-endian `u32` length, then that many bytes: a kind byte and its
//! fields). Pure encoding and decoding, so each can be tested alone.
//!
//! A spawn request carries one descriptor beside its bytes (`SCM_RIGHTS`,
//! sent with the frame's first byte): the write end of the pipe the
//! command's stdout and stderr go to. The keeper trusts its supervisor (its
//! parent, the same user), but a frame it can't read is an error, never a
//! panic.

/// The largest frame either side accepts: a command's argv and environment
/// fit well within it (`orca.toml` is at most 1 MiB, and Linux takes at
/// most a few MiB of argv and environment in all).
pub const MAX_FRAME: usize = 16 << 20;

/// Why a frame could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum WireError {
    /// Its length is over [`MAX_FRAME`].
    TooLong(usize),
    /// It ends before its fields do, or has bytes after them.
    Malformed,
    /// Its kind byte is none this side knows.
    UnknownKind(u8),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::TooLong(n) => write!(f, "a frame of {n} bytes (at most {MAX_FRAME})"),
            WireError::Malformed => f.write_str("a malformed frame"),
            WireError::UnknownKind(k) => write!(f, "a frame of unknown kind {k}"),
        }
    }
}

impl std::error::Error for WireError {}

/// A command to start, the keeper's name for it, and how.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Spawn {
    /// The supervisor's name for the command from here on.
    pub token: u64,
    /// Its `argv`, the program first (a name without `/` is looked up in
    /// `PATH`, as `execvp(3)` does).
    pub argv: Vec<Vec<u8>>,
    /// `NAME=value` entries set over the keeper's own environment (what of
    /// orca's a run may have, see `env::passed_on`).
    pub vars: Vec<Vec<u8>>,
    /// Who it runs as.
    pub run_as: Identity,
}

/// Who a command runs as.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Identity {
    /// The keeper's own user (orca's).
    Keeper,
    /// `ORCA_RUN_AS`'s uid and gid.
    User(u32, u32),
    /// A uid of its own from `ORCA_RUN_UIDS`'s range, first and last,
    /// taken by the keeper (`super::uids`).
    Range(u32, u32),
}

/// What a supervisor asks its keeper.
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum Request {
    /// Start a command (with the output pipe's write end beside it).
    Spawn(Spawn),
    /// Send a signal to the command's process group.
    Signal {
        /// The command.
        token: u64,
        /// The signal.
        signal: i32,
    },
    /// SIGKILL the command and everything it started.
    KillAll {
        /// The command.
        token: u64,
    },
}

/// What a keeper tells its supervisor.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Event {
    /// A spawn request was carried out: the command's pid, or 0 if it could
    /// not be started (its output says why, and it ends with exit code 127
    /// at once).
    Started {
        /// The command.
        token: u64,
        /// Its pid (and process group, and session), or 0.
        pid: i32,
    },
    /// The command ended, with this wait status; whatever it left behind
    /// has had SIGKILL.
    Ended {
        /// The command.
        token: u64,
        /// Its raw wait status (`waitpid(2)`'s).
        status: i32,
    },
}

/// Appends `body`, framed, to `out`.
fn frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    body(out);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_list(out: &mut Vec<u8>, items: &[Vec<u8>]) {
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for i in items {
        put_bytes(out, i);
    }
}

impl Request {
    /// The request as a frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        frame(&mut out, |b| match self {
            Request::Spawn(s) => {
                b.push(1);
                b.extend_from_slice(&s.token.to_le_bytes());
                let (flag, uid, gid) = match s.run_as {
                    Identity::Keeper => (0, 0, 0),
                    Identity::User(u, g) => (1, u, g),
                    Identity::Range(first, last) => (2, first, last),
                };
                b.push(flag);
                b.extend_from_slice(&uid.to_le_bytes());
                b.extend_from_slice(&gid.to_le_bytes());
                put_list(b, &s.argv);
                put_list(b, &s.vars);
            }
            Request::Signal { token, signal } => {
                b.push(2);
                b.extend_from_slice(&token.to_le_bytes());
                b.extend_from_slice(&signal.to_le_bytes());
            }
            Request::KillAll { token } => {
                b.push(3);
                b.extend_from_slice(&token.to_le_bytes());
            }
        });
        out
    }

    /// The request a frame's body holds.
    pub fn decode(body: &[u8]) -> Result<Request, WireError> {
        let mut r = Reader(body);
        let req = match r.u8()? {
            1 => {
                let token = r.u64()?;
                let flag = r.u8()?;
                let (uid, gid) = (r.u32()?, r.u32()?);
                let run_as = match flag {
                    0 => Identity::Keeper,
                    1 => Identity::User(uid, gid),
                    2 if uid >= 1 && uid <= gid => Identity::Range(uid, gid),
                    _ => return Err(WireError::Malformed),
                };
                let argv = r.list()?;
                let vars = r.list()?;
                Request::Spawn(Spawn {
                    token,
                    argv,
                    vars,
                    run_as,
                })
            }
            2 => Request::Signal {
                token: r.u64()?,
                signal: r.u32()? as i32,
            },
            3 => Request::KillAll { token: r.u64()? },
            k => return Err(WireError::UnknownKind(k)),
        };
        r.end()?;
        Ok(req)
    }
}

impl Event {
    /// The event as a frame, appended to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        frame(out, |b| {
            let (kind, token, value) = match *self {
                Event::Started { token, pid } => (1, token, pid),
                Event::Ended { token, status } => (2, token, status),
            };
            b.push(kind);
            b.extend_from_slice(&token.to_le_bytes());
            b.extend_from_slice(&value.to_le_bytes());
        });
    }

    /// The event a frame's body holds.
    pub fn decode(body: &[u8]) -> Result<Event, WireError> {
        let mut r = Reader(body);
        let kind = r.u8()?;
        let (token, value) = (r.u64()?, r.u32()? as i32);
        r.end()?;
        match kind {
            1 => Ok(Event::Started { token, pid: value }),
            2 => Ok(Event::Ended {
                token,
                status: value,
            }),
            k => Err(WireError::UnknownKind(k)),
        }
    }
}

/// The first whole frame at the start of `buf`: its body's range, and how
/// many bytes it takes in all; `None` until all of it has come.
pub fn next_frame(buf: &[u8]) -> Result<Option<(std::ops::Range<usize>, usize)>, WireError> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(len.try_into().expect("four bytes")) as usize;
    if len > MAX_FRAME {
        return Err(WireError::TooLong(len));
    }
    Ok((buf.len() >= 4 + len).then_some((4..4 + len, 4 + len)))
}

/// Reads fields off a frame's body, in order.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    fn list(&mut self) -> Result<Vec<Vec<u8>>, WireError> {
        let n = self.u32()? as usize;
        // Each item takes at least its length's four bytes: a count the
        // body can't hold is refused before anything is allocated for it.
        if n > self.0.len() / 4 {
            return Err(WireError::Malformed);
        }
        (0..n)
            .map(|_| {
                let len = self.u32()? as usize;
                Ok(self.take(len)?.to_vec())
            })
            .collect()
    }

    fn end(&self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError::Malformed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8]) -> &[u8] {
        let (range, used) = next_frame(frame).unwrap().unwrap();
        assert_eq!(used, frame.len());
        &frame[range]
    }

    #[test]
    fn requests_and_events_read_back_as_written() {
        let reqs = [
            Request::Spawn(Spawn {
                token: 7,
                argv: vec![b"/bin/sh".to_vec(), b"-c".to_vec(), b"echo \xff".to_vec()],
                vars: vec![b"A=1".to_vec(), b"EMPTY=".to_vec()],
                run_as: Identity::User(1000, 1001),
            }),
            Request::Spawn(Spawn {
                token: u64::MAX,
                argv: vec![b"true".to_vec()],
                vars: vec![],
                run_as: Identity::Keeper,
            }),
            Request::Spawn(Spawn {
                token: 8,
                argv: vec![b"true".to_vec()],
                vars: vec![],
                run_as: Identity::Range(61184, 65519),
            }),
            Request::Signal {
                token: 3,
                signal: 15,
            },
            Request::KillAll { token: 9 },
        ];
        for r in reqs {
            assert_eq!(Request::decode(body(&r.encode())), Ok(r));
        }
        let mut out = Vec::new();
        let events = [
            Event::Started { token: 1, pid: 42 },
            Event::Started { token: 2, pid: 0 },
            Event::Ended {
                token: 1,
                status: 9,
            },
        ];
        for e in events {
            e.encode_into(&mut out);
        }
        let mut read = Vec::new();
        let mut at = 0;
        while let Some((range, used)) = next_frame(&out[at..]).unwrap() {
            read.push(Event::decode(&out[at..][range]).unwrap());
            at += used;
        }
        assert_eq!(read, events);
    }

    #[test]
    fn a_frame_is_whole_or_waited_for() {
        let f = Request::KillAll { token: 5 }.encode();
        for cut in 0..f.len() {
            assert_eq!(next_frame(&f[..cut]), Ok(None), "cut at {cut}");
        }
        let mut two = f.clone();
        two.extend_from_slice(&f);
        assert_eq!(next_frame(&two), Ok(Some((4..f.len(), f.len()))));
    }

    #[test]
    fn a_bad_frame_is_an_error_not_a_panic() {
        assert_eq!(
            next_frame(&u32::MAX.to_le_bytes()),
            Err(WireError::TooLong(u32::MAX as usize))
        );
        assert_eq!(Request::decode(&[]), Err(WireError::Malformed));
        assert_eq!(Request::decode(&[9]), Err(WireError::UnknownKind(9)));
        assert_eq!(Event::decode(&[3; 13]), Err(WireError::UnknownKind(3)));
        // A count no body could hold, a string past the end, bytes after
        // the fields, a run-as flag that is neither 0, 1 nor 2, a range of
        // uids that holds root.
        let spawn = |flag: u8, tail: &[u8]| {
            let mut b = vec![1];
            b.extend_from_slice(&1u64.to_le_bytes());
            b.push(flag);
            b.extend_from_slice(&[0; 8]);
            b.extend_from_slice(tail);
            b
        };
        let huge = u32::MAX.to_le_bytes();
        assert_eq!(Request::decode(&spawn(0, &huge)), Err(WireError::Malformed));
        let past = [1, 0, 0, 0, 200, 0, 0, 0, b'x'];
        assert_eq!(Request::decode(&spawn(0, &past)), Err(WireError::Malformed));
        let ok = [0u8; 8];
        assert!(Request::decode(&spawn(0, &ok)).is_ok());
        assert_eq!(Request::decode(&spawn(2, &ok)), Err(WireError::Malformed));
        assert_eq!(Request::decode(&spawn(3, &ok)), Err(WireError::Malformed));
        let mut extra = spawn(0, &ok);
        extra.push(0);
        assert_eq!(Request::decode(&extra), Err(WireError::Malformed));
        let mut ev = Vec::new();
        Event::Ended {
            token: 1,
            status: 0,
        }
        .encode_into(&mut ev);
        ev.push(0);
        assert_eq!(Event::decode(&ev[4..]), Err(WireError::Malformed));
    }
}
