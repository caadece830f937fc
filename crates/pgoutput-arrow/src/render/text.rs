//! The small writers every encoder shares: JSON strings, the pretty format's quoted text,
//! ISO 8601 dates and times of any year, floats as Python prints them, decimals, hex.
//! Each appends to the one output buffer; none allocates on the hot path.

use std::fmt::Write as _;

use crate::types::civil_from_days;

/// `"` + `s` escaped as JSON (non-ASCII kept as is, as `json.dumps(ensure_ascii=False)`
/// writes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other controls `\u00xx`) + `"`.
pub(crate) fn json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    json_str_body(out, s.as_bytes());
    out.push(b'"');
}

/// Bytes that JSON requires escaped: controls, `"` and `\`.
const fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

const ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = needs_escape(i as u8);
        i += 1;
    }
    t
};

pub(crate) fn json_str_body(out: &mut Vec<u8>, bytes: &[u8]) {
    // Runs of bytes that need no escape are copied whole.
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !ESCAPE[b as usize] {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
        }
    }
    out.extend_from_slice(&bytes[start..]);
}

/// The pretty format's text: `'` + `s` with `'` doubled and newlines as `\n` + `'`; a text
/// longer than `max_chars` characters keeps its first `max_chars` and says how long it was:
/// `'abc…' (10240 chars)`.
pub(crate) fn pretty_str(out: &mut Vec<u8>, s: &str, max_chars: usize) {
    let (shown, total) = cut(s, max_chars);
    out.push(b'\'');
    let bytes = shown.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\'' || b == b'\n' {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(if b == b'\'' { b"''" } else { b"\\n" });
            start = i + 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    if let Some(total) = total {
        out.extend_from_slice("…' (".as_bytes());
        int(out, total as i64);
        out.extend_from_slice(b" chars)");
    } else {
        out.push(b'\'');
    }
}

/// `s` cut to `max_chars` characters, and its length in characters when it was cut.
fn cut(s: &str, max_chars: usize) -> (&str, Option<usize>) {
    // A text of at most max_chars bytes has at most max_chars characters.
    if s.len() <= max_chars {
        return (s, None);
    }
    match s.char_indices().nth(max_chars) {
        None => (s, None),
        Some((end, _)) => (&s[..end], Some(max_chars + s[end..].chars().count())),
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Lowercase hex of `bytes`.
pub(crate) fn hex(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

/// The pretty format's bytea: `\x` + hex, cut after `max_bytes` bytes: `\x0a0b…' (4096 bytes)`.
pub(crate) fn pretty_hex(out: &mut Vec<u8>, bytes: &[u8], max_bytes: usize) {
    out.extend_from_slice(b"\\x");
    if bytes.len() <= max_bytes {
        hex(out, bytes);
    } else {
        hex(out, &bytes[..max_bytes]);
        out.extend_from_slice("… (".as_bytes());
        int(out, bytes.len() as i64);
        out.extend_from_slice(b" bytes)");
    }
}

/// `8-4-4-4-12` lowercase hex of a uuid's 16 bytes.
pub(crate) fn uuid(out: &mut Vec<u8>, b: &[u8]) {
    if b.len() != 16 {
        return hex(out, b);
    }
    hex(out, &b[..4]);
    out.push(b'-');
    hex(out, &b[4..6]);
    out.push(b'-');
    hex(out, &b[6..8]);
    out.push(b'-');
    hex(out, &b[8..10]);
    out.push(b'-');
    hex(out, &b[10..]);
}

pub(crate) fn int(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa_buf();
    out.extend_from_slice(format_int(&mut buf, v as i128));
}

pub(crate) fn int128(out: &mut Vec<u8>, v: i128) {
    let mut buf = itoa_buf();
    out.extend_from_slice(format_int(&mut buf, v));
}


fn itoa_buf() -> [u8; 40] {
    [0; 40]
}

/// Decimal digits of `v` in `buf`, without allocating.
fn format_int(buf: &mut [u8; 40], v: i128) -> &[u8] {
    let neg = v < 0;
    let mut n = v.unsigned_abs();
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// `v` zero-padded to `width` digits (`v` >= 0).
fn padded(out: &mut Vec<u8>, v: i128, width: usize) {
    let mut buf = itoa_buf();
    let digits = format_int(&mut buf, v);
    for _ in digits.len()..width {
        out.push(b'0');
    }
    out.extend_from_slice(digits);
}

/// A float as Python's `repr` writes it (what `json.dumps` writes for a finite float):
/// the shortest digits that read back the same, positional from 1e-4 to below 1e16 with
/// at least one decimal (`123.0`), else `1e+16`, `1.5e-07`. `scratch` is reused.
pub(crate) fn py_float(out: &mut Vec<u8>, v: f64, scratch: &mut String) {
    scratch.clear();
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let _ = write!(scratch, "{v:e}");
    let (mantissa, exp) = scratch.split_once('e').unwrap_or((scratch.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    if neg {
        out.push(b'-');
    }
    let (first, rest) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    // digits d1 d2 ... dn with the decimal point after `decpt` digits.
    let decpt = exp + 1;
    if !(-3..=16).contains(&decpt) {
        out.extend_from_slice(first.as_bytes());
        if !rest.is_empty() {
            out.push(b'.');
            out.extend_from_slice(rest.as_bytes());
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        padded(out, exp.unsigned_abs() as i128, 2);
        return;
    }
    let digits: Vec<u8> = first.bytes().chain(rest.bytes()).collect();
    if decpt <= 0 {
        out.extend_from_slice(b"0.");
        for _ in 0..-decpt {
            out.push(b'0');
        }
        out.extend_from_slice(&digits);
    } else {
        let decpt = decpt as usize;
        if digits.len() <= decpt {
            out.extend_from_slice(&digits);
            for _ in digits.len()..decpt {
                out.push(b'0');
            }
            out.extend_from_slice(b".0");
        } else {
            out.extend_from_slice(&digits[..decpt]);
            out.push(b'.');
            out.extend_from_slice(&digits[decpt..]);
        }
    }
}

/// NaN, Infinity, -Infinity: how JSON-safe output names a float JSON cannot hold.
pub(crate) fn non_finite(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    }
}

/// An unscaled decimal as `format(Decimal, "f")` writes it: `12.50`, `-0.01`, `1200` (a
/// negative scale), `0`.
pub(crate) fn decimal(out: &mut Vec<u8>, unscaled: &str, scale: i8) {
    let (neg, digits) = match unscaled.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, unscaled),
    };
    if neg {
        out.push(b'-');
    }
    if scale <= 0 {
        out.extend_from_slice(digits.as_bytes());
        if digits != "0" {
            for _ in 0..-(scale as i32) {
                out.push(b'0');
            }
        }
        return;
    }
    let scale = scale as usize;
    if digits.len() > scale {
        let point = digits.len() - scale;
        out.extend_from_slice(&digits.as_bytes()[..point]);
        out.push(b'.');
        out.extend_from_slice(&digits.as_bytes()[point..]);
    } else {
        out.extend_from_slice(b"0.");
        for _ in digits.len()..scale {
            out.push(b'0');
        }
        out.extend_from_slice(digits.as_bytes());
    }
}

pub(crate) const US_PER_DAY: i128 = 86_400_000_000;

/// ISO 8601 date: four-digit years, expanded with a sign outside 0000-9999 (year 0 is 1 BC).
pub(crate) fn iso_date(out: &mut Vec<u8>, days: i128) {
    // Any day count here fits i64: the widest comes from i64 seconds, about 1e14 days.
    let (y, m, d) = civil_from_days(days as i64);
    let y = i128::from(y);
    if (0..=9999).contains(&y) {
        padded(out, y, 4);
    } else {
        out.push(if y < 0 { b'-' } else { b'+' });
        padded(out, y.abs(), 4);
    }
    out.push(b'-');
    padded(out, m as i128, 2);
    out.push(b'-');
    padded(out, d as i128, 2);
}

/// `HH:MM:SS`, then `.ffffff` when the microseconds are not 0 (`us` >= 0; hours may pass 24).
pub(crate) fn iso_time(out: &mut Vec<u8>, us: i128) {
    let (s, frac) = (us.div_euclid(1_000_000), us.rem_euclid(1_000_000));
    let (h, rem) = (s.div_euclid(3600), s.rem_euclid(3600));
    padded(out, h, 2);
    out.push(b':');
    padded(out, rem / 60, 2);
    out.push(b':');
    padded(out, rem % 60, 2);
    if frac != 0 {
        out.push(b'.');
        padded(out, frac, 6);
    }
}

/// Microseconds since 1970-01-01 → ISO 8601, `sep` between date and time, `Z` when `utc`.
pub(crate) fn iso_timestamp(out: &mut Vec<u8>, us: i128, utc: bool, sep: u8) {
    iso_date(out, us.div_euclid(US_PER_DAY));
    out.push(sep);
    iso_time(out, us.rem_euclid(US_PER_DAY));
    if utc {
        out.push(b'Z');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn floats_as_python_prints_them() {
        let mut scratch = String::new();
        for (v, want) in [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-0.0, "-0.0"),
            (1.5e-7, "1.5e-07"),
            (123.0, "123.0"),
            (-0.5, "-0.5"),
            (1e100, "1e+100"),
            (f32::MAX as f64, "3.4028234663852886e+38"),
            (0.1f32 as f64, "0.10000000149011612"),
            (123456.789, "123456.789"),
        ] {
            assert_eq!(s(|o| py_float(o, v, &mut scratch)), want);
        }
    }

    #[test]
    fn decimals_as_python_formats_them() {
        for (u, scale, want) in [
            ("1250", 2, "12.50"),
            ("-1", 2, "-0.01"),
            ("0", 2, "0.00"),
            ("12", -2, "1200"),
            ("0", -2, "0"),
            ("7", 0, "7"),
            ("-12345", 3, "-12.345"),
        ] {
            assert_eq!(s(|o| decimal(o, u, scale)), want);
        }
    }

    #[test]
    fn dates_of_any_year() {
        assert_eq!(s(|o| iso_date(o, 0)), "1970-01-01");
        assert_eq!(s(|o| iso_date(o, 19782)), "2024-02-29");
        // 44 BC is astronomical year -43.
        assert_eq!(s(|o| iso_date(o, -735_160)), "-0043-03-15");
        assert_eq!(s(|o| iso_date(o, 2_932_897)), "+10000-01-01");
        assert_eq!(s(|o| iso_timestamp(o, -1, true, b'T')), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn json_strings() {
        assert_eq!(s(|o| json_str(o, "a\"b\\c\n\u{1}\u{7f}é")), "\"a\\\"b\\\\c\\n\\u0001\u{7f}é\"");
    }

    #[test]
    fn pretty_text_is_cut_with_its_length() {
        assert_eq!(s(|o| pretty_str(o, "it's\nok", 64)), "'it''s\\nok'");
        assert_eq!(s(|o| pretty_str(o, &"é".repeat(10), 4)), "'éééé…' (10 chars)");
        assert_eq!(s(|o| pretty_str(o, "abcd", 4)), "'abcd'");
        assert_eq!(s(|o| pretty_hex(o, &[1, 2, 3], 2)), "\\x0102… (3 bytes)");
    }
}
