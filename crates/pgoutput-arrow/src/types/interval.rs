//! interval: PostgreSQL's text output in every IntervalStyle (postgres, postgres_verbose,
//! sql_standard, iso_8601: each has a shape of its own, so the text says which) and its binary
//! send format (timestamp.c in src/backend/utils/adt: interval_out, EncodeInterval,
//! interval_send), read into PostgreSQL's own months, days and microseconds, then mapped to
//! Arrow.

use std::fmt::Write;

use arrow_buffer::IntervalMonthDayNano;

use super::datetime::{push_seconds, USECS_PER_HOUR, USECS_PER_MINUTE, USECS_PER_SEC};
use super::num::{err, fixed};
use super::value::{Result, Special, SpecialValues};

/// PostgreSQL's interval: months, days and microseconds, kept apart as PostgreSQL does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

const INTERVAL_PINF: Interval = Interval { months: i32::MAX, days: i32::MAX, micros: i64::MAX };
const INTERVAL_NINF: Interval = Interval { months: i32::MIN, days: i32::MIN, micros: i64::MIN };

/// interval_send: Int64 microseconds, Int32 days, Int32 months.
pub(crate) fn interval_bin(bytes: &[u8]) -> Result<Interval> {
    let b = fixed::<16>("interval", bytes)?;
    Ok(Interval {
        micros: i64::from_be_bytes(b[..8].try_into().unwrap_or_default()),
        days: i32::from_be_bytes(b[8..12].try_into().unwrap_or_default()),
        months: i32::from_be_bytes(b[12..].try_into().unwrap_or_default()),
    })
}

/// An interval's fields while they are read, wide enough for any text; checked at the end.
#[derive(Default)]
struct Fields {
    months: i128,
    days: i128,
    micros: i128,
}

impl Fields {
    fn negated(self) -> Fields {
        Fields { months: -self.months, days: -self.days, micros: -self.micros }
    }
    fn interval(self) -> Option<Interval> {
        Some(Interval {
            months: i32::try_from(self.months).ok()?,
            days: i32::try_from(self.days).ok()?,
            micros: i64::try_from(self.micros).ok()?,
        })
    }
}

/// An optionally signed whole number of at most 19 digits.
fn signed_int(b: &[u8]) -> Option<i128> {
    let (neg, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().fold(0i128, |v, &c| v * 10 + (c - b'0') as i128);
    Some(if neg { -v } else { v })
}

/// Seconds with up to 6 fraction digits (`-6.789`) as microseconds.
fn signed_seconds(b: &[u8]) -> Option<i128> {
    let (neg, rest) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    let (whole, frac) = match rest.iter().position(|&c| c == b'.') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &b""[..]),
    };
    if frac.len() > 6 || (rest.contains(&b'.') && frac.is_empty()) || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let f = frac.iter().fold(0i128, |v, &c| v * 10 + (c - b'0') as i128) * 10i128.pow(6 - frac.len() as u32);
    let v = signed_int(whole)? * USECS_PER_SEC as i128 + f;
    Some(if neg { -v } else { v })
}

/// `[+-]H:MM:SS[.ffffff]` (hours of any width) as microseconds.
fn clock(b: &[u8]) -> Option<i128> {
    let (neg, rest) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    let mut parts = rest.splitn(3, |&c| c == b':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    if h.is_empty() || h.first() == Some(&b'-') || h.first() == Some(&b'+') || m.len() != 2 || sec.len() < 2 {
        return None;
    }
    let (h, m, sec) = (signed_int(h)?, signed_int(m)?, signed_seconds(sec)?);
    if !(0..60).contains(&m) || !(0..60 * USECS_PER_SEC as i128).contains(&sec) {
        return None;
    }
    let v = h * USECS_PER_HOUR as i128 + m * USECS_PER_MINUTE as i128 + sec;
    Some(if neg { -v } else { v })
}

/// IntervalStyle postgres: `1 year 2 mons -3 days +04:05:06.789`, `-00:00:01`.
fn interval_postgres(bytes: &[u8]) -> Option<Fields> {
    let mut f = Fields::default();
    let mut parts = bytes.split(|&c| c == b' ');
    while let Some(part) = parts.next() {
        if part.contains(&b':') {
            f.micros = clock(part)?;
            return parts.next().is_none().then_some(f);
        }
        let n = signed_int(part)?;
        match parts.next()? {
            b"year" | b"years" => f.months += n * 12,
            b"mon" | b"mons" => f.months += n,
            b"day" | b"days" => f.days += n,
            _ => return None,
        }
    }
    Some(f)
}

/// IntervalStyle postgres_verbose: `@ 1 year 2 mons -3 days 4 hours 5 mins 6.789 secs ago`,
/// `@ 0`; "ago" negates every field.
fn interval_verbose(bytes: &[u8]) -> Option<Fields> {
    let rest = bytes.strip_prefix(b"@ ")?;
    let (rest, ago) = match rest.strip_suffix(b" ago") {
        Some(r) => (r, true),
        None => (rest, false),
    };
    if rest == b"0" {
        return (!ago).then(Fields::default);
    }
    let mut f = Fields::default();
    let mut parts = rest.split(|&c| c == b' ');
    while let Some(number) = parts.next() {
        let unit = parts.next()?;
        let unit = unit.strip_suffix(b"s").unwrap_or(unit);
        if unit == b"sec" {
            f.micros += signed_seconds(number)?;
            continue;
        }
        let n = signed_int(number)?;
        match unit {
            b"year" => f.months += n * 12,
            b"mon" => f.months += n,
            b"day" => f.days += n,
            b"hour" => f.micros += n * USECS_PER_HOUR as i128,
            b"min" => f.micros += n * USECS_PER_MINUTE as i128,
            _ => return None,
        }
    }
    Some(if ago { f.negated() } else { f })
}

/// IntervalStyle iso_8601: `P1Y2M3DT4H5M6.789S`, `P-1Y-2M3DT-4H-5M-6.789S`, `PT0S`.
fn interval_iso8601(bytes: &[u8]) -> Option<Fields> {
    let mut rest = bytes.strip_prefix(b"P")?;
    let mut f = Fields::default();
    let mut in_time = false;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        if rest[0] == b'T' && !in_time {
            in_time = true;
            rest = &rest[1..];
            continue;
        }
        let end = rest.iter().position(|c| c.is_ascii_alphabetic())?;
        let (number, unit) = (&rest[..end], rest[end]);
        rest = &rest[end + 1..];
        match (in_time, unit) {
            (true, b'S') => f.micros += signed_seconds(number)?,
            (false, b'Y') => f.months += signed_int(number)? * 12,
            (false, b'M') => f.months += signed_int(number)?,
            (false, b'D') => f.days += signed_int(number)?,
            (true, b'H') => f.micros += signed_int(number)? * USECS_PER_HOUR as i128,
            (true, b'M') => f.micros += signed_int(number)? * USECS_PER_MINUTE as i128,
            _ => return None,
        }
    }
    Some(f)
}

/// `[+-]Y-M` (sql_standard's year-month field) as months.
fn year_month(b: &[u8]) -> Option<i128> {
    let (neg, rest) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    let dash = rest.iter().position(|&c| c == b'-')?;
    let (y, m) = (signed_int(&rest[..dash])?, signed_int(&rest[dash + 1..])?);
    if rest[0] == b'-' || rest.get(dash + 1) == Some(&b'-') || rest.get(dash + 1) == Some(&b'+') || !(0..12).contains(&m) {
        return None;
    }
    let v = y * 12 + m;
    Some(if neg { -v } else { v })
}

/// IntervalStyle sql_standard: `0`, `1-2`, `3 4:05:06.789`, `4:05:06`, each negated whole by
/// a leading `-` (`-1-2`, `-3 4:05:06`); fields of both signs or of both kinds as
/// `+1-2 -3 +4:05:06`.
fn interval_sql_standard(bytes: &[u8]) -> Option<Fields> {
    let parts: Vec<&[u8]> = bytes.split(|&c| c == b' ').collect();
    let mut f = Fields::default();
    match parts.as_slice() {
        [b"0"] => {}
        [ym, d, t] if matches!(ym.first(), Some(b'+' | b'-')) => {
            f.months = year_month(ym)?;
            if !matches!(d.first(), Some(b'+' | b'-')) || !matches!(t.first(), Some(b'+' | b'-')) {
                return None;
            }
            f.days = signed_int(d)?;
            f.micros = clock(t)?;
        }
        [first, rest @ ..] if rest.len() <= 1 => {
            let (neg, first) = match first.strip_prefix(b"-") {
                Some(f) => (true, f),
                None => (false, *first),
            };
            if matches!(first.first(), Some(b'+' | b'-')) {
                return None;
            }
            match rest {
                [] if first.contains(&b':') => f.micros = clock(first)?,
                [] => f.months = year_month(first)?,
                [t] if !matches!(t.first(), Some(b'+' | b'-')) => {
                    f.days = signed_int(first)?;
                    f.micros = clock(t)?;
                }
                _ => return None,
            }
            if neg {
                f = f.negated();
            }
        }
        _ => return None,
    }
    Some(f)
}

/// interval_out in any IntervalStyle: postgres (`1 year 2 mons -3 days +04:05:06.789`),
/// postgres_verbose (`@ 1 year ... ago`), sql_standard (`+1-2 -3 +4:05:06.789`), iso_8601
/// (`P1Y2M-3DT4H5M6.789S`); "infinity" (PostgreSQL 17+) in all of them.
pub(crate) fn interval_text(bytes: &[u8]) -> Result<Interval> {
    match bytes {
        b"infinity" => return Ok(INTERVAL_PINF),
        b"-infinity" => return Ok(INTERVAL_NINF),
        _ => {}
    }
    let fields = match bytes.first() {
        Some(b'@') => interval_verbose(bytes),
        Some(b'P') => interval_iso8601(bytes),
        _ if bytes.iter().any(u8::is_ascii_alphabetic) => interval_postgres(bytes),
        _ => interval_sql_standard(bytes),
    };
    match fields.and_then(Fields::interval) {
        Some(v) if v != INTERVAL_PINF && v != INTERVAL_NINF => Ok(v),
        _ => err(
            "interval (any IntervalStyle: postgres 1 year 2 mons -3 days +04:05:06, postgres_verbose @ 1 year 2 mons ago, sql_standard +1-2 -3 +4:05:06, iso_8601 P1Y2M-3DT4H5M6S)",
            bytes,
        ),
    }
}

/// MonthDayNano: months, days and nanoseconds. ±infinity as all fields i32/i64 MAX or MIN;
/// a time part beyond i64 nanoseconds (about 106751 days) is special.
pub(crate) fn interval_to_arrow(v: Interval, sv: SpecialValues) -> std::result::Result<IntervalMonthDayNano, Special> {
    if v == INTERVAL_PINF || v == INTERVAL_NINF {
        if sv == SpecialValues::Null {
            return Err(Special(String::new()));
        }
        let n = if v == INTERVAL_PINF { i64::MAX } else { i64::MIN };
        return Ok(IntervalMonthDayNano::new(v.months, v.days, n));
    }
    match v.micros.checked_mul(1000) {
        Some(n) if n != i64::MAX && n != i64::MIN => Ok(IntervalMonthDayNano::new(v.months, v.days, n)),
        _ => {
            let mut text = String::new();
            interval_to_text(v, &mut text);
            Err(Special(format!(
                "interval {text} does not fit month_day_nano (i64 nanoseconds); choose special_values='null' or 'text'"
            )))
        }
    }
}

/// PostgreSQL's fields as they are (IntervalType::Struct): every interval fits; ±infinity
/// (all fields at their maximum or minimum, as PostgreSQL stores them) is null under
/// SpecialValues::Null, as for the other types.
pub(crate) fn interval_fields(v: Interval, sv: SpecialValues) -> std::result::Result<Interval, Special> {
    if sv == SpecialValues::Null && (v == INTERVAL_PINF || v == INTERVAL_NINF) {
        return Err(Special(String::new()));
    }
    Ok(v)
}

/// interval_out, IntervalStyle postgres (EncodeInterval, INTSTYLE_POSTGRES).
pub(crate) fn interval_to_text(v: Interval, out: &mut String) {
    if v == INTERVAL_PINF {
        return out.push_str("infinity");
    }
    if v == INTERVAL_NINF {
        return out.push_str("-infinity");
    }
    let (year, mon, mday) = (v.months / 12, v.months % 12, v.days);
    let mut is_zero = true;
    let mut is_before = false;
    for (value, unit) in [(year as i64, "year"), (mon as i64, "mon"), (mday as i64, "day")] {
        if value == 0 {
            continue;
        }
        let _ = write!(
            out,
            "{}{}{} {}{}",
            if is_zero { "" } else { " " },
            if is_before && value > 0 { "+" } else { "" },
            value,
            unit,
            if value != 1 { "s" } else { "" }
        );
        is_before = value < 0;
        is_zero = false;
    }
    let t = v.micros;
    let hour = t / USECS_PER_HOUR;
    let t = t - hour * USECS_PER_HOUR;
    let min = t / USECS_PER_MINUTE;
    let t = t - min * USECS_PER_MINUTE;
    let sec = t / USECS_PER_SEC;
    let fsec = t - sec * USECS_PER_SEC;
    if is_zero || hour != 0 || min != 0 || sec != 0 || fsec != 0 {
        let minus = hour < 0 || min < 0 || sec < 0 || fsec < 0;
        let _ = write!(
            out,
            "{}{}{:02}:{:02}:",
            if is_zero { "" } else { " " },
            if minus { "-" } else if is_before { "+" } else { "" },
            hour.unsigned_abs(),
            min.unsigned_abs()
        );
        push_seconds(out, sec, fsec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text beyond every field's range, or not an interval: an error, never a panic.
    #[test]
    fn extremes_are_errors() {
        for text in ["", " BC", "Wed", "@", "P", "PT", "+", "-", "12/31/294276 23:59:59 NST"] {
            let _ = interval_text(text.as_bytes());
        }
        for text in ["@ 9999999999999999999 years", "P9999999999999999999Y", "-9999999999999999999-11",
                     "+1-2 -3 +99999999999999999999:00:00", "@ 1 sec ago ago", "1 -1", "PT1.1234567S"] {
            assert!(interval_text(text.as_bytes()).is_err(), "{text}");
        }
    }
}
