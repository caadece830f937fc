//! bool, integers, floats, numeric, uuid and bytea: text parsers and binary decoders.
//!
//! Binary formats are those of the types' send functions (bool.c, int.c, int8.c,
//! float.c, numeric.c, uuid.c, varlena.c in PostgreSQL's src/backend/utils/adt).


use super::value::{Result, Special, ValueError};

pub(crate) fn err<T>(what: &str, bytes: &[u8]) -> Result<T> {
    Err(ValueError::new(format!("invalid {what} value {:?}", Shown(bytes))))
}

/// Bytes shown in an error message: as text when they are UTF-8, cut at 64 bytes.
pub(crate) struct Shown<'a>(pub &'a [u8]);

impl std::fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut = &self.0[..self.0.len().min(64)];
        match std::str::from_utf8(cut) {
            Ok(s) => write!(f, "{s:?}")?,
            Err(_) => {
                f.write_str("0x")?;
                for b in cut {
                    write!(f, "{b:02x}")?;
                }
            }
        }
        if self.0.len() > 64 {
            write!(f, "... ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

pub(crate) fn fixed<const N: usize>(what: &str, bytes: &[u8]) -> Result<[u8; N]> {
    bytes.try_into().map_err(|_| {
        ValueError::new(format!("invalid binary {what} value: expected {N} bytes, found {}", bytes.len()))
    })
}

pub(crate) fn bool_text(bytes: &[u8]) -> Result<bool> {
    match bytes {
        b"t" => Ok(true),
        b"f" => Ok(false),
        _ => err("bool", bytes),
    }
}

pub(crate) fn bool_bin(bytes: &[u8]) -> Result<bool> {
    match bytes {
        [0] => Ok(false),
        [1] => Ok(true),
        _ => err("binary bool", bytes),
    }
}

/// Integers as PostgreSQL prints them: an optional '-' then decimal digits.
pub(crate) fn int_text<T: TryFrom<i64>>(bytes: &[u8]) -> Result<T> {
    parse_i64(bytes).and_then(|v| T::try_from(v).ok()).map_or_else(|| err("integer", bytes), Ok)
}

pub(crate) fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (neg, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    if digits.len() <= 18 {
        // Below 10^18 whatever the digits: no overflow to check at each one (the checks
        // were a third of the instructions of pgbench's text integers).
        let mut v: i64 = 0;
        for &d in digits {
            let d = d.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v = v * 10 + d as i64;
        }
        return Some(if neg { -v } else { v });
    }
    // Accumulate negatively so that i64::MIN parses.
    let mut v: i64 = 0;
    for &d in digits {
        let d = d.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_sub(d as i64)?;
    }
    if neg {
        Some(v)
    } else {
        v.checked_neg()
    }
}

pub(crate) fn int2_bin(bytes: &[u8]) -> Result<i16> {
    Ok(i16::from_be_bytes(fixed::<2>("int2", bytes)?))
}
pub(crate) fn int4_bin(bytes: &[u8]) -> Result<i32> {
    Ok(i32::from_be_bytes(fixed::<4>("int4", bytes)?))
}
pub(crate) fn int8_bin(bytes: &[u8]) -> Result<i64> {
    Ok(i64::from_be_bytes(fixed::<8>("int8", bytes)?))
}
pub(crate) fn oid_bin(bytes: &[u8]) -> Result<u32> {
    Ok(u32::from_be_bytes(fixed::<4>("oid", bytes)?))
}

/// Floats: NaN is kept as the canonical quiet NaN whatever its sign and payload were
/// (PostgreSQL prints every NaN as "NaN", so text mode cannot tell them apart).
pub(crate) fn float_text<T: std::str::FromStr + Float>(bytes: &[u8]) -> Result<T> {
    if let Some(v) = short_float_text(bytes) {
        return Ok(v);
    }
    let s = std::str::from_utf8(bytes).map_err(|_| ValueError::new("invalid float value (not UTF-8)"))?;
    s.parse::<T>().map(T::canonical).or_else(|_| err("float", bytes))
}

/// `[-]int[.frac]` (digits on both sides of the point) with few enough digits that their
/// integer and the power of ten are exact in `T`: one division, which IEEE rounds correctly,
/// gives what `parse` gives (Clinger's fast path), without `parse`'s general reading of the
/// text, which was most of a float's cost. None for any other text, which `parse` reads.
#[inline]
pub(crate) fn short_float_text<T: Float>(bytes: &[u8]) -> Option<T> {
    let (neg, rest) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    let (first, last) = (*rest.first()?, *rest.last()?);
    if !first.is_ascii_digit() || !last.is_ascii_digit() || rest.len() > T::EXACT_DIGITS + 1 {
        return None;
    }
    let (m, frac) = short_numeric_text(rest)?;
    // A point (with digits on both sides) is one of the bytes.
    if rest.len() - (frac > 0) as usize > T::EXACT_DIGITS {
        return None;
    }
    Some(T::exact(m, frac as usize, neg))
}

pub(crate) trait Float: Sized {
    /// Digits whose integer is exact in the type (below 2^53, 2^24).
    const EXACT_DIGITS: usize;
    fn canonical(self) -> Self;
    /// ±m / 10^frac, for m of at most EXACT_DIGITS digits and frac at most as many.
    fn exact(m: u64, frac: usize, neg: bool) -> Self;
}
impl Float for f32 {
    const EXACT_DIGITS: usize = 7;
    fn exact(m: u64, frac: usize, neg: bool) -> f32 {
        const P: [f32; 8] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7];
        let v = m as f32 / P[frac];
        if neg { -v } else { v }
    }
    fn canonical(self) -> f32 {
        if self.is_nan() {
            f32::NAN
        } else {
            self
        }
    }
}
impl Float for f64 {
    const EXACT_DIGITS: usize = 15;
    fn exact(m: u64, frac: usize, neg: bool) -> f64 {
        const P: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];
        let v = m as f64 / P[frac];
        if neg { -v } else { v }
    }
    fn canonical(self) -> f64 {
        if self.is_nan() {
            f64::NAN
        } else {
            self
        }
    }
}

pub(crate) fn float4_bin(bytes: &[u8]) -> Result<f32> {
    Ok(f32::from_bits(u32::from_be_bytes(fixed::<4>("float4", bytes)?)).canonical())
}
pub(crate) fn float8_bin(bytes: &[u8]) -> Result<f64> {
    Ok(f64::from_bits(u64::from_be_bytes(fixed::<8>("float8", bytes)?)).canonical())
}

pub(crate) fn uuid_bin(bytes: &[u8]) -> Result<[u8; 16]> {
    fixed::<16>("uuid", bytes)
}

/// "0000" to "9999" back to back: the four digits of a number below 10 000 per lookup, as a
/// `str` so that a slice of it is pushed without a UTF-8 check or a char at a time (what the
/// rendered numerics, dates and times of a binary stream spent their time on).
static DIGITS4: &str = {
    static BYTES: [u8; 40_000] = {
        let mut t = [0u8; 40_000];
        let mut i = 0;
        while i < 10_000 {
            t[4 * i] = b'0' + (i / 1000) as u8;
            t[4 * i + 1] = b'0' + (i / 100 % 10) as u8;
            t[4 * i + 2] = b'0' + (i / 10 % 10) as u8;
            t[4 * i + 3] = b'0' + (i % 10) as u8;
            i += 1;
        }
        t
    };
    match std::str::from_utf8(&BYTES) {
        Ok(s) => s,
        Err(_) => panic!("ASCII digits are UTF-8"),
    }
};

/// Where rendered text goes: a `String`, or a utf8 column's value bytes themselves (a binary
/// stream's numerics and times rendered in place, without a scratch `String` and its copy).
/// Only UTF-8 is written, so the bytes stay valid UTF-8.
pub(crate) trait TextOut {
    fn push_str(&mut self, s: &str);
    /// An ASCII byte.
    fn push_ascii(&mut self, b: u8);
    /// ASCII bytes.
    fn push_ascii_bytes(&mut self, b: &[u8]);
}

impl TextOut for String {
    #[inline(always)]
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
    #[inline(always)]
    fn push_ascii(&mut self, b: u8) {
        debug_assert!(b.is_ascii());
        self.push(char::from(b));
    }
    #[inline(always)]
    fn push_ascii_bytes(&mut self, b: &[u8]) {
        debug_assert!(b.is_ascii());
        self.extend(b.iter().map(|&c| char::from(c)));
    }
}

impl TextOut for Vec<u8> {
    #[inline(always)]
    fn push_str(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
    #[inline(always)]
    fn push_ascii(&mut self, b: u8) {
        debug_assert!(b.is_ascii());
        self.push(b);
    }
    #[inline(always)]
    fn push_ascii_bytes(&mut self, b: &[u8]) {
        debug_assert!(b.is_ascii());
        self.extend_from_slice(b);
    }
}

/// `v` in decimal, zero-padded to at least `width` digits (as `{v:0width$}`), without
/// `fmt`'s machinery: numeric, date and time text is rendered once per value. Inlined: the
/// widths that renderers ask for most (a numeric's four-digit groups, two-digit time fields)
/// are one copy of a constant length (always inlined: the compiler's own choice varied with
/// what else this module holds, and a call doubled the cost).
#[inline(always)]
pub(crate) fn push_digits<O: TextOut + ?Sized>(out: &mut O, v: u64, width: usize) {
    match (v, width) {
        (0..=9_999, 4) => out.push_str(&DIGITS4[4 * v as usize..4 * v as usize + 4]),
        (0..=99, 2) => out.push_str(&DIGITS4[4 * v as usize + 2..4 * v as usize + 4]),
        // A numeric's first base-10000 digit: its one to four digits a byte at a time (a copy
        // of a length known only here is a call to memcpy).
        (0..=9_999, 0 | 1) => {
            let four = &DIGITS4.as_bytes()[4 * v as usize..4 * v as usize + 4];
            let skip = match v {
                0..=9 => 3,
                10..=99 => 2,
                100..=999 => 1,
                _ => 0,
            };
            for &b in &four[skip..] {
                out.push_ascii(b);
            }
        }
        _ => push_digits_any(out, v, width),
    }
}

fn push_digits_any<O: TextOut + ?Sized>(out: &mut O, mut v: u64, width: usize) {
    // Base-10 000 groups, least significant first: a u64 has at most five.
    let mut groups = [0usize; 5];
    let mut n = 0;
    loop {
        groups[n] = (v % 10_000) as usize;
        v /= 10_000;
        n += 1;
        if v == 0 {
            break;
        }
    }
    let top = groups[n - 1];
    let top_digits = match top {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        _ => 4,
    };
    for _ in 0..width.saturating_sub((n - 1) * 4 + top_digits) {
        out.push_ascii(b'0');
    }
    // One byte at a time: a copy of a length known only here is a call to memcpy.
    for &b in &DIGITS4.as_bytes()[4 * top + 4 - top_digits..4 * top + 4] {
        out.push_ascii(b);
    }
    for &g in groups[..n - 1].iter().rev() {
        out.push_str(&DIGITS4[4 * g..4 * g + 4]);
    }
}

/// The two ASCII digits of `v` below 100.
#[inline(always)]
pub(crate) fn two_digits(v: u64) -> [u8; 2] {
    let d = DIGITS4.as_bytes();
    let i = 4 * (v % 100) as usize;
    [d[i + 2], d[i + 3]]
}

/// "00" to "ff" back to back: a byte's two lowercase hex digits per lookup, as a `str` (see
/// `DIGITS4`).
static HEX_PAIRS: &str = {
    static BYTES: [u8; 512] = {
        let digits = b"0123456789abcdef";
        let mut t = [0u8; 512];
        let mut i = 0;
        while i < 256 {
            t[2 * i] = digits[i >> 4];
            t[2 * i + 1] = digits[i & 15];
            i += 1;
        }
        t
    };
    match std::str::from_utf8(&BYTES) {
        Ok(s) => s,
        Err(_) => panic!("ASCII digits are UTF-8"),
    }
};

/// `bytes` in lowercase hex, two digits each (as `{b:02x}` per byte), without `fmt`'s
/// machinery: bytea, uuid and macaddr text is rendered once per value.
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(2 * bytes.len());
    for &b in bytes {
        let i = 2 * b as usize;
        out.push_str(&HEX_PAIRS[i..i + 2]);
    }
}

/// A uuid's 16 bytes as uuid_out's 36 ASCII bytes (as [`push_uuid`]), built in place: a
/// uuid column of a binary stream appends them as they are.
pub(crate) fn uuid_ascii(b: &[u8; 16]) -> [u8; 36] {
    let hex = HEX_PAIRS.as_bytes();
    let mut out = [b'-'; 36];
    let mut j = 0;
    for (i, &x) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            j += 1;
        }
        out[j] = hex[2 * x as usize];
        out[j + 1] = hex[2 * x as usize + 1];
        j += 2;
    }
    out
}

/// A uuid's 16 bytes as its text: hex digits grouped 8-4-4-4-12 by dashes.
pub(crate) fn push_uuid(out: &mut String, b: &[u8; 16]) {
    for (i, group) in [&b[0..4], &b[4..6], &b[6..8], &b[8..10], &b[10..16]].into_iter().enumerate() {
        if i > 0 {
            out.push('-');
        }
        push_hex(out, group);
    }
}

/// Each byte's value as a hex digit, or `INVALID_HEX` (its high bits set).
const HEX_VALUES: [u8; 256] = {
    let mut t = [INVALID_HEX; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = match c as u8 {
            b'0'..=b'9' => c as u8 - b'0',
            b'a'..=b'f' => c as u8 - b'a' + 10,
            b'A'..=b'F' => c as u8 - b'A' + 10,
            _ => INVALID_HEX,
        };
        c += 1;
    }
    t
};
const INVALID_HEX: u8 = 0xF0;

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// uuid_out's form: 8-4-4-4-12 hex digits.
pub(crate) fn uuid_text(bytes: &[u8]) -> Result<[u8; 16]> {
    let bad = || err("uuid", bytes);
    if bytes.len() != 36 || bytes[8] != b'-' || bytes[13] != b'-' || bytes[18] != b'-' || bytes[23] != b'-' {
        return bad();
    }
    let mut out = [0u8; 16];
    let mut n = 0;
    let mut i = 0;
    while i < 36 {
        if matches!(i, 8 | 13 | 18 | 23) {
            i += 1;
            continue;
        }
        match (hex_digit(bytes[i]), hex_digit(bytes[i + 1])) {
            (Some(h), Some(l)) => out[n] = (h << 4) | l,
            _ => return bad(),
        }
        n += 1;
        i += 2;
    }
    Ok(out)
}

/// bytea's text output: `\x` then hex (bytea_output = 'hex', the default), or the
/// legacy escape format (bytea_output = 'escape': `\\` and `\ooo` octal escapes).
pub(crate) fn bytea_text<'a>(bytes: &[u8], out: &'a mut Vec<u8>) -> Result<&'a [u8]> {
    out.clear();
    if let Some(hex) = bytes.strip_prefix(b"\\x") {
        if hex.len() % 2 != 0 {
            return err("bytea hex", bytes);
        }
        // Branch-free over the pairs (a lookup each), one check at the end.
        out.resize(hex.len() / 2, 0);
        let mut invalid = 0u8;
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let (h, l) = (HEX_VALUES[pair[0] as usize], HEX_VALUES[pair[1] as usize]);
            invalid |= h | l;
            *o = (h << 4) | (l & 0x0F);
        }
        if invalid & INVALID_HEX != 0 {
            return err("bytea hex", bytes);
        }
    } else {
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if c != b'\\' {
                out.push(c);
                i += 1;
            } else if bytes.get(i + 1) == Some(&b'\\') {
                out.push(b'\\');
                i += 2;
            } else {
                let oct = bytes.get(i + 1..i + 4).filter(|o| {
                    (b'0'..=b'3').contains(&o[0]) && o[1..].iter().all(|d| (b'0'..=b'7').contains(d))
                });
                match oct {
                    Some(o) => out.push(((o[0] - b'0') << 6) | ((o[1] - b'0') << 3) | (o[2] - b'0')),
                    None => return err("bytea escape-format", bytes),
                }
                i += 4;
            }
        }
    }
    Ok(out)
}

mod numeric;

pub(crate) use numeric::*;

/// The next state of the randomized tests' generator (Knuth's MMIX linear congruential
/// generator): fixed seeds, the same values every run.
#[cfg(test)]
fn lcg(x: u64) -> u64 {
    x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407)
}

/// A pseudo-random sign word of a binary numeric for the randomized tests, drawn by `next`
/// (`next(m)`: a value below `m`): NaN, ±Infinity and a word that is no sign (one in 16 each),
/// negative 6 in 16, else positive.
#[cfg(test)]
fn random_numeric_sign(next: &mut impl FnMut(u64) -> u64) -> u16 {
    match next(16) {
        0 => 0xC000,
        1 => 0xD000,
        2 => 0xF000,
        3 => 0x1234,
        4..=9 => 0x4000,
        _ => 0,
    }
}

/// A pseudo-random binary numeric (`numeric_send`'s form) for the randomized tests: the
/// header words, then `ndigits` base-10000 digits drawn by `next`, mostly any, with 0, 9999
/// and digits below 10 often and a round last digit (5000, 10, 100, 1000). `malformed`: now
/// and then a digit of 10000 or more, and a digit count one more than the digits there are.
#[cfg(test)]
fn random_numeric_bin(
    next: &mut impl FnMut(u64) -> u64,
    ndigits: usize,
    weight: i16,
    sign: u16,
    dscale: u16,
    malformed: bool,
) -> Vec<u8> {
    let count = if malformed && next(50) == 0 { ndigits + 1 } else { ndigits };
    let mut bytes = Vec::with_capacity(8 + 2 * ndigits);
    for word in [count as u16, weight as u16, sign, dscale] {
        bytes.extend_from_slice(&word.to_be_bytes());
    }
    for i in 0..ndigits {
        let d = match next(8) {
            0 => 0,
            1 => 9999,
            2 if i + 1 == ndigits => [5000, 10, 100, 1000][next(4) as usize],
            3 if malformed && next(40) == 0 => 10_000 + next(50_000),
            4 => next(10),
            _ => next(10_000),
        } as u16;
        bytes.extend_from_slice(&d.to_be_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::{
        digitwise_unscaled, horner_unscaled, lcg, numeric_bin, numeric_bin_to_decimal, numeric_bin_to_decimal_digitwise,
        numeric_text_to_decimal, numeric_text_to_decimal_digitwise, pow10, push_digits, push_hex, push_uuid,
        random_numeric_bin, random_numeric_sign, short_numeric_bin_to_decimal, short_numeric_text_to_decimal,
        uuid_ascii,
    };

    /// The short float rule against `parse`, bit for bit, on pseudo-random decimal texts of
    /// every length around the rule's limits (and the other texts it must leave to `parse`).
    #[test]
    fn short_float_text_is_parse() {
        fn check<T: super::Float + std::str::FromStr + Copy + std::fmt::Debug + PartialEq>(
            text: &str,
            bits: impl Fn(T) -> u64,
        ) -> bool {
            match super::short_float_text::<T>(text.as_bytes()) {
                Some(v) => {
                    let parsed: T = text.parse().ok().expect("a short float parses");
                    assert_eq!(bits(v), bits(parsed), "{text}");
                    true
                }
                None => false,
            }
        }
        let mut x: u64 = 0x5851_f42d_4c95_7f2d;
        let (mut f64s, mut f32s) = (0, 0);
        for case in 0..400_000u64 {
            x = lcg(x);
            let len = 1 + (case % 18) as usize;
            let mut text = String::new();
            if x & 1 == 1 {
                text.push('-');
            }
            let point = (x >> 8) as usize % (len + 2);
            for i in 0..len {
                x = lcg(x);
                if i == point {
                    text.push('.');
                }
                // Many zeros and nines: trailing zeros, and values next to a power of ten.
                let d = match (x >> 40) % 4 { 0 => 0, 1 => 9, _ => (x >> 33) % 10 };
                text.push(char::from(b'0' + d as u8));
            }
            if point == len {
                text.push('.');
            }
            f64s += check::<f64>(&text, f64::to_bits) as usize;
            f32s += check::<f32>(&text, |v: f32| v.to_bits() as u64) as usize;
        }
        for text in ["", "-", ".5", "5.", "-.5", "+1", "1e5", "1.5e3", "NaN", "Infinity", "-0", "0", "-0.0", "00001.0"] {
            check::<f64>(text, f64::to_bits);
            check::<f32>(text, |v: f32| v.to_bits() as u64);
        }
        assert!(f64s > 100_000 && f32s > 30_000, "{f64s} {f32s}");
    }

    #[test]
    fn push_hex_and_push_uuid_are_fmts_lowercase_hex() {
        let bytes: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
        for len in [0, 1, 2, 63, 64, 65, 200, bytes.len()] {
            let mut out = String::from("x");
            push_hex(&mut out, &bytes[..len]);
            let expected: String = bytes[..len].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(out, format!("x{expected}"));
        }
        let u: [u8; 16] = std::array::from_fn(|i| (i * 17 + 3) as u8);
        assert_eq!(uuid_ascii(&u).as_slice(), {
            let mut text = String::new();
            push_uuid(&mut text, &u);
            text
        }
        .as_bytes());
        let mut out = String::new();
        push_uuid(&mut out, &u);
        let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(out, format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]));
    }

    /// numeric_text_to_decimal's digits in u64 then i128 against the plain i128 rule, on
    /// digit strings of every length up to past i128 (with and without a point, a sign).
    #[test]
    fn numeric_text_agrees_with_the_i128_rule() {
        fn reference(text: &str, precision: u8, scale: i8) -> Option<i128> {
            let (neg, rest) = match text.strip_prefix('-') {
                Some(r) => (true, r),
                None => (false, text),
            };
            let (mut v, mut frac) = (0i128, 0i32);
            let mut point = false;
            for c in rest.bytes() {
                if c == b'.' {
                    point = true;
                    continue;
                }
                frac += point as i32;
                v = v.checked_mul(10)?.checked_add((c - b'0') as i128)?;
            }
            let shift = scale as i32 - frac;
            let v = if shift >= 0 {
                if v == 0 { 0 } else { v.checked_mul(pow10(shift as u32)?)? }
            } else {
                let p = pow10((-shift) as u32)?;
                if v % p != 0 {
                    return None;
                }
                v / p
            };
            (v.unsigned_abs() < pow10(precision as u32)? as u128).then_some(if neg { -v } else { v })
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 1..=45usize {
            for _ in 0..200 {
                let mut text = String::new();
                if x & 1 == 1 {
                    text.push('-');
                }
                let point = (x >> 8) as usize % (len + 1);
                for i in 0..len {
                    x = lcg(x);
                    if i == point && i > 0 {
                        text.push('.');
                    }
                    text.push(char::from(b'0' + ((x >> 33) % 10) as u8));
                }
                for (precision, scale) in [(38, 0), (38, 10), (38, 38), (18, 4), (24, 8), (12, 2)] {
                    let got = numeric_text_to_decimal(text.as_bytes(), precision, scale).unwrap().ok();
                    assert_eq!(got, reference(&text, precision, scale), "{text} ({precision},{scale})");
                }
            }
        }
    }

    /// What a numeric into Decimal128 gave, for comparing two rules: the value, the special
    /// value's text or the error's message.
    fn outcome(r: super::Result<Result<i128, super::Special>>) -> String {
        match r {
            Ok(Ok(v)) => format!("{v}"),
            Ok(Err(s)) => format!("special {}", s.0),
            Err(e) => format!("error {}", e.message),
        }
    }

    /// The inline path of a numeric's text into Decimal128 against the digit-wise rule, value,
    /// special value or error alike: pseudo-random texts as numeric_out writes them (the
    /// column's scale of fraction digits) and others (fewer or more fraction digits, a '+',
    /// special values, bytes that are not a numeric), at precisions and scales of every size.
    #[test]
    fn short_text_decimal_is_the_digit_wise_rule() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            x = lcg(x);
            (x >> 33) % m
        };
        let odd = ["NaN", "Infinity", "-Infinity", "", "-", ".", "+", "+1.5", "1e5", "1.2.3", "-.5", "5.", " 1", "١"];
        let (mut values, mut short) = (0, 0);
        for case in 0..300_000 {
            let precision = 1 + next(38) as u8;
            let scale = (next(precision as u64 + 4) as i8 - 2).min(precision as i8);
            let text = if next(20) == 0 {
                odd[next(odd.len() as u64) as usize].to_string()
            } else {
                let int: String = (0..next(22)).map(|_| char::from(b'0' + next(10) as u8)).collect();
                let frac_digits = match next(4) {
                    0 => next(12) as usize,
                    _ => scale.max(0) as usize,
                };
                let frac: String = (0..frac_digits).map(|_| char::from(b'0' + next(10) as u8)).collect();
                let sign = ["", "-", "-", "+"][next(4) as usize];
                match (int.is_empty(), frac.is_empty()) {
                    (true, true) => format!("{sign}0"),
                    (_, true) => format!("{sign}{int}"),
                    _ => format!("{sign}{int}.{frac}"),
                }
            };
            let got = outcome(numeric_text_to_decimal(text.as_bytes(), precision, scale));
            let want = outcome(numeric_text_to_decimal_digitwise(text.as_bytes(), precision, scale));
            assert_eq!(got, want, "case {case}: {text:?} as decimal128({precision},{scale})");
            values += !got.contains(' ') as usize;
            short += short_numeric_text_to_decimal(text.as_bytes(), precision, scale).is_some() as usize;
        }
        assert!(values > 80_000 && short > 40_000, "{values} values decoded, {short} by the inline path");
    }

    #[test]
    fn horner_agrees_with_the_digit_wise_rule() {
        // Pseudo-random binary numerics (a fixed LCG): any digits, weights and scales; the
        // last digit non-zero or not, and values that need all of decimal128's digits.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            seed = lcg(seed);
            (seed >> 33) % m
        };
        let mut compared = 0;
        for case in 0..200_000 {
            let ndigits = next(12) as usize;
            let weight = next(24) as i16 - 10;
            let scale = next(16) as i8 - 3;
            let bytes = random_numeric_bin(&mut next, ndigits, weight, 0, 0, false);
            let n = numeric_bin(&bytes).expect("well-formed");
            let (fast, slow) = (horner_unscaled(&n, scale), digitwise_unscaled(&n, scale));
            if let Some(v) = fast {
                assert_eq!(Some(v), slow, "case {case}: {bytes:?} at scale {scale}");
                compared += 1;
            }
        }
        assert!(compared > 50_000, "{compared} cases compared");
    }

    /// The inline path of a binary numeric into Decimal128 against the digit-wise rules, on
    /// pseudo-random numerics: few digits and many, every sign (NaN, ±Infinity, a bad one),
    /// weights that put digits below the scale or past the precision, digits of 10000 or
    /// more, a wrong digit count; at precisions and scales of every size.
    #[test]
    fn short_binary_decimal_is_the_digit_wise_rule() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u64| {
            seed = lcg(seed);
            (seed >> 33) % m
        };
        let (mut values, mut short) = (0, 0);
        for case in 0..400_000 {
            let ndigits = match next(4) {
                0 => next(12),
                _ => next(6),
            } as usize;
            let weight = next(14) as i16 - 6;
            let sign = random_numeric_sign(&mut next);
            let precision = 1 + next(38) as u8;
            let scale = (next(precision as u64 + 4) as i8 - 2).min(precision as i8);
            let dscale = next(8) as u16;
            let bytes = random_numeric_bin(&mut next, ndigits, weight, sign, dscale, true);
            let got = outcome(numeric_bin_to_decimal(&bytes, precision, scale));
            let want = outcome(numeric_bin_to_decimal_digitwise(&bytes, precision, scale));
            assert_eq!(got, want, "case {case}: {bytes:?} as decimal128({precision},{scale})");
            values += !got.contains(' ') as usize;
            short += short_numeric_bin_to_decimal(&bytes, precision, scale).is_some() as usize;
        }
        assert!(values > 80_000 && short > 50_000, "{values} values decoded, {short} by the inline path");
    }

    #[test]
    fn push_digits_is_fmts_zero_padded_decimal() {
        let values = (0..2_000u64).chain([9_999, 10_000, 99_999, 123_456, 1_000_000, u64::MAX / 3, u64::MAX]);
        for v in values {
            for width in [0, 1, 2, 4, 6, 19, 20] {
                let mut out = String::from("x");
                push_digits(&mut out, v, width);
                assert_eq!(out, format!("x{v:0width$}"), "{v} width {width}");
            }
        }
    }
}
