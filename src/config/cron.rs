//! Cron expressions checked field by field before croner parses them, so a
//! mistake is named by its field and that field's range
//! (`minute field: 61 is out of range 0-59`) instead of croner's words.
//!
//! What is accepted is what croner (4) accepts, a little stricter: 5 fields
//! (minute hour day-of-month month day-of-week) or 6 with seconds first; in
//! each, `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a list of
//! these; month names `JAN`..`DEC` in the month field and day names
//! `SUN`..`SAT` in the day-of-week field (any case); `?` for either day
//! field; `L`, `LW` and `nW` in the day of the month; `n#k`, `nL` and `L`
//! in the day of the week (and a leading `+`: both day fields must match);
//! and the nicknames `@yearly`, `@annually`, `@monthly`, `@weekly`,
//! `@daily`, `@hourly`. Stricter: a name in a field it doesn't belong to,
//! `*` inside a list and an empty list item are refused (croner takes them
//! in ways no one means).
//!
//! Then the schedule parsed for good: [`parse_schedule`] (checked field by
//! field first, for `orca check` and `orca register`),
//! [`parse_stored_schedule`] (croner alone, for what is already stored, so
//! what an older binary registered keeps firing), and [`fires_ever`]
//! (whether any day matches, without croner's search to year 5000).

use std::collections::HashSet;

/// A field of a cron expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// Seconds, 0-59 (only in a 6-field expression, first).
    Second,
    /// Minutes, 0-59.
    Minute,
    /// Hours, 0-23.
    Hour,
    /// Day of the month, 1-31.
    DayOfMonth,
    /// Month, 1-12 (or `JAN`..`DEC`).
    Month,
    /// Day of the week, 0-7 with 0 and 7 both Sunday (or `SUN`..`SAT`).
    DayOfWeek,
}

impl Field {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        }
    }

    /// The smallest and largest number it takes.
    pub fn range(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
        }
    }

    /// The number a name stands for in this field; `end`: the name ends a
    /// range (`FRI-SUN` is 5-7).
    fn named(self, name: &str, end: bool) -> Option<u32> {
        const MONTHS: [&str; 12] = [
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ];
        const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
        let upper = name.to_ascii_uppercase();
        match self {
            Field::Month => MONTHS
                .iter()
                .position(|m| *m == upper)
                .map(|i| i as u32 + 1),
            Field::DayOfWeek => DAYS
                .iter()
                .position(|d| *d == upper)
                .map(|i| if i == 0 && end { 7 } else { i as u32 }),
            _ => None,
        }
    }
}

/// What is wrong with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A number outside the field's range, as typed.
    OutOfRange(String),
    /// Neither a number nor a name this field takes.
    NotANumber(String),
    /// A range whose start is after its end.
    Backwards(u32, u32),
    /// A step that is not a whole number.
    BadStep(String),
    /// A step outside 1 to [`MAX_STEP`], as typed.
    StepOutOfRange(String),
    /// `a/n`: a step needs `*` or a range.
    StepWithoutRange(String),
    /// `#k` with `k` not from 1 to 5.
    BadNth(String),
    /// An empty item in a list (`1,,2`), or an empty field.
    Empty,
    /// `*` as one item of a list.
    StarInList,
}

/// Why a cron expression is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CronError {
    /// Neither 5 nor 6 fields.
    FieldCount(usize),
    /// `@something` that is not one of the nicknames.
    Nickname(String),
    /// One field is wrong.
    Field(Field, Problem),
    /// Croner refused what this module let through.
    Croner(String),
}

/// The largest step croner takes (`*/65535`).
pub const MAX_STEP: u16 = u16::MAX;

/// The nicknames croner takes.
pub const NICKNAMES: &[&str] = &[
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];

impl std::fmt::Display for CronError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CronError::FieldCount(n) => write!(
                f,
                "5 or 6 fields are accepted (minute hour day-of-month month day-of-week, \
                 or second first and then those 5); it has {n}"
            ),
            CronError::Nickname(s) => {
                write!(f, "unknown nickname {s} (one of {})", NICKNAMES.join(", "))
            }
            CronError::Croner(s) => f.write_str(s),
            CronError::Field(field, problem) => {
                let (lo, hi) = field.range();
                write!(f, "{} field: ", field.name())?;
                match problem {
                    Problem::OutOfRange(n) => write!(f, "{n} is out of range {lo}-{hi}"),
                    Problem::NotANumber(s) => {
                        let names = match field {
                            Field::Month => " or a month name (JAN-DEC)",
                            Field::DayOfWeek => " or a day name (SUN-SAT)",
                            _ => "",
                        };
                        write!(f, "'{s}' is not a number from {lo} to {hi}{names}")
                    }
                    Problem::Backwards(a, b) => {
                        write!(f, "range {a}-{b} goes backwards (within {lo}-{hi})")
                    }
                    Problem::BadStep(s) => {
                        write!(f, "step '{s}' is not a whole number of at least 1")
                    }
                    Problem::StepOutOfRange(s) => {
                        write!(f, "step {s} is out of range 1-{MAX_STEP}")
                    }
                    Problem::StepWithoutRange(s) => {
                        let (start, step) = s.split_once('/').unwrap_or((s, ""));
                        write!(
                            f,
                            "'{s}': a step needs * or a range (*/{step} or {start}-{hi}/{step})"
                        )
                    }
                    Problem::BadNth(s) => write!(f, "'{s}': the week number after # is 1 to 5"),
                    Problem::Empty => f.write_str("an empty item"),
                    Problem::StarInList => f.write_str("* can't be one item of a list"),
                }
            }
        }
    }
}

/// Checks `expr` field by field (see the module's documentation); `Ok`
/// says nothing of what croner makes of it, only that each field is
/// well-formed and within its range.
pub fn check(expr: &str) -> Result<(), CronError> {
    let trimmed = expr.trim();
    if trimmed.starts_with('@') {
        return if NICKNAMES.iter().any(|n| n.eq_ignore_ascii_case(trimmed)) {
            Ok(())
        } else {
            Err(CronError::Nickname(trimmed.to_string()))
        };
    }
    let parts: Vec<&str> = trimmed.split_whitespace().collect();
    let fields: &[Field] = match parts.len() {
        5 => &[
            Field::Minute,
            Field::Hour,
            Field::DayOfMonth,
            Field::Month,
            Field::DayOfWeek,
        ],
        6 => &[
            Field::Second,
            Field::Minute,
            Field::Hour,
            Field::DayOfMonth,
            Field::Month,
            Field::DayOfWeek,
        ],
        n => return Err(CronError::FieldCount(n)),
    };
    for (&field, &text) in fields.iter().zip(&parts) {
        check_field(field, text).map_err(|p| CronError::Field(field, p))?;
    }
    Ok(())
}

fn check_field(field: Field, text: &str) -> Result<(), Problem> {
    let text = match field {
        Field::DayOfWeek => text.strip_prefix('+').unwrap_or(text),
        _ => text,
    };
    let items: Vec<&str> = text.split(',').collect();
    for item in &items {
        if item.is_empty() {
            return Err(Problem::Empty);
        }
        if *item == "*" && items.len() > 1 {
            return Err(Problem::StarInList);
        }
        check_item(field, item)?;
    }
    Ok(())
}

fn check_item(field: Field, item: &str) -> Result<(), Problem> {
    let days = matches!(field, Field::DayOfMonth | Field::DayOfWeek);
    if item == "*" || (days && item == "?") {
        return Ok(());
    }
    if let Some((base, step)) = item.split_once('/') {
        if !digits(step) {
            return Err(Problem::BadStep(step.to_string()));
        }
        match step.parse::<u16>() {
            Ok(n) if n >= 1 => {}
            _ => return Err(Problem::StepOutOfRange(step.to_string())),
        }
        return match base {
            "*" => Ok(()),
            _ if base.contains('-') => range(field, base),
            _ => {
                value(field, base, false)?;
                Err(Problem::StepWithoutRange(item.to_string()))
            }
        };
    }
    let upper = item.to_ascii_uppercase();
    match field {
        Field::DayOfMonth if upper == "L" || upper == "LW" => return Ok(()),
        Field::DayOfMonth if upper.len() > 1 && upper.ends_with('W') => {
            return value(field, &item[..item.len() - 1], false).map(|_| ());
        }
        Field::DayOfWeek if upper == "L" => return Ok(()),
        Field::DayOfWeek if upper.len() > 1 && upper.ends_with('L') => {
            return value(field, &item[..item.len() - 1], false).map(|_| ());
        }
        Field::DayOfWeek if item.contains('#') => {
            let (day, nth) = item.split_once('#').unwrap_or((item, ""));
            value(field, day, false)?;
            return match nth.parse::<u8>() {
                Ok(1..=5) => Ok(()),
                _ => Err(Problem::BadNth(item.to_string())),
            };
        }
        _ => {}
    }
    if item.contains('-') {
        range(field, item)
    } else {
        value(field, item, false).map(|_| ())
    }
}

fn range(field: Field, text: &str) -> Result<(), Problem> {
    let (a, b) = text.split_once('-').unwrap_or((text, ""));
    let a = value(field, a, false)?;
    let b = value(field, b, true)?;
    if a > b {
        return Err(Problem::Backwards(a, b));
    }
    Ok(())
}

/// Whether `text` is one or more ASCII digits.
fn digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

fn value(field: Field, text: &str, end: bool) -> Result<u32, Problem> {
    let (lo, hi) = field.range();
    if digits(text) {
        // Digits beyond what u32 holds are out of range all the same.
        return match text.parse::<u32>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(n),
            _ => Err(Problem::OutOfRange(text.to_string())),
        };
    }
    field
        .named(text, end)
        .ok_or_else(|| Problem::NotANumber(text.to_string()))
}

/// Parses a schedule: 5 cron fields (minute first), or 6 with seconds first.
/// Each field is checked first ([`check`]), so a mistake is
/// named by its field and range: `schedule "61 * * * *": minute field: 61
/// is out of range 0-59`.
pub fn parse_schedule(expr: &str) -> Result<croner::Cron, String> {
    let said = |e: CronError| format!("schedule \"{expr}\": {e}");
    check(expr).map_err(said)?;
    parse_stored_schedule(expr)
}

/// Parses a schedule already in the database, with croner alone: what an
/// older binary registered keeps firing even where the field check of
/// [`parse_schedule`] (for `orca check` and `register`) is stricter than
/// croner (`1,,2 * * * *`).
pub fn parse_stored_schedule(expr: &str) -> Result<croner::Cron, String> {
    let said = |e: CronError| format!("schedule \"{expr}\": {e}");
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| said(CronError::Croner(e.to_string())))
}

/// Whether `cron` fires at all. Every schedule has a second, minute and
/// hour; only its days can rule every time out (the 31st of February, or
/// the 30th). Whether a day of a month matches depends only on the month,
/// its length and the weekday it starts on, and 28 years (in 2001–2099)
/// have every such month: so at most 91 months of days are looked at (some
/// 2,800 days), where croner's search for the next time of a schedule that
/// never fires walks years to its limit (year 5000).
pub fn fires_ever(cron: &croner::Cron) -> bool {
    use chrono::Datelike;
    let p = &cron.pattern;
    let mut seen = HashSet::new();
    for year in 2001..2029 {
        for month in 1..=12u32 {
            let (Some(first), Some(next)) = (
                chrono::NaiveDate::from_ymd_opt(year, month, 1),
                chrono::NaiveDate::from_ymd_opt(year + i32::from(month == 12), month % 12 + 1, 1),
            ) else {
                return true;
            };
            let days = (next - first).num_days() as u32;
            let starts = first.weekday().num_days_from_sunday();
            if !p.month_match(month).unwrap_or(false) || !seen.insert((month, days, starts)) {
                continue;
            }
            for day in 1..=days {
                let weekday = croner::Weekday::from_days_from_sunday(starts + day - 1);
                if p.day_match(year, month, day, weekday).unwrap_or(false) {
                    return true;
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(expr: &str) -> String {
        check(expr).unwrap_err().to_string()
    }

    #[test]
    fn each_field_names_itself_and_its_range() {
        assert_eq!(err("60 * * * * *"), "second field: 60 is out of range 0-59");
        assert_eq!(err("61 * * * *"), "minute field: 61 is out of range 0-59");
        // Five fields start with the minute: the 61 here is the hour.
        assert_eq!(err("0 61 * * *"), "hour field: 61 is out of range 0-23");
        assert_eq!(err("0 61 0 * * *"), "minute field: 61 is out of range 0-59");
        assert_eq!(err("0 24 * * *"), "hour field: 24 is out of range 0-23");
        assert_eq!(
            err("0 0 0 * *"),
            "day-of-month field: 0 is out of range 1-31"
        );
        assert_eq!(
            err("0 0 32 * *"),
            "day-of-month field: 32 is out of range 1-31"
        );
        assert_eq!(err("0 0 * 0 *"), "month field: 0 is out of range 1-12");
        assert_eq!(err("0 0 * 13 *"), "month field: 13 is out of range 1-12");
        assert_eq!(err("0 0 * * 8"), "day-of-week field: 8 is out of range 0-7");
        // The digits typed, however many.
        assert_eq!(
            err("0 0 * * 99999999999999999999999"),
            "day-of-week field: 99999999999999999999999 is out of range 0-7"
        );
    }

    #[test]
    fn the_edges_of_each_range_are_accepted() {
        for ok in [
            "0 * * * * *",
            "59 * * * * *",
            "0 * * * *",
            "59 * * * *",
            "* 0 * * *",
            "* 23 * * *",
            "* * 1 * *",
            "* * 31 * *",
            "* * * 1 *",
            "* * * 12 *",
            "* * * * 0",
            "* * * * 7",
            "0-59 0-23 1-31 1-12 0-7",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn ranges_steps_and_lists_are_checked_item_by_item() {
        assert_eq!(err("0 1,2,70 * * *"), "hour field: 70 is out of range 0-23");
        assert_eq!(
            err("10-5 * * * *"),
            "minute field: range 10-5 goes backwards (within 0-59)"
        );
        assert_eq!(err("5-60 * * * *"), "minute field: 60 is out of range 0-59");
        assert_eq!(
            err("*/0 * * * *"),
            "minute field: step 0 is out of range 1-65535"
        );
        assert_eq!(
            err("*/99999 * * * *"),
            "minute field: step 99999 is out of range 1-65535"
        );
        assert_eq!(
            err("0-10/123456789012345678901234567890 * * * *"),
            "minute field: step 123456789012345678901234567890 is out of range 1-65535"
        );
        assert_eq!(
            err("*/x * * * *"),
            "minute field: step 'x' is not a whole number of at least 1"
        );
        assert_eq!(
            err("5/10 * * * *"),
            "minute field: '5/10': a step needs * or a range (*/10 or 5-59/10)"
        );
        assert_eq!(err("1,,2 * * * *"), "minute field: an empty item");
        assert_eq!(
            err("*,5 * * * *"),
            "minute field: * can't be one item of a list"
        );
        assert_eq!(
            err("x * * * *"),
            "minute field: 'x' is not a number from 0 to 59"
        );
        for ok in [
            "*/15 * * * *",
            "0-30/5 * * * *",
            "1,2,3 0-6/2 * * *",
            "*/100 * * * *",
            "*/65535 * * * *",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn names_only_where_they_belong() {
        for ok in [
            "0 0 * JAN-MAR *",
            "0 0 * jan,dec *",
            "0 0 * * MON-FRI",
            "0 0 * * fri-sun",
            "0 0 * * SUN",
            "0 0 * * MON#2",
            "0 0 * * 5L",
            "0 0 * * L",
            "0 0 * * +MON",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            err("0 MON * * *"),
            "hour field: 'MON' is not a number from 0 to 23"
        );
        assert_eq!(
            err("0 0 * FOO *"),
            "month field: 'FOO' is not a number from 1 to 12 or a month name (JAN-DEC)"
        );
        assert_eq!(
            err("0 0 * * JAN"),
            "day-of-week field: 'JAN' is not a number from 0 to 7 or a day name (SUN-SAT)"
        );
        assert_eq!(
            err("0 0 * * SAT-MON"),
            "day-of-week field: range 6-1 goes backwards (within 0-7)"
        );
        assert_eq!(
            err("0 0 * * MON#6"),
            "day-of-week field: 'MON#6': the week number after # is 1 to 5"
        );
    }

    #[test]
    fn day_of_month_specials() {
        for ok in [
            "0 0 L * *",
            "0 0 LW * *",
            "0 0 15W * *",
            "0 0 ? * MON",
            "0 0 1 * ?",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            err("0 0 32W * *"),
            "day-of-month field: 32 is out of range 1-31"
        );
        assert_eq!(
            err("0 ? * * *"),
            "hour field: '?' is not a number from 0 to 23"
        );
    }

    #[test]
    fn field_counts_and_nicknames() {
        let three = err("* * *");
        assert!(three.contains("5 or 6 fields are accepted"), "{three}");
        assert!(three.ends_with("it has 3"), "{three}");
        assert!(err("0 0 0 1 1 * 2030").ends_with("it has 7"));
        assert!(err("").ends_with("it has 0"));
        for ok in ["@daily", "@HOURLY", " @weekly "] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        assert!(err("@reboot").starts_with("unknown nickname @reboot (one of @yearly"));
    }

    #[test]
    fn what_it_accepts_croner_accepts() {
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build();
        for expr in [
            "0 3 * * 1-5",
            "*/2 * * * * *",
            "0 0 * JAN-MAR MON-FRI",
            "0 0 * * fri-sun",
            "0 0 L * *",
            "0 0 LW * *",
            "0 0 15W * *",
            "0 0 * * MON#2",
            "0 0 * * 5L",
            "0 0 ? * MON",
            "0 0 * * +MON",
            "0-59/7 0-23 1-31 1-12 0-7",
            "@monthly",
        ] {
            assert_eq!(check(expr), Ok(()), "{expr}");
            assert!(parser.parse(expr).is_ok(), "croner refuses {expr}");
        }
    }

    #[test]
    fn schedules_with_five_or_six_fields() {
        assert!(parse_schedule("0 3 * * 1-5").is_ok());
        assert!(parse_schedule("*/2 * * * * *").is_ok());
        let three = parse_schedule("* * *").unwrap_err();
        assert!(
            three.starts_with("schedule \"* * *\": 5 or 6 fields are accepted"),
            "{three}"
        );
        assert!(parse_schedule("0 0 0 1 1 * 2030").is_err());
    }

    #[test]
    fn fires_ever_agrees_with_croner_s_search() {
        let from = chrono::DateTime::parse_from_rfc3339("2026-03-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        for expr in [
            "0 0 31 2 *",
            "0 0 29 2 *",
            "0 0 30 2 *",
            "0 0 31 4,6 *",
            "0 0 31 4,7 *",
            "0 0 L 2 *",
            "0 0 * * 5#5",
            "0 0 * 2 5#5",
            "0 0 15W 2 *",
            "0 0 30W 2 *",
            "0 0 LW 2 *",
            "0 0 31 2 MON",
            "*/5 * * * *",
            "@monthly",
        ] {
            let cron = parse_schedule(expr).unwrap();
            assert_eq!(
                fires_ever(&cron),
                cron.find_next_occurrence(&from, false).is_ok(),
                "{expr}"
            );
        }
    }
}
