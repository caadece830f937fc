//! date, time, timestamp, timestamptz, interval and timetz: PostgreSQL's text output
//! (DateStyle ISO, IntervalStyle postgres: the defaults) and binary send formats
//! (date.c, timestamp.c, datetime.c in src/backend/utils/adt).
//!
//! Values are first read into PostgreSQL's own representation (days or microseconds
//! since 2000-01-01, with its ±infinity sentinels), from text or from binary alike;
//! only then mapped to Arrow, so both modes meet the same special-value rules.

use std::fmt::Write;

use arrow_buffer::IntervalMonthDayNano;

use super::num::{err, fixed};
use super::value::{DatetimeRange, Result, Special, SpecialValues};

/// Days from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_MICROS: i64 = 946_684_800_000_000;
const USECS_PER_DAY: i64 = 86_400_000_000;
const USECS_PER_HOUR: i64 = 3_600_000_000;
const USECS_PER_MINUTE: i64 = 60_000_000;
const USECS_PER_SEC: i64 = 1_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date; `year` is astronomical (1 BC = 0).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The (astronomical year, month, day) of a day count since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// A cursor over one value's text.
struct Text<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Text<'a> {
    fn new(s: &'a [u8]) -> Self {
        Text { s, i: 0 }
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn eat_str(&mut self, t: &[u8]) -> bool {
        if self.s[self.i..].starts_with(t) {
            self.i += t.len();
            true
        } else {
            false
        }
    }
    fn done(&self) -> bool {
        self.i == self.s.len()
    }
    /// Decimal digits: at least `min`, at most `max` of them.
    fn num(&mut self, min: usize, max: usize) -> Option<i64> {
        let start = self.i;
        let mut v: i64 = 0;
        while let Some(c) = self.peek() {
            if !c.is_ascii_digit() || self.i - start == max {
                break;
            }
            v = v * 10 + (c - b'0') as i64;
            self.i += 1;
        }
        (self.i - start >= min).then_some(v)
    }
    /// The microseconds of ".ffffff" (1 to 6 digits), 0 when there is no '.'.
    fn fraction(&mut self) -> Option<i64> {
        if !self.eat(b'.') {
            return Some(0);
        }
        let start = self.i;
        let v = self.num(1, 6)?;
        let n = self.i - start;
        Some(v * 10i64.pow((6 - n) as u32))
    }
}

// ---- date ----

/// PostgreSQL's date: days since 2000-01-01, i32::MIN / i32::MAX for -infinity / infinity.
pub(crate) fn date_bin(bytes: &[u8]) -> Result<i32> {
    Ok(i32::from_be_bytes(fixed::<4>("date", bytes)?))
}

/// "YYYY-MM-DD" with a year of 4 or more digits, then " BC" for years before 1.
fn parse_date(t: &mut Text<'_>) -> Option<i64> {
    let year = t.num(4, 9)?;
    if !t.eat(b'-') {
        return None;
    }
    let month = t.num(2, 2)? as u32;
    if !t.eat(b'-') {
        return None;
    }
    let day = t.num(2, 2)? as u32;
    if !(1..=12).contains(&month) || day < 1 || year < 1 {
        return None;
    }
    Some(year * 10_000 + (month * 100 + day) as i64)
}

/// Days since 1970 of a date read by [`parse_date`] (packed as year*10000+mmdd).
fn packed_days(packed: i64, bc: bool) -> Option<i64> {
    let year = packed / 10_000;
    let (month, day) = ((packed % 10_000 / 100) as u32, (packed % 100) as u32);
    let astro = if bc { 1 - year } else { year };
    (day <= days_in_month(astro, month)).then(|| days_from_civil(astro, month, day))
}

pub(crate) fn date_text(bytes: &[u8]) -> Result<i32> {
    match bytes {
        b"infinity" => return Ok(i32::MAX),
        b"-infinity" => return Ok(i32::MIN),
        _ => {}
    }
    let mut t = Text::new(bytes);
    let parsed = parse_date(&mut t).and_then(|p| {
        let bc = t.eat_str(b" BC");
        let days = packed_days(p, bc)?;
        t.done().then_some(days)
    });
    match parsed.and_then(|d| i32::try_from(d - UNIX_TO_PG_DAYS as i64).ok()) {
        Some(d) if d != i32::MIN && d != i32::MAX => Ok(d),
        _ => err("date (DateStyle ISO: 2024-01-02, with \" BC\")", bytes),
    }
}

/// Date32: days since 1970; ±infinity as i32::MIN / i32::MAX (PostgreSQL's own sentinels).
/// Under [`DatetimeRange::Pandas`] a date outside 0001-01-01..9999-12-31 and ±infinity are
/// special.
pub(crate) fn date_to_arrow(pg: i32, sv: SpecialValues, range: DatetimeRange) -> std::result::Result<i32, Special> {
    if pg == i32::MIN || pg == i32::MAX {
        if sv == SpecialValues::Null {
            return Err(Special(String::new()));
        }
        if range == DatetimeRange::Pandas {
            return Err(out_of_range("date", if pg == i32::MAX { "infinity" } else { "-infinity" }));
        }
        return Ok(pg);
    }
    match pg.checked_add(UNIX_TO_PG_DAYS) {
        Some(d) if range == DatetimeRange::Pandas => {
            let (lo, hi) = DatetimeRange::PANDAS_DAYS;
            if (lo..=hi).contains(&d) {
                Ok(d)
            } else {
                let mut text = String::new();
                date_to_text(pg, &mut text);
                Err(out_of_range("date", &text))
            }
        }
        Some(d) if d != i32::MAX => Ok(d),
        _ => Err(Special(format!("date {pg} days after 2000-01-01 does not fit date32"))),
    }
}

/// The special value of a date or timestamp outside [`DatetimeRange::Pandas`].
fn out_of_range(what: &str, text: &str) -> Special {
    Special(format!(
        "{what} {text} is outside what pandas and Python's datetime hold (datetime_range='pandas': dates \
         0001-01-01 to 9999-12-31, timestamps 1677-09-22 to 2262-04-10)"
    ))
}

fn push_date(out: &mut String, unix_days: i64) -> bool {
    let (y, m, d) = civil_from_days(unix_days);
    let bc = y <= 0;
    let _ = write!(out, "{:04}-{m:02}-{d:02}", if bc { 1 - y } else { y });
    bc
}

/// date_out, DateStyle ISO.
pub(crate) fn date_to_text(pg: i32, out: &mut String) {
    match pg {
        i32::MIN => out.push_str("-infinity"),
        i32::MAX => out.push_str("infinity"),
        _ => {
            if push_date(out, pg as i64 + UNIX_TO_PG_DAYS as i64) {
                out.push_str(" BC");
            }
        }
    }
}

// ---- time ----

/// PostgreSQL's time: microseconds since midnight, 0 to 24:00:00 inclusive.
pub(crate) fn time_bin(bytes: &[u8]) -> Result<i64> {
    let v = i64::from_be_bytes(fixed::<8>("time", bytes)?);
    if !(0..=USECS_PER_DAY).contains(&v) {
        return err("binary time", bytes);
    }
    Ok(v)
}

/// "HH:MM:SS[.ffffff]"; the hour may exceed 23 only as 24:00:00.
fn parse_time(t: &mut Text<'_>) -> Option<i64> {
    let h = t.num(2, 2)?;
    if !t.eat(b':') {
        return None;
    }
    let m = t.num(2, 2)?;
    if !t.eat(b':') {
        return None;
    }
    let s = t.num(2, 2)?;
    let f = t.fraction()?;
    if m > 59 || s > 59 {
        return None;
    }
    let v = h * USECS_PER_HOUR + m * USECS_PER_MINUTE + s * USECS_PER_SEC + f;
    (v <= USECS_PER_DAY).then_some(v)
}

pub(crate) fn time_text(bytes: &[u8]) -> Result<i64> {
    let mut t = Text::new(bytes);
    match parse_time(&mut t) {
        Some(v) if t.done() => Ok(v),
        _ => err("time", bytes),
    }
}

/// Time64(µs) is within a day: 24:00:00 has no value there.
pub(crate) fn time_to_arrow(v: i64) -> std::result::Result<i64, Special> {
    if v >= USECS_PER_DAY {
        return Err(Special(
            "time 24:00:00 does not fit time64[us] (within a day); choose special_values='null' or 'text'".into(),
        ));
    }
    Ok(v)
}

/// "SS" then ".ffffff" without trailing zeros (AppendSeconds with fillzeros).
fn push_seconds(out: &mut String, sec: i64, fsec: i64) {
    let _ = write!(out, "{:02}", sec.abs());
    if fsec != 0 {
        let mut f = fsec.abs();
        let mut width = 6;
        while f % 10 == 0 {
            f /= 10;
            width -= 1;
        }
        let _ = write!(out, ".{f:0width$}");
    }
}

/// time_out.
pub(crate) fn time_to_text(v: i64, out: &mut String) {
    let (h, rest) = (v / USECS_PER_HOUR, v % USECS_PER_HOUR);
    let (m, rest) = (rest / USECS_PER_MINUTE, rest % USECS_PER_MINUTE);
    let _ = write!(out, "{h:02}:{m:02}:");
    push_seconds(out, rest / USECS_PER_SEC, rest % USECS_PER_SEC);
}

/// "+HH", "+HH:MM" or "+HH:MM:SS" for an offset east of UTC in seconds (EncodeTimezone).
fn push_offset(out: &mut String, east: i64) {
    out.push(if east >= 0 { '+' } else { '-' });
    let a = east.abs();
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    let _ = write!(out, "{h:02}");
    if m != 0 || s != 0 {
        let _ = write!(out, ":{m:02}");
    }
    if s != 0 {
        let _ = write!(out, ":{s:02}");
    }
}

/// "+HH[:MM[:SS]]" or "-..." as seconds east of UTC.
fn parse_offset(t: &mut Text<'_>) -> Option<i64> {
    let sign = if t.eat(b'+') {
        1
    } else if t.eat(b'-') {
        -1
    } else {
        return None;
    };
    let h = t.num(2, 2)?;
    let m = if t.eat(b':') { t.num(2, 2)? } else { 0 };
    let s = if m != 0 || t.peek() == Some(b':') {
        if t.eat(b':') {
            t.num(2, 2)?
        } else {
            0
        }
    } else {
        0
    };
    if m > 59 || s > 59 {
        return None;
    }
    Some(sign * (h * 3600 + m * 60 + s))
}

/// timetz's send format: time in µs, then the zone in seconds west of UTC.
pub(crate) fn timetz_bin_to_text(bytes: &[u8], out: &mut String) -> Result<()> {
    let b = fixed::<12>("timetz", bytes)?;
    let time = i64::from_be_bytes(b[..8].try_into().unwrap_or_default());
    let zone = i32::from_be_bytes(b[8..].try_into().unwrap_or_default());
    if !(0..=USECS_PER_DAY).contains(&time) {
        return err("binary timetz", bytes);
    }
    time_to_text(time, out);
    push_offset(out, -(zone as i64));
    Ok(())
}

// ---- timestamp, timestamptz ----

/// PostgreSQL's timestamp: µs since 2000-01-01 (UTC for timestamptz), i64::MIN / i64::MAX
/// for -infinity / infinity.
pub(crate) fn timestamp_bin(bytes: &[u8]) -> Result<i64> {
    Ok(i64::from_be_bytes(fixed::<8>("timestamp", bytes)?))
}

fn timestamp_text_any(bytes: &[u8], with_offset: bool) -> Result<i64> {
    match bytes {
        b"infinity" => return Ok(i64::MAX),
        b"-infinity" => return Ok(i64::MIN),
        _ => {}
    }
    let mut t = Text::new(bytes);
    let parsed = (|| {
        let date = parse_date(&mut t)?;
        if !t.eat(b' ') {
            return None;
        }
        let time = parse_time(&mut t)?;
        let east = if with_offset { parse_offset(&mut t)? } else { 0 };
        let bc = t.eat_str(b" BC");
        if !t.done() {
            return None;
        }
        let days = packed_days(date, bc)? - UNIX_TO_PG_DAYS as i64;
        let micros = days as i128 * USECS_PER_DAY as i128 + time as i128 - east as i128 * USECS_PER_SEC as i128;
        i64::try_from(micros).ok().filter(|&v| v != i64::MIN && v != i64::MAX)
    })();
    let what = if with_offset {
        "timestamptz (DateStyle ISO: 2024-01-02 03:04:05.123456+05:30)"
    } else {
        "timestamp (DateStyle ISO: 2024-01-02 03:04:05.123456)"
    };
    parsed.map_or_else(|| err(what, bytes), Ok)
}

/// timestamp_out: "YYYY-MM-DD HH:MM:SS[.ffffff][ BC]".
pub(crate) fn timestamp_text(bytes: &[u8]) -> Result<i64> {
    timestamp_text_any(bytes, false)
}

/// timestamptz_out: as timestamp, with the session time zone's offset before " BC".
pub(crate) fn timestamptz_text(bytes: &[u8]) -> Result<i64> {
    timestamp_text_any(bytes, true)
}

/// Timestamp(µs) since 1970: ±infinity as i64::MIN / i64::MAX; a value whose µs since 1970
/// overflow i64 (after about 294247 AD) is special.
/// Under [`DatetimeRange::Pandas`] a timestamp outside 1677-09-22..2262-04-10 and ±infinity
/// are special.
pub(crate) fn timestamp_to_arrow(
    pg: i64,
    sv: SpecialValues,
    range: DatetimeRange,
) -> std::result::Result<i64, Special> {
    if pg == i64::MIN || pg == i64::MAX {
        if sv == SpecialValues::Null {
            return Err(Special(String::new()));
        }
        if range == DatetimeRange::Pandas {
            return Err(out_of_range("timestamp", if pg == i64::MAX { "infinity" } else { "-infinity" }));
        }
        return Ok(pg);
    }
    match pg.checked_add(UNIX_TO_PG_MICROS) {
        Some(v) if range == DatetimeRange::Pandas => {
            let (lo, hi) = DatetimeRange::PANDAS_MICROS;
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                let mut text = String::new();
                timestamp_to_text(pg, false, &mut text);
                Err(out_of_range("timestamp", &text))
            }
        }
        Some(v) if v != i64::MAX => Ok(v),
        _ => {
            let mut text = String::new();
            timestamp_to_text(pg, false, &mut text);
            Err(Special(format!(
                "timestamp {text} does not fit timestamp[us] (i64 microseconds since 1970); choose special_values='null' or 'text'"
            )))
        }
    }
}

/// timestamp_out / timestamptz_out with TimeZone UTC (offset "+00").
pub(crate) fn timestamp_to_text(pg: i64, tz: bool, out: &mut String) {
    match pg {
        i64::MIN => out.push_str("-infinity"),
        i64::MAX => out.push_str("infinity"),
        _ => {
            let days = pg.div_euclid(USECS_PER_DAY);
            let time = pg.rem_euclid(USECS_PER_DAY);
            let bc = push_date(out, days + UNIX_TO_PG_DAYS as i64);
            out.push(' ');
            time_to_text(time, out);
            if tz {
                out.push_str("+00");
            }
            if bc {
                out.push_str(" BC");
            }
        }
    }
}

// ---- interval ----

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

/// interval_out with IntervalStyle postgres: "1 year 2 mons -3 days +04:05:06.789",
/// "-00:00:01", "infinity" (PostgreSQL 17+).
pub(crate) fn interval_text(bytes: &[u8]) -> Result<Interval> {
    match bytes {
        b"infinity" => return Ok(INTERVAL_PINF),
        b"-infinity" => return Ok(INTERVAL_NINF),
        _ => {}
    }
    let bad = || err("interval (IntervalStyle postgres: 1 year 2 mons 3 days 04:05:06)", bytes);
    let (mut months, mut days, mut micros) = (0i64, 0i64, 0i64);
    let mut seen_time = false;
    let mut parts = bytes.split(|&c| c == b' ');
    while let Some(part) = parts.next() {
        if seen_time {
            return bad();
        }
        if part.contains(&b':') {
            let mut t = Text::new(part);
            let neg = if t.eat(b'-') {
                true
            } else {
                t.eat(b'+');
                false
            };
            let (Some(h), true, Some(m), true, Some(s)) =
                (t.num(2, 12), t.eat(b':'), t.num(2, 2), t.eat(b':'), t.num(2, 2))
            else {
                return bad();
            };
            let Some(f) = t.fraction() else { return bad() };
            if !t.done() || m > 59 || s > 59 {
                return bad();
            }
            let Some(v) = h
                .checked_mul(USECS_PER_HOUR)
                .and_then(|v| v.checked_add(m * USECS_PER_MINUTE + s * USECS_PER_SEC + f))
            else {
                return bad();
            };
            micros = if neg { -v } else { v };
            seen_time = true;
            continue;
        }
        let Some(n) = super::num::parse_i64(part) else { return bad() };
        let Some(unit) = parts.next() else { return bad() };
        let slot = match unit {
            b"year" | b"years" => {
                let Some(m) = n.checked_mul(12).and_then(|m| m.checked_add(months)) else { return bad() };
                months = m;
                continue;
            }
            b"mon" | b"mons" => &mut months,
            b"day" | b"days" => &mut days,
            _ => return bad(),
        };
        let Some(sum) = slot.checked_add(n) else { return bad() };
        *slot = sum;
    }
    match (i32::try_from(months), i32::try_from(days)) {
        (Ok(months), Ok(days)) => Ok(Interval { months, days, micros }),
        _ => bad(),
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

    #[test]
    fn civil_round_trip() {
        for d in [-2_500_000i64, -719_468, -1, 0, 1, 10_957, 2_000_000, 2_145_042_906] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
        assert_eq!(days_from_civil(2000, 1, 1), 10_957);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }
}
