//! timestamp and timestamptz: PostgreSQL's text output in every DateStyle and its binary
//! send format, into µs since 2000-01-01, then Arrow (see the parent module).

use super::*;

/// PostgreSQL's timestamp: µs since 2000-01-01 (UTC for timestamptz), i64::MIN / i64::MAX
/// for -infinity / infinity.
pub(crate) fn timestamp_bin(bytes: &[u8]) -> Result<i64> {
    Ok(i64::from_be_bytes(fixed::<8>("timestamp", bytes)?))
}

/// A timestamp's text split into its local date and time and the zone that follows.
pub(super) struct LocalStamp<'a> {
    /// Days since 1970 and µs since midnight, local time.
    days: i64,
    time: i64,
    /// A numeric offset (ISO: seconds east of UTC), or the abbreviation the other styles print.
    zone: Zone<'a>,
}

enum Zone<'a> {
    None,
    East(i64),
    Abbrev(&'a [u8]),
}

/// The Postgres style: `Wed Nov 25 10:00:00.5 2026 EST`, `Wed 25 Nov ...` under DMY.
pub(super) fn parse_postgres_stamp(s: &[u8]) -> Option<(i64, i64, &[u8], &[u8])> {
    let mut parts = s.splitn(6, |&c| c == b' ');
    let dow = parts.next()?;
    let (x, y) = (parts.next()?, parts.next()?);
    let time = parts.next()?;
    let year = parts.next()?;
    let zone = parts.next().unwrap_or(b"");
    let month_of = |m: &[u8]| MONTHS.iter().position(|&n| n == m).map(|i| i as i64 + 1);
    let day_of = |d: &[u8]| (d.len() == 2 && d.iter().all(u8::is_ascii_digit)).then(|| ((d[0] - b'0') * 10 + d[1] - b'0') as i64);
    let (month, day) = match (month_of(x), month_of(y)) {
        (Some(m), None) => (m, day_of(y)?),
        (None, Some(m)) => (m, day_of(x)?),
        _ => return None,
    };
    let mut ty = Text::new(year);
    let year = ty.num(4, 9)?;
    if !ty.done() || year < 1 || !(1..=31).contains(&day) {
        return None;
    }
    let wd = WEEKDAYS.iter().position(|&n| n == dow)? as i64;
    Some((year * 10_000 + month * 100 + day, wd, time, zone))
}

/// Any DateStyle's timestamp (ISO, SQL, German, Postgres), its zone not yet resolved;
/// `Err(true)` when a day or month is out of range for the date order.
/// Two ASCII digits' value; None if either is not a digit.
#[inline(always)]
pub(super) fn two_digits(a: u8, b: u8) -> Option<i64> {
    let (a, b) = (a.wrapping_sub(b'0'), b.wrapping_sub(b'0'));
    (a <= 9 && b <= 9).then_some(a as i64 * 10 + b as i64)
}

/// Days since 1970 of an ISO date `YYYY-MM-DD` of years 1 to 9999 (what the ISO DateStyle
/// prints for nearly every value, and the only shape read here): the fast path of the date
/// and timestamp parsers, which read everything else (and fall back to for anything else).
#[inline]
pub(super) fn iso_days(b: &[u8; 10]) -> Option<i64> {
    if b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let year = two_digits(b[0], b[1])? * 100 + two_digits(b[2], b[3])?;
    let (month, day) = (two_digits(b[5], b[6])? as u32, two_digits(b[8], b[9])? as u32);
    if year == 0 || !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// The last ISO date a timestamp column read, and its days: consecutive values of a column
/// mostly share their date (changes made about the same time), and reading a date was about
/// half of an ISO timestamp's parse.
#[derive(Clone, Copy)]
pub(crate) struct LastDate {
    text: [u8; 10],
    days: i64,
}

impl Default for LastDate {
    fn default() -> Self {
        LastDate { text: *b"2000-01-01", days: UNIX_TO_PG_DAYS as i64 }
    }
}

impl LastDate {
    /// [`iso_days`] of `b`, remembered.
    #[inline(always)]
    fn days(&mut self, b: &[u8; 10]) -> Option<i64> {
        if *b == self.text {
            return Some(self.days);
        }
        let days = iso_days(b)?;
        *self = LastDate { text: *b, days };
        Some(days)
    }
}

/// PostgreSQL's microseconds since 2000 of an ISO timestamp `YYYY-MM-DD HH:MM:SS[.f{1,6}]`
/// (years 1 to 9999), with a `±HH[:MM]` offset when `with_zone`; None for any other shape,
/// which the general parser reads. `last`: the date read before, see [`LastDate`].
#[inline]
pub(super) fn iso_stamp(b: &[u8], with_zone: bool, last: &mut LastDate) -> Option<i64> {
    let days = last.days(b.get(..10)?.try_into().ok()?)?;
    let t = b.get(10..19)?;
    if t[0] != b' ' || t[3] != b':' || t[6] != b':' {
        return None;
    }
    let (h, m, sec) = (two_digits(t[1], t[2])?, two_digits(t[4], t[5])?, two_digits(t[7], t[8])?);
    if h > 23 || m > 59 || sec > 59 {
        return None;
    }
    let mut time = h * USECS_PER_HOUR + m * USECS_PER_MINUTE + sec * USECS_PER_SEC;
    let mut rest = &b[19..];
    if let Some((b'.', frac)) = rest.split_first() {
        let n = frac.iter().take(7).take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 6 {
            return None;
        }
        let mut f = 0;
        for &c in &frac[..n] {
            f = f * 10 + (c - b'0') as i64;
        }
        time += f * 10i64.pow((6 - n) as u32);
        rest = &frac[n..];
    }
    let east = match (with_zone, rest) {
        (false, []) => 0,
        (true, [sign @ (b'+' | b'-'), h1, h2, zone @ ..]) => {
            let mins = match zone {
                [] => 0,
                [b':', m1, m2] => two_digits(*m1, *m2).filter(|&m| m <= 59)?,
                _ => return None,
            };
            let secs = two_digits(*h1, *h2)? * 3600 + mins * 60;
            if *sign == b'-' {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    Some(days * USECS_PER_DAY + time - UNIX_TO_PG_MICROS - east * USECS_PER_SEC)
}

pub(super) fn parse_stamp(bytes: &[u8], with_zone: bool, order: DateOrder) -> std::result::Result<LocalStamp<'_>, bool> {
    let (body, bc) = match bytes.strip_suffix(b" BC") {
        Some(b) => (b, true),
        None => (bytes, false),
    };
    let (days, time, zone) = if body.first().is_some_and(u8::is_ascii_alphabetic) {
        let (packed, weekday, time_text, zone_text) = parse_postgres_stamp(body).ok_or(false)?;
        let days = packed_days(packed, bc).ok_or(false)?;
        if (days + 4).rem_euclid(7) != weekday {
            return Err(false);
        }
        let mut t = Text::new(time_text);
        let time = parse_time(&mut t).filter(|_| t.done()).ok_or(false)?;
        let zone = if zone_text.is_empty() { Zone::None } else { Zone::Abbrev(zone_text) };
        (days, time, zone)
    } else {
        let mut t = Text::new(body);
        let numeric = body.get(2).is_some_and(|c| !c.is_ascii_digit());
        let packed = parse_date_styled(&mut t, order);
        if !t.eat(b' ') {
            return Err(false);
        }
        let days = styled_days(packed, bc, numeric).map_err(|_| true)?.ok_or(false)?;
        let time = parse_time(&mut t).ok_or(false)?;
        let zone = if t.done() {
            Zone::None
        } else if t.eat(b' ') && numeric {
            Zone::Abbrev(&t.s[t.i..])
        } else {
            Zone::East(parse_offset(&mut t).filter(|_| t.done()).ok_or(false)?)
        };
        (days, time, zone)
    };
    if with_zone == matches!(zone, Zone::None) {
        return Err(false);
    }
    Ok(LocalStamp { days, time, zone })
}

/// A zone abbreviation that is a number (`+0530`, `-03`, `+05:30`): the IANA database's
/// abbreviation for zones without a letter one is their offset.
pub(super) fn numeric_abbrev(a: &[u8]) -> Option<i64> {
    let mut t = Text::new(a);
    if a.len() == 5 && a[3].is_ascii_digit() {
        let sign = if t.eat(b'+') { 1 } else if t.eat(b'-') { -1 } else { return None };
        let (h, m) = (t.num(2, 2)?, t.num(2, 2)?);
        return (m < 60).then_some(sign * (h * 3600 + m * 60));
    }
    parse_offset(&mut t).filter(|_| t.done())
}

/// Seconds east of UTC of `abbrev` at the local time `local_secs` (since 1970): a numeric
/// abbreviation is its offset; UTC and GMT are 0; a letter one is looked up in `timezone`.
pub(super) fn resolve_abbrev(abbrev: &[u8], local_secs: i64, timezone: Option<TimeZoneName>) -> std::result::Result<i64, String> {
    use chrono::{Offset, TimeZone};
    use chrono_tz::OffsetName;

    if let Some(east) = numeric_abbrev(abbrev) {
        return Ok(east);
    }
    let name = std::str::from_utf8(abbrev).unwrap_or("?");
    let Some(TimeZoneName(tz)) = timezone else {
        if matches!(abbrev, b"UTC" | b"GMT") {
            return Ok(0);
        }
        return Err(format!(
            "its zone is the abbreviation {name:?} (DateStyle SQL, German or Postgres print one), which does not give the UTC offset: pass timezone= the TimeZone setting the capture was printed under (e.g. 'America/New_York'), or capture with DateStyle ISO"
        ));
    };
    let local = chrono::DateTime::from_timestamp(local_secs, 0)
        .ok_or_else(|| format!("the time zone {} cannot be looked up this far from 1970", tz.name()))?
        .naive_utc();
    let found = tz.from_local_datetime(&local);
    let mut seen = Vec::new();
    for dt in [found.earliest(), found.latest()].into_iter().flatten() {
        let off = dt.offset();
        let abbr = off.abbreviation().unwrap_or("");
        if abbr.as_bytes() == abbrev {
            return Ok(off.fix().local_minus_utc() as i64);
        }
        if !seen.iter().any(|s| s == abbr) {
            seen.push(abbr.to_string());
        }
    }
    Err(format!(
        "time zone {} does not use the abbreviation {name:?} at that local time (it uses {}): the capture was printed under another TimeZone, or by a server whose time zone database differs (tzdata merged zones such as Europe/Amsterdam into others in 2022)",
        tz.name(),
        if seen.is_empty() { "none: the time falls in a transition gap".to_string() } else { seen.join(" or ") }
    ))
}

pub(super) fn timestamp_text_any(bytes: &[u8], with_zone: bool, ctx: DateTimeText) -> Result<i64> {
    timestamp_text_last(bytes, with_zone, ctx, &mut LastDate::default())
}

/// [`timestamp_text_any`] with the date a column read before ([`LastDate`]). Not inlined:
/// inlined into the cell loop of `TableBuilder::append`, it cost every other column's cells
/// (+2% instructions on wide-binary, which has no text timestamps).
#[inline(never)]
pub(crate) fn timestamp_text_last(bytes: &[u8], with_zone: bool, ctx: DateTimeText, last: &mut LastDate) -> Result<i64> {
    match iso_stamp(bytes, with_zone, last) {
        Some(v) => Ok(v),
        None => timestamp_text_styled(bytes, with_zone, ctx),
    }
}

/// [`timestamp_text_any`] in every DateStyle, without the ISO fast path.
pub(super) fn timestamp_text_styled(bytes: &[u8], with_zone: bool, ctx: DateTimeText) -> Result<i64> {
    match bytes {
        b"infinity" => return Ok(i64::MAX),
        b"-infinity" => return Ok(i64::MIN),
        _ => {}
    }
    let what = if with_zone { "timestamptz" } else { "timestamp" };
    let bad = |order_suspect: bool, why: &str| {
        ValueError::new(format!(
            "invalid {what} value {:?}{}{why}",
            Shown(bytes),
            if why.is_empty() {
                format!(
                    ": expected a DateStyle's {what} (ISO 2026-11-25 10:00:00.5{z}, SQL 11/25/2026 10:00:00.5{a}, German 25.11.2026 10:00:00.5{a}, Postgres Wed Nov 25 10:00:00.5 2026{a}; \" BC\" last), read with date_order {}{}",
                    ctx.order.name(),
                    if order_suspect { ORDER_HINT } else { "" },
                    z = if with_zone { "+05:30" } else { "" },
                    a = if with_zone { " EST" } else { "" },
                )
            } else {
                ": ".to_string()
            }
        ))
    };
    let stamp = parse_stamp(bytes, with_zone, ctx.order).map_err(|suspect| bad(suspect, ""))?;
    let local = stamp.days as i128 * USECS_PER_DAY as i128 + stamp.time as i128;
    let east = match stamp.zone {
        Zone::None => 0,
        Zone::East(e) => e,
        Zone::Abbrev(a) => {
            let local_secs = i64::try_from(local.div_euclid(USECS_PER_SEC as i128)).unwrap_or(i64::MAX);
            resolve_abbrev(a, local_secs, ctx.timezone).map_err(|why| bad(false, &why))?
        }
    };
    let micros = local - UNIX_TO_PG_MICROS as i128 - east as i128 * USECS_PER_SEC as i128;
    i64::try_from(micros).ok().filter(|&v| v != i64::MIN && v != i64::MAX).ok_or_else(|| bad(false, ""))
}

/// timestamp_out in any DateStyle: ISO "YYYY-MM-DD HH:MM:SS[.ffffff][ BC]", SQL, German, Postgres.
pub(crate) fn timestamp_text(bytes: &[u8], ctx: DateTimeText) -> Result<i64> {
    timestamp_text_any(bytes, false, ctx)
}

/// timestamptz_out: as timestamp, with the session time zone's offset (ISO) or abbreviation
/// (the other styles) before " BC".
pub(crate) fn timestamptz_text(bytes: &[u8], ctx: DateTimeText) -> Result<i64> {
    timestamp_text_any(bytes, true, ctx)
}

/// Timestamp(µs) since 1970: infinity as i64::MAX, -infinity as [`TIMESTAMP_NEG_INFINITY`]; a value whose µs since 1970
/// overflow i64 (after about 294247 AD) is special.
/// Under [`DatetimeRange::Python`] a timestamp outside 0001-01-01..9999-12-31, under
/// [`DatetimeRange::Pandas`] one outside 1677-09-22..2262-04-10, and ±infinity are special.
pub(crate) fn timestamp_to_arrow(
    pg: i64,
    sv: SpecialValues,
    range: DatetimeRange,
) -> std::result::Result<i64, Special> {
    if pg == i64::MIN || pg == i64::MAX {
        if sv == SpecialValues::Null {
            return Err(Special(String::new()));
        }
        if range != DatetimeRange::Arrow {
            return Err(out_of_range("timestamp", if pg == i64::MAX { "infinity" } else { "-infinity" }, range));
        }
        return Ok(if pg == i64::MIN { TIMESTAMP_NEG_INFINITY } else { pg });
    }
    match pg.checked_add(UNIX_TO_PG_MICROS) {
        Some(v) if range.micros().is_some_and(|(lo, hi)| !(lo..=hi).contains(&v)) => {
            let mut text = String::new();
            timestamp_to_text(pg, false, &mut text);
            Err(out_of_range("timestamp", &text, range))
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
pub(crate) fn timestamp_to_text<O: TextOut + ?Sized>(pg: i64, tz: bool, out: &mut O) {
    match pg {
        i64::MIN => out.push_str("-infinity"),
        i64::MAX => out.push_str("infinity"),
        _ => {
            let days = pg.div_euclid(USECS_PER_DAY);
            let time = pg.rem_euclid(USECS_PER_DAY);
            let bc = push_date(out, days + UNIX_TO_PG_DAYS as i64);
            out.push_ascii(b' ');
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
