//! How every command ends: `Ok(())` is exit 0; a [`Failure`] is its exit
//! code and what it says on stderr. `main.rs` turns the one into the other
//! in one place ([`Failure::lines`], [`Failure::code`]).
//!
//! Exit codes: 0 done; 1 it ran and the answer is no (or the database
//! can't be reached); 2 bad input; 3 a pool machine's credentials revoked
//! ([`REVOKED`]); 127 a run's command could not be started (the keeper
//! says why in its output); 130 `orca run --wait` interrupted by Ctrl-C
//! ([`INTERRUPTED`]: the run goes on).

/// The exit code when a machine's or instance's credentials are refused
/// (`orca worker`, `ec2-serve`): the boot script shuts the machine down on
/// it instead of starting the worker again.
pub const REVOKED: i32 = 3;

/// The exit code of a command interrupted by SIGINT (Ctrl-C) that says so:
/// 128 + SIGINT, as a shell reports a process SIGINT killed (`orca run
/// --wait`: the run goes on).
pub const INTERRUPTED: i32 = 130;

/// A command's result.
pub type Outcome = Result<(), Failure>;

/// A failed command: its exit code and its lines.
#[derive(Debug)]
pub struct Failure {
    /// The exit code (never 0).
    pub code: i32,
    /// What to say on stderr, a line each; empty when the command already
    /// said why in its log.
    message: String,
    /// The lines name their source themselves (a config file's
    /// `path:LINE: message`), so they are said as they are, not after
    /// `orca: `.
    named: bool,
}

/// Bad input: exit 2, with `message`.
pub fn bad(message: impl Into<String>) -> Failure {
    Failure::new(2, message)
}

/// It ran and the answer is no (or the database can't be reached): exit 1,
/// with `message`.
pub fn no(message: impl Into<String>) -> Failure {
    Failure::new(1, message)
}

impl Failure {
    /// Exit `code`, saying `message` (each line after `orca: `).
    pub fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            named: false,
        }
    }

    /// Exit `code`, saying nothing more: the command's log said why.
    pub fn quiet(code: i32) -> Failure {
        Failure::new(code, "")
    }

    /// A config file's problems (exit 2): each line names the file
    /// (`path:LINE: message`, `path: ...`) and is said as it is.
    pub fn config(problems: Vec<String>) -> Failure {
        Failure {
            code: 2,
            message: problems.join("\n"),
            named: true,
        }
    }

    /// The lines to print on stderr.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        self.message.lines().map(move |line| {
            if self.named {
                line.to_string()
            } else {
                format!("orca: {line}")
            }
        })
    }
}

/// A long-lived loop's exit code as an [`Outcome`]: 0 is `Ok`, anything
/// else a [`Failure::quiet`] (the loop logged why).
pub fn status(code: i32) -> Outcome {
    if code == 0 {
        Ok(())
    } else {
        Err(Failure::quiet(code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_is_said_after_orca_unless_it_names_its_file() {
        let f = no("run 5 failed\nsecond");
        assert_eq!(f.code, 1);
        assert_eq!(
            f.lines().collect::<Vec<_>>(),
            ["orca: run 5 failed", "orca: second"]
        );
        let f = Failure::config(vec![
            "orca.toml:3: unknown key".into(),
            "x.conf: ... and 2 more problems".into(),
        ]);
        assert_eq!(f.code, 2);
        assert_eq!(
            f.lines().collect::<Vec<_>>(),
            [
                "orca.toml:3: unknown key",
                "x.conf: ... and 2 more problems"
            ]
        );
        assert_eq!(Failure::quiet(3).lines().count(), 0);
        assert!(status(0).is_ok());
        assert_eq!(status(3).unwrap_err().code, 3);
    }
}
