//! date, time, timestamp, timestamptz and timetz: PostgreSQL's text output
//! and binary send formats (date.c, timestamp.c, datetime.c in src/backend/utils/adt:
//! EncodeDateOnly, EncodeDateTime, EncodeTimezone); interval is `interval.rs`.
//!
//! Text is read in every DateStyle (ISO, SQL, German, Postgres) the server may have printed it in:
//! each style has a shape of its own, so the text says which. Only two things are not in
//! the text: the field order of SQL and Postgres dates (`01/02/2026` is January 2 under
//! MDY, February 1 under DMY), given as [`DateOrder`], and the UTC offset behind the zone
//! *abbreviation* that the non-ISO styles print for timestamptz (`EST`, `LMT`), resolved
//! through the IANA zone given as [`DateTimeText::timezone`], else an error naming the value.
//!
//! Values are first read into PostgreSQL's own representation (days or microseconds
//! since 2000-01-01, with its ±infinity sentinels), from text or from binary alike;
//! only then mapped to Arrow, so both modes meet the same special-value rules.


use super::num::{err, fixed, push_digits, two_digits, Shown, TextOut};
use super::value::{DatetimeRange, Result, Special, SpecialValues, ValueError};

/// DateStyle's field order (the `MDY` of `DateStyle = 'SQL, MDY'`): how the SQL and Postgres
/// styles print a date's day and month as numbers. PostgreSQL prints YMD like MDY.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DateOrder {
    /// Month before day (`11/25/2026`): PostgreSQL's default.
    #[default]
    Mdy,
    /// Day before month (`25/11/2026`).
    Dmy,
    /// Year first for input; printed as MDY.
    Ymd,
}

impl DateOrder {
    pub fn name(&self) -> &'static str {
        match self {
            DateOrder::Mdy => "MDY",
            DateOrder::Dmy => "DMY",
            DateOrder::Ymd => "YMD",
        }
    }
}

impl std::str::FromStr for DateOrder {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "MDY" | "US" | "NONEURO" | "NONEUROPEAN" => Ok(DateOrder::Mdy),
            "DMY" | "EURO" | "EUROPEAN" => Ok(DateOrder::Dmy),
            "YMD" => Ok(DateOrder::Ymd),
            _ => Err(format!("invalid date order {s:?}: expected MDY, DMY or YMD (DateStyle's field order)")),
        }
    }
}

/// An IANA time zone (`America/New_York`), the TimeZone setting a capture was printed under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeZoneName(chrono_tz::Tz);

impl std::str::FromStr for TimeZoneName {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        s.parse::<chrono_tz::Tz>()
            .or_else(|_| {
                // PostgreSQL's names are case-insensitive.
                chrono_tz::TZ_VARIANTS.iter().copied().find(|tz| tz.name().eq_ignore_ascii_case(s)).ok_or(())
            })
            .map(TimeZoneName)
            .map_err(|_| format!("unknown time zone {s:?}: expected an IANA zone name such as 'Europe/Berlin' or 'UTC'"))
    }
}

impl TimeZoneName {
    pub fn name(&self) -> &'static str {
        self.0.name()
    }
}

/// What text-mode dates and times need besides their text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DateTimeText {
    /// The field order of SQL and Postgres style dates.
    pub order: DateOrder,
    /// The zone whose abbreviations non-ISO timestamptz values carry.
    pub timezone: Option<TimeZoneName>,
}

/// Days from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_MICROS: i64 = 946_684_800_000_000;
const USECS_PER_DAY: i64 = 86_400_000_000;
pub(super) const USECS_PER_HOUR: i64 = 3_600_000_000;
pub(super) const USECS_PER_MINUTE: i64 = 60_000_000;
pub(super) const USECS_PER_SEC: i64 = 1_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date; `year` is astronomical (1 BC = 0).
#[inline]
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

const MONTHS: [&[u8]; 12] =
    [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];
const WEEKDAYS: [&[u8]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];

/// Why a date or timestamp text was refused, beyond "not of any style".
const ORDER_HINT: &str = " (a month above 12 or a day above the month's: the capture was likely printed in the other DateStyle field order, see date_order)";

/// A date in the ISO (`2026-11-25`), SQL (`11/25/2026`, `25/11/2026`), German (`25.11.2026`)
/// or Postgres (`11-25-2026`, `25-11-2026`) style, without " BC", packed as [`parse_date`]
/// packs. `Err(())`: of a numeric style but with a day or month out of range.
fn parse_date_styled(t: &mut Text<'_>, order: DateOrder) -> std::result::Result<Option<i64>, ()> {
    let lead = t.s[t.i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if lead != 2 {
        return Ok(parse_date(t));
    }
    let (Some(a), Some(sep)) = (t.num(2, 2), t.peek()) else { return Ok(None) };
    if !matches!(sep, b'/' | b'.' | b'-') {
        return Ok(None);
    }
    t.i += 1;
    let (Some(b), true, Some(year)) = (t.num(2, 2), t.eat(sep), t.num(4, 9)) else { return Ok(None) };
    let (month, day) = if sep == b'.' || order == DateOrder::Dmy { (b, a) } else { (a, b) };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(());
    }
    Ok((year >= 1).then_some(year * 10_000 + month * 100 + day))
}

/// Days since 1970 of a date read by [`parse_date_styled`]; `Err(())` as there, or a day
/// beyond the month's last.
fn styled_days(packed: std::result::Result<Option<i64>, ()>, bc: bool, numeric: bool) -> std::result::Result<Option<i64>, ()> {
    match packed? {
        None => Ok(None),
        Some(p) => match packed_days(p, bc) {
            Some(d) => Ok(Some(d)),
            None if numeric => Err(()),
            None => Ok(None),
        },
    }
}

fn bad_date(bytes: &[u8], ctx: DateTimeText, order_suspect: bool) -> ValueError {
    ValueError::new(format!(
        "invalid date value {:?}: expected a DateStyle's date (ISO 2026-11-25, SQL 11/25/2026, German 25.11.2026, Postgres 11-25-2026; \" BC\" after), read with date_order {}{}",
        Shown(bytes),
        ctx.order.name(),
        if order_suspect { ORDER_HINT } else { "" }
    ))
}

pub(crate) fn date_text(bytes: &[u8], ctx: DateTimeText) -> Result<i32> {
    if let Some(days) = <&[u8; 10]>::try_from(bytes).ok().and_then(iso_days) {
        return Ok((days - UNIX_TO_PG_DAYS as i64) as i32);
    }
    date_text_styled(bytes, ctx)
}

/// [`date_text`] in every DateStyle, without the ISO fast path.
fn date_text_styled(bytes: &[u8], ctx: DateTimeText) -> Result<i32> {
    match bytes {
        b"infinity" => return Ok(i32::MAX),
        b"-infinity" => return Ok(i32::MIN),
        _ => {}
    }
    let mut t = Text::new(bytes);
    let numeric = bytes.get(2).is_some_and(|c| !c.is_ascii_digit());
    let packed = parse_date_styled(&mut t, ctx.order);
    let bc = t.eat_str(b" BC");
    let days = match styled_days(packed, bc, numeric) {
        Ok(Some(d)) if t.done() => d,
        Ok(_) => return Err(bad_date(bytes, ctx, false)),
        Err(()) => return Err(bad_date(bytes, ctx, true)),
    };
    match i32::try_from(days - UNIX_TO_PG_DAYS as i64) {
        Ok(d) if d != i32::MIN && d != i32::MAX => Ok(d),
        _ => Err(bad_date(bytes, ctx, false)),
    }
}

/// The Date32 of -infinity: -(2^31 - 1), DuckDB's sentinel (which reads i32::MIN, PostgreSQL's
/// own, as a date 5877642 BC); infinity is i32::MAX in both. i32::MIN is read as -infinity too.
pub const DATE32_NEG_INFINITY: i32 = i32::MIN + 1;
/// The Timestamp(µs) of -infinity: -(2^63 - 1), DuckDB's sentinel (pandas reads i64::MIN,
/// PostgreSQL's own, as NaT, a missing value); infinity is i64::MAX. i64::MIN is read as
/// -infinity too.
pub const TIMESTAMP_NEG_INFINITY: i64 = i64::MIN + 1;

/// Whether an Arrow Date32 is -infinity / infinity (PostgreSQL's date_out text).
pub(crate) fn date32_infinity(days: i32) -> Option<&'static str> {
    match days {
        i32::MAX => Some("infinity"),
        i32::MIN | DATE32_NEG_INFINITY => Some("-infinity"),
        _ => None,
    }
}

/// Whether an Arrow Timestamp(µs) is -infinity / infinity.
pub(crate) fn timestamp_infinity(micros: i64) -> Option<&'static str> {
    match micros {
        i64::MAX => Some("infinity"),
        i64::MIN | TIMESTAMP_NEG_INFINITY => Some("-infinity"),
        _ => None,
    }
}

/// Date32: days since 1970; infinity as i32::MAX, -infinity as [`DATE32_NEG_INFINITY`].
/// Under [`DatetimeRange::Python`] and [`DatetimeRange::Pandas`] a date outside
/// 0001-01-01..9999-12-31 and ±infinity are special.
pub(crate) fn date_to_arrow(pg: i32, sv: SpecialValues, range: DatetimeRange) -> std::result::Result<i32, Special> {
    if pg == i32::MIN || pg == i32::MAX {
        if sv == SpecialValues::Null {
            return Err(Special(String::new()));
        }
        if range != DatetimeRange::Arrow {
            return Err(out_of_range("date", if pg == i32::MAX { "infinity" } else { "-infinity" }, range));
        }
        return Ok(if pg == i32::MIN { DATE32_NEG_INFINITY } else { pg });
    }
    match pg.checked_add(UNIX_TO_PG_DAYS) {
        Some(d) if range.days().is_some_and(|(lo, hi)| !(lo..=hi).contains(&d)) => {
            let mut text = String::new();
            date_to_text(pg, &mut text);
            Err(out_of_range("date", &text, range))
        }
        Some(d) if d != i32::MAX => Ok(d),
        _ => Err(Special(format!("date {pg} days after 2000-01-01 does not fit date32"))),
    }
}

/// The special value of a date or timestamp outside `range`.
fn out_of_range(what: &str, text: &str, range: DatetimeRange) -> Special {
    let held = match range {
        DatetimeRange::Pandas => "what pandas' datetime64[ns] and Python's datetime hold (dates 0001-01-01 to \
                                  9999-12-31, timestamps 1677-09-22 to 2262-04-10)",
        _ => "what Python's datetime holds (0001-01-01 to 9999-12-31)",
    };
    Special(format!("{what} {text} is outside {held}: datetime_range={:?}", range.name()))
}

fn push_date<O: TextOut + ?Sized>(out: &mut O, unix_days: i64) -> bool {
    let (y, m, d) = civil_from_days(unix_days);
    let bc = y <= 0;
    push_digits(out, (if bc { 1 - y } else { y }) as u64, 4);
    out.push_ascii(b'-');
    push_digits(out, m as u64, 2);
    out.push_ascii(b'-');
    push_digits(out, d as u64, 2);
    bc
}

/// date_out, DateStyle ISO.
pub(crate) fn date_to_text<O: TextOut + ?Sized>(pg: i32, out: &mut O) {
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
pub(super) fn push_seconds<O: TextOut + ?Sized>(out: &mut O, sec: i64, fsec: i64) {
    push_digits(out, sec.unsigned_abs(), 2);
    if fsec != 0 {
        push_fraction(out, fsec);
    }
}

/// ".ffffff" without trailing zeros, for microseconds `fsec` other than 0.
fn push_fraction<O: TextOut + ?Sized>(out: &mut O, fsec: i64) {
    let mut f = fsec.unsigned_abs();
    let mut width = 6;
    while f.is_multiple_of(10) {
        f /= 10;
        width -= 1;
    }
    out.push_ascii(b'.');
    push_digits(out, f, width);
}

/// time_out.
pub(crate) fn time_to_text<O: TextOut + ?Sized>(v: i64, out: &mut O) {
    let (h, rest) = (v / USECS_PER_HOUR, v % USECS_PER_HOUR);
    let (m, rest) = (rest / USECS_PER_MINUTE, rest % USECS_PER_MINUTE);
    if v < 0 {
        // Never from a server (time is 00:00 to 24:00); printed as fmt would.
        out.push_str(&format!("{h:02}:{m:02}:"));
        push_seconds(out, rest / USECS_PER_SEC, rest % USECS_PER_SEC);
        return;
    }
    let (s, fsec) = (rest / USECS_PER_SEC, rest % USECS_PER_SEC);
    if h < 100 {
        // "HH:MM:SS" in one copy of eight bytes.
        let (h, m, s) = (two_digits(h as u64), two_digits(m as u64), two_digits(s as u64));
        out.push_ascii_bytes(&[h[0], h[1], b':', m[0], m[1], b':', s[0], s[1]]);
        if fsec != 0 {
            push_fraction(out, fsec);
        }
        return;
    }
    push_digits(out, h as u64, 2);
    out.push_ascii(b':');
    push_digits(out, m as u64, 2);
    out.push_ascii(b':');
    push_seconds(out, s, fsec);
}

/// "+HH", "+HH:MM" or "+HH:MM:SS" for an offset east of UTC in seconds (EncodeTimezone).
fn push_offset(out: &mut String, east: i64) {
    out.push(if east >= 0 { '+' } else { '-' });
    let a = east.abs();
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    push_digits(out, h as u64, 2);
    if m != 0 || s != 0 {
        out.push(':');
        push_digits(out, m as u64, 2);
    }
    if s != 0 {
        out.push(':');
        push_digits(out, s as u64, 2);
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

mod timestamp;

pub(crate) use timestamp::*;

#[cfg(test)]
mod tests {
    use super::*;

    /// time_out's text by `fmt` (the rule before the eight-byte copy), into a String and into
    /// bytes: every second of a day with and without fractions, and values past it.
    #[test]
    fn time_to_text_is_time_out() {
        fn reference(v: i64) -> String {
            let (h, m, s, f) = (v / USECS_PER_HOUR, v / USECS_PER_MINUTE % 60, v / USECS_PER_SEC % 60, v % USECS_PER_SEC);
            let mut t = format!("{h:02}:{m:02}:{s:02}");
            if f != 0 {
                t.push_str(format!(".{f:06}").trim_end_matches('0'));
            }
            t
        }
        let fractions = [0, 1, 10, 500_000, 123_456, 999_999, 100, 120_000, 5];
        let mut checked = 0;
        for sec in (0..=86_400i64).chain([86_400 * 3, 99 * 3600 + 59 * 60 + 59, 100 * 3600, 1_000_000 * 3600]) {
            for &f in &fractions {
                let v = sec * USECS_PER_SEC + f;
                let (mut text, mut bytes) = (String::new(), Vec::new());
                time_to_text(v, &mut text);
                time_to_text(v, &mut bytes);
                assert_eq!(text, reference(v), "{v}");
                assert_eq!(bytes, text.as_bytes(), "{v}");
                checked += 1;
            }
        }
        assert!(checked > 700_000);
    }

    /// The ISO fast paths give what the general parsers give, on every shape near them.
    #[test]
    fn iso_fast_paths_agree_with_the_general_parsers() {
        let dates = [
            "2026-11-25", "0001-01-01", "9999-12-31", "2024-02-29", "2023-02-29", "2026-04-31", "2026-13-01",
            "2026-00-10", "2026-01-00", "0000-01-01", "1970-01-01", "2000-01-01", "1899-12-31", "2026-1-25",
            "2026/11/25", "20261125xx", "2026-11-2a", "11-25-2026",
        ];
        let times = ["00:00:00", "23:59:59", "24:00:00", "12:60:00", "12:00:60", "10:00:00.5", "10:00:00.123456",
            "10:00:00.1234567", "10:00:00.", "1:00:00", "10:00:00.000001"];
        let zones = ["", "+00", "-00", "+05:30", "-03:30", "+14", "-12:00", "+05:30:52", "+5", "+05:3", "+05:60", " UTC", "Z"];
        // A column's remembered date (LastDate) carried from each text to the next: texts of one
        // date in a row, and bad ones after good ones of the same date.
        let mut last = LastDate::default();
        for order in [DateOrder::Mdy, DateOrder::Dmy, DateOrder::Ymd] {
            let ctx = DateTimeText { order, timezone: None };
            for d in dates {
                assert_eq!(date_text(d.as_bytes(), ctx), date_text_styled(d.as_bytes(), ctx), "{d}");
                for t in times {
                    for z in zones {
                        for bc in ["", " BC"] {
                            let text = format!("{d} {t}{z}{bc}");
                            for with_zone in [false, true] {
                                let fast = timestamp_text_any(text.as_bytes(), with_zone, ctx);
                                let general = timestamp_text_styled(text.as_bytes(), with_zone, ctx);
                                assert_eq!(fast, general, "{text} with_zone {with_zone}");
                                let remembered = timestamp_text_last(text.as_bytes(), with_zone, ctx, &mut last);
                                assert_eq!(remembered, general, "{text} with_zone {with_zone} after a remembered date");
                            }
                        }
                    }
                }
            }
        }
        // Every day of a few years, through the fast path and the general one.
        let ctx = DateTimeText { order: DateOrder::Mdy, timezone: None };
        for day in (days_from_civil(1999, 1, 1)..days_from_civil(2001, 1, 1)).chain(days_from_civil(2399, 12, 1)..days_from_civil(2400, 3, 2)) {
            let (y, m, d) = civil_from_days(day);
            let text = format!("{y:04}-{m:02}-{d:02}");
            assert_eq!(date_text(text.as_bytes(), ctx), date_text_styled(text.as_bytes(), ctx), "{text}");
            let stamp = format!("{text} 13:14:15.25-07");
            let general = timestamp_text_styled(stamp.as_bytes(), true, ctx);
            assert_eq!(timestamp_text_any(stamp.as_bytes(), true, ctx), general);
            assert_eq!(timestamp_text_last(stamp.as_bytes(), true, ctx, &mut last), general, "{stamp}");
            let mut fresh = LastDate::default();
            assert_eq!(timestamp_text_last(stamp.as_bytes(), true, ctx, &mut fresh), general, "{stamp}");
        }
    }

    #[test]
    fn civil_round_trip() {
        for d in [-2_500_000i64, -719_468, -1, 0, 1, 10_957, 2_000_000, 2_145_042_906] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
        assert_eq!(days_from_civil(2000, 1, 1), 10_957);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }

    /// Text at the ends of every range, in every style, with and without a zone database:
    /// a value or an error, never a panic.
    #[test]
    fn extremes_do_not_panic() {
        let zones = [None, Some("America/St_Johns".parse().unwrap()), Some("Asia/Kolkata".parse().unwrap())];
        for timezone in zones {
            for order in [DateOrder::Mdy, DateOrder::Dmy] {
                let ctx = DateTimeText { order, timezone };
                for text in [
                    "12/31/294276 23:59:59 NST", "31.12.999999999 23:59:59 IST", "Fri Dec 31 23:59:59 999999999 LMT BC",
                    "01/01/4714 00:00:00 LMT BC", "Mon Jan 01 00:00:00 0001 LMT BC", "12/31/294276 23:59:59+14:59:59",
                    "00/00/0000 00:00:00 UTC", "99/99/9999", "Wed 25 Nov 10:00:00 2026", "Wed Nov 25 24:00:00 2026 NST",
                    "11-25-2026 10:00:00 +0530", "11/25/2026 10:00:00 -99", "", " BC", "Wed", "@", "P", "PT", "+", "-",
                ] {
                    let _ = timestamptz_text(text.as_bytes(), ctx);
                    let _ = timestamp_text(text.as_bytes(), ctx);
                    let _ = date_text(text.as_bytes(), ctx);
                }
            }
        }
    }
}
