//! Counts in words: `1 pool`, `2 pools`, `0 runs`.

/// `n` and `noun`, the noun plural unless `n` is 1 (`noun` takes an `s`:
/// every noun orca counts does).
pub fn count(n: i64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "pool"), "1 pool");
        assert_eq!(count(1, "machine"), "1 machine");
        assert_eq!(count(2, "pool"), "2 pools");
        assert_eq!(count(0, "run"), "0 runs");
        assert_eq!(count(-1, "slot"), "-1 slots");
        assert_eq!(count(1_000_000, "pipeline"), "1000000 pipelines");
    }
}
