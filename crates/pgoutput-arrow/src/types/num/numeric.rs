//! numeric: its text and its binary send format (numeric.c) into Arrow's Decimal128 where
//! the column's precision allows, or rendered as numeric_out's text.

use super::*;

pub(super) const NUMERIC_POS: u16 = 0x0000;
pub(super) const NUMERIC_NEG: u16 = 0x4000;
pub(super) const NUMERIC_NAN: u16 = 0xC000;
pub(super) const NUMERIC_PINF: u16 = 0xD000;
pub(super) const NUMERIC_NINF: u16 = 0xF000;

/// Decimal128(precision, scale) for a numeric typmod, None for numeric without one
/// or beyond what Decimal128 holds. A scale above the precision (allowed since
/// PostgreSQL 15, e.g. numeric(3,5) holds ±0.00999) widens the precision to the scale:
/// the same values, all representable.
pub(crate) fn decimal_type(typmod: i32) -> Option<(u8, i8)> {
    if typmod < 4 {
        return None;
    }
    let t = typmod - 4;
    let precision = (t >> 16) & 0xffff;
    // The scale is an 11-bit two's complement number since PostgreSQL 15.
    let scale = ((t & 0x7ff) ^ 1024) - 1024;
    let precision = precision.max(scale);
    if !(1..=38).contains(&precision) || !(-38..=38).contains(&scale) {
        return None;
    }
    Some((precision as u8, scale as i8))
}

/// 10^0 ..= 10^38: every power of ten an i128 holds.
pub(super) const POW10: [i128; 39] = {
    let mut t = [1i128; 39];
    let mut i = 1;
    while i < 39 {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

/// 10^0 ..= 10^19: every power of ten a u64 holds.
pub(super) const POW10_U64: [u64; 20] = {
    let mut t = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

pub(super) fn pow10(n: u32) -> Option<i128> {
    POW10.get(n as usize).copied()
}

pub(super) fn fits(v: i128, precision: u8) -> bool {
    pow10(precision as u32).is_some_and(|max| v.unsigned_abs() < max as u128)
}

pub(super) fn not_fit(what: &str, precision: u8, scale: i8) -> Special {
    Special(format!(
        "numeric value {what} does not fit decimal128({precision},{scale}); choose special_values='null' or 'text'"
    ))
}

/// Numeric text ("-123.4500", "NaN", "Infinity", "-Infinity") to the unscaled integer of
/// Decimal128(precision, scale). Exact: digits that the scale would drop are an error. The
/// common value inline ([`short_numeric_text_to_decimal`]), any other by
/// [`numeric_text_to_decimal_digitwise`], a call whose `Result<Result<i128, Special>>`
/// returns through memory.
#[inline(always)]
pub(crate) fn numeric_text_to_decimal(
    bytes: &[u8],
    precision: u8,
    scale: i8,
) -> Result<std::result::Result<i128, Special>> {
    match short_numeric_text_to_decimal(bytes, precision, scale) {
        Some(v) => Ok(Ok(v)),
        None => numeric_text_to_decimal_digitwise(bytes, precision, scale),
    }
}

/// The common numeric text of a Decimal128 column: an optional '-', at most 18 digits with
/// at most `scale` of them after the point (numeric_out writes exactly the column's scale),
/// scaled within a u64 and fitting the column. None for anything else, which
/// [`numeric_text_to_decimal_digitwise`] decides: where this gives a value, that gives the
/// same.
#[inline(always)]
pub(super) fn short_numeric_text_to_decimal(bytes: &[u8], precision: u8, scale: i8) -> Option<i128> {
    let (neg, rest) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    let (v, frac_digits) = short_numeric_text(rest)?;
    let v = match scale as i32 - frac_digits {
        0 => v,
        shift @ 1.. => v.checked_mul(*POW10_U64.get(shift as usize)?)?,
        _ => return None,
    };
    let v = v as i128;
    if !fits(v, precision) {
        return None;
    }
    Some(if neg { -v } else { v })
}

/// [`numeric_text_to_decimal`] of any text: digit by digit past 18 digits, the special
/// values, the errors.
#[inline(never)]
pub(super) fn numeric_text_to_decimal_digitwise(
    bytes: &[u8],
    precision: u8,
    scale: i8,
) -> Result<std::result::Result<i128, Special>> {
    match bytes {
        b"NaN" | b"Infinity" | b"-Infinity" => {
            return Ok(Err(not_fit(std::str::from_utf8(bytes).unwrap_or("?"), precision, scale)))
        }
        _ => {}
    }
    let (neg, rest) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, bytes),
    };
    // Most values have at most 18 digits: their integer is a u64, read eight digits at a time.
    // Any other (more digits, or bytes that are not digits) takes the digit-wise rule.
    let (v, frac_digits) = match short_numeric_text(rest) {
        Some((v, frac_digits)) => (v as i128, frac_digits),
        None => match long_numeric_text(rest) {
            Some(Ok(parsed)) => parsed,
            Some(Err(())) => return Ok(Err(not_fit(&String::from_utf8_lossy(bytes), precision, scale))),
            None => return err("numeric", bytes),
        },
    };
    let overflow = || Ok(Err(not_fit(&String::from_utf8_lossy(bytes), precision, scale)));
    let shift = scale as i32 - frac_digits;
    let v = if shift >= 0 {
        match pow10(shift as u32).and_then(|p| v.checked_mul(p)) {
            Some(v) => v,
            None if v == 0 => 0,
            None => return overflow(),
        }
    } else {
        match pow10((-shift) as u32) {
            Some(p) if v % p == 0 => v / p,
            None if v == 0 => 0,
            _ => return overflow(),
        }
    };
    if !fits(v, precision) {
        return overflow();
    }
    Ok(Ok(if neg { -v } else { v }))
}

/// The digits of a numeric's text without its sign, `int[.frac]`, of at most 18 digits in
/// all: their integer and the number of fraction digits. None for anything else, which
/// [`long_numeric_text`] reads (and finds too long, or not a numeric). One pass, a digit a
/// turn: `position` of the point, then eight digits at a time, cost 5% more instructions
/// of a decode of wide-text.
#[inline]
pub(super) fn short_numeric_text(rest: &[u8]) -> Option<(u64, i32)> {
    // 18 digits and a point at the most; 19 digits stay below 2^64.
    if rest.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    let mut point = rest.len();
    for (i, &c) in rest.iter().enumerate() {
        let d = c.wrapping_sub(b'0');
        if d <= 9 {
            v = v * 10 + d as u64;
        } else if c == b'.' && point == rest.len() {
            point = i;
        } else {
            return None;
        }
    }
    let frac = rest.len().saturating_sub(point + 1);
    let digits = rest.len() - (point < rest.len()) as usize;
    if digits == 0 || digits > 18 {
        return None;
    }
    Some((v, frac as i32))
}

/// The digit-wise rule of a numeric's text without its sign: its integer and the number of
/// fraction digits; None when it is not a numeric, Some(Err) past i128.
pub(super) fn long_numeric_text(rest: &[u8]) -> Option<std::result::Result<(i128, i32), ()>> {
    // The digits in u64 while below 10^17 (one more cannot pass 2^64), then in i128: checked
    // i128 arithmetic per digit was most of the parse.
    let mut small: u64 = 0;
    let mut v: i128 = 0;
    let mut wide = false;
    let mut frac_digits: i32 = 0;
    let mut seen_point = false;
    let mut any = false;
    for &c in rest {
        if c == b'.' && !seen_point {
            seen_point = true;
            continue;
        }
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        any = true;
        if seen_point {
            frac_digits += 1;
        }
        if !wide {
            if small < 100_000_000_000_000_000 {
                small = small * 10 + d as u64;
                continue;
            }
            wide = true;
            v = small as i128;
        }
        // Leading zeros and fraction digits past the scale need no room.
        v = match v.checked_mul(10).and_then(|v| v.checked_add(d as i128)) {
            Some(v) => v,
            // Past i128 (whatever the bytes after), as before the fast path.
            None => return Some(Err(())),
        };
    }
    if !wide {
        v = small as i128;
    }
    any.then_some(Ok((v, frac_digits)))
}

/// The fields of numeric_send's format.
pub(crate) struct NumericBin<'a> {
    weight: i16,
    sign: u16,
    dscale: u16,
    digits: &'a [u8],
}

impl NumericBin<'_> {
    fn digit(&self, i: usize) -> u16 {
        match self.digits.get(2 * i..2 * i + 2) {
            Some(d) => u16::from_be_bytes([d[0], d[1]]),
            None => 0,
        }
    }
    fn ndigits(&self) -> usize {
        self.digits.len() / 2
    }
}

/// Inlined, its error out of line: called for every binary numeric, it was about 85
/// instructions a value as a call that checked each digit with a bounds check and an early exit.
#[inline]
pub(crate) fn numeric_bin(bytes: &[u8]) -> Result<NumericBin<'_>> {
    let Some((head, digits)) = bytes.split_first_chunk::<8>() else {
        return bad_numeric_bin(bytes);
    };
    let ndigits = u16::from_be_bytes([head[0], head[1]]) as usize;
    let n = NumericBin {
        weight: i16::from_be_bytes([head[2], head[3]]),
        sign: u16::from_be_bytes([head[4], head[5]]),
        dscale: u16::from_be_bytes([head[6], head[7]]),
        digits,
    };
    // Every base-10000 digit below 10000, without a branch per digit.
    let digit_over = digits.chunks_exact(2).fold(false, |over, d| over | (u16::from_be_bytes([d[0], d[1]]) >= 10_000));
    if digits.len() != 2 * ndigits
        || !matches!(n.sign, NUMERIC_POS | NUMERIC_NEG | NUMERIC_NAN | NUMERIC_PINF | NUMERIC_NINF)
        || digit_over
    {
        return bad_numeric_bin(bytes);
    }
    Ok(n)
}

#[cold]
#[inline(never)]
fn bad_numeric_bin<T>(bytes: &[u8]) -> Result<T> {
    err("binary numeric", bytes)
}

/// A binary numeric to the unscaled integer of Decimal128(precision, scale): the common
/// value inline ([`short_numeric_bin_to_decimal`]), any other by
/// [`numeric_bin_to_decimal_digitwise`], a call whose `Result<Result<i128, Special>>`
/// returns through memory.
#[inline(always)]
pub(crate) fn numeric_bin_to_decimal(
    bytes: &[u8],
    precision: u8,
    scale: i8,
) -> Result<std::result::Result<i128, Special>> {
    match short_numeric_bin_to_decimal(bytes, precision, scale) {
        Some(v) => Ok(Ok(v)),
        None => numeric_bin_to_decimal_digitwise(bytes, precision, scale),
    }
}

/// The common binary numeric of a Decimal128 column: positive or negative, at most four
/// base-10000 digits (their integer below 10^16, a u64), scaled within a u64 and fitting the
/// column. None for anything else (NaN, ±Infinity, more digits, digits below the scale, a
/// value past the precision, bytes that are not a numeric), which
/// [`numeric_bin_to_decimal_digitwise`] decides: where this gives a value, that gives the
/// same. Eight digits in a u128 as well made the cell loop dearer for every value than it
/// saved on those few.
#[inline(always)]
pub(super) fn short_numeric_bin_to_decimal(bytes: &[u8], precision: u8, scale: i8) -> Option<i128> {
    let (head, digits) = bytes.split_first_chunk::<8>()?;
    let ndigits = u16::from_be_bytes([head[0], head[1]]) as usize;
    let sign = u16::from_be_bytes([head[4], head[5]]);
    if ndigits > 4 || digits.len() != 2 * ndigits || (sign != NUMERIC_POS && sign != NUMERIC_NEG) {
        return None;
    }
    let mut v: u64 = 0;
    let mut over = false;
    for d in digits.chunks_exact(2) {
        let d = u16::from_be_bytes([d[0], d[1]]);
        over |= d >= 10_000;
        v = v * 10_000 + d as u64;
    }
    // The last digit stands for 10^(4 * (weight - (ndigits - 1))); the unscaled integer is
    // the digits' at 10^scale.
    let weight = i16::from_be_bytes([head[2], head[3]]) as i32;
    let exp = 4 * (weight - ndigits as i32 + 1) + scale as i32;
    let v = if v == 0 {
        0
    } else if exp >= 0 {
        v.checked_mul(*POW10_U64.get(exp as usize)?)?
    } else {
        let p = *POW10_U64.get(exp.unsigned_abs() as usize)?;
        if !v.is_multiple_of(p) {
            return None;
        }
        v / p
    };
    let v = v as i128;
    if over || !fits(v, precision) {
        return None;
    }
    Some(if sign == NUMERIC_NEG { -v } else { v })
}

/// [`numeric_bin_to_decimal`] of any value: Horner's rule or digit by digit, the special
/// values, the errors.
#[inline(never)]
pub(super) fn numeric_bin_to_decimal_digitwise(
    bytes: &[u8],
    precision: u8,
    scale: i8,
) -> Result<std::result::Result<i128, Special>> {
    let n = numeric_bin(bytes)?;
    let special = match n.sign {
        NUMERIC_NAN => Some("NaN"),
        NUMERIC_PINF => Some("Infinity"),
        NUMERIC_NINF => Some("-Infinity"),
        _ => None,
    };
    if let Some(s) = special {
        return Ok(Err(not_fit(s, precision, scale)));
    }
    let overflow = || {
        let mut text = String::new();
        numeric_bin_to_text(bytes, &mut text).ok();
        Ok(Err(not_fit(&text, precision, scale)))
    };
    // Horner's rule first; the digit-wise rule where it cannot tell (a value that needs
    // every one of decimal128's digits). Where both tell, they agree (a unit test).
    match horner_unscaled(&n, scale).or_else(|| digitwise_unscaled(&n, scale)) {
        Some(v) if fits(v, precision) => Ok(Ok(if n.sign == NUMERIC_NEG { -v } else { v })),
        _ => overflow(),
    }
}

/// The unscaled value of `n` at `scale` (its magnitude), digit by digit: each base-10000
/// digit i stands for digit * 10^(4 * (weight - i)); in the unscaled integer that is
/// digit * 10^(4 * (weight - i) + scale). None: past i128, or digits below the scale.
pub(super) fn digitwise_unscaled(n: &NumericBin<'_>, scale: i8) -> Option<i128> {
    let mut v: i128 = 0;
    for i in 0..n.ndigits() {
        let d = n.digit(i) as u32;
        if d == 0 {
            continue;
        }
        let exp = 4 * (n.weight as i32 - i as i32) + scale as i32;
        let term = if exp >= 0 {
            pow10(exp as u32).and_then(|p| p.checked_mul(d as i128))
        } else if exp > -4 {
            let p = 10u32.pow((-exp) as u32);
            d.is_multiple_of(p).then_some((d / p) as i128)
        } else {
            None
        };
        v = v.checked_add(term?)?;
    }
    Some(v)
}

/// The unscaled value of `n` at `scale` (its magnitude) by Horner's rule over its base-10000
/// digits, then one multiplication or exact division by a power of ten; None where that does
/// not work out (the digits' integer past u128, digits below the scale), for the digit-wise
/// rule of [`numeric_bin_to_decimal`] to decide.
pub(super) fn horner_unscaled(n: &NumericBin<'_>, scale: i8) -> Option<i128> {
    let digits = n.ndigits();
    // In u64 while the digits fit (below 10^15, one more digit cannot pass 2^64; four digits
    // always fit): u128 arithmetic is several multiplications, and a call for a division.
    let mut small: u64 = 0;
    let mut i = 0;
    while i < digits && small < 1_000_000_000_000_000 {
        small = small * 10_000 + n.digit(i) as u64;
        i += 1;
    }
    if small == 0 && i == digits {
        return Some(0);
    }
    // acc stands for its last digit at 10^(4 * (weight - (digits - 1))).
    let exp = 4 * (n.weight as i32 - (digits as i32 - 1)) + scale as i32;
    if i == digits {
        if exp >= 0 {
            if let Ok(p) = u64::try_from(pow10(exp as u32)?) {
                // A u64 by a u64 never passes u128.
                return i128::try_from(small as u128 * p as u128).ok();
            }
        } else if let Ok(p) = u64::try_from(pow10((-exp) as u32)?) {
            return small.is_multiple_of(p).then_some((small / p) as i128);
        }
    }
    let mut acc = small as u128;
    for j in i..digits {
        acc = acc.checked_mul(10_000)?.checked_add(n.digit(j) as u128)?;
    }
    if acc == 0 {
        return Some(0);
    }
    let v = if exp >= 0 {
        acc.checked_mul(pow10(exp as u32)? as u128)?
    } else {
        let p = pow10((-exp) as u32)? as u128;
        if !acc.is_multiple_of(p) {
            return None;
        }
        acc / p
    };
    i128::try_from(v).ok()
}

/// Bytes of [`short_numeric_bin_text`]'s buffer: a sign, eight groups of four integer digits,
/// a point, seven groups of four fraction digits, and room to spare.
const SHORT_TEXT: usize = 72;

/// numeric_out's text of a well-formed, finite numeric of at most eight integer digit groups
/// and 28 fraction digits, written group by group into `buf` (four-digit copies) and handed
/// back whole: pushed a group at a time into a column's bytes, each push checked the
/// capacity (about 280 instructions a value). None for a longer one.
#[inline(always)]
fn short_numeric_bin_text<'b>(n: &NumericBin<'_>, buf: &'b mut [u8; SHORT_TEXT]) -> Option<&'b [u8]> {
    let (weight, dscale) = (n.weight as i32, n.dscale as usize);
    if weight > 7 || dscale > 28 {
        return None;
    }
    let put = |buf: &mut [u8; SHORT_TEXT], at: usize, d: u16| {
        let d = 4 * d as usize;
        buf[at..at + 4].copy_from_slice(&DIGITS4.as_bytes()[d..d + 4]);
    };
    // buf[0] is left for the sign; the first digit group ("0" without one) loses its
    // leading zeros.
    let first = if weight >= 0 { n.digit(0) } else { 0 };
    put(buf, 1, first);
    let mut start = match first {
        0..=9 => 4,
        10..=99 => 3,
        100..=999 => 2,
        _ => 1,
    };
    let mut len = 5;
    for i in 1..=weight.max(0) as usize {
        put(buf, len, n.digit(i));
        len += 4;
    }
    if dscale > 0 {
        buf[len] = b'.';
        len += 1;
        let end = len + dscale;
        let mut i = weight + 1;
        while len < end {
            put(buf, len, if i < 0 { 0 } else { n.digit(i as usize) });
            len += 4;
            i += 1;
        }
        len = end;
    }
    if n.sign == NUMERIC_NEG {
        start -= 1;
        buf[start] = b'-';
    }
    Some(&buf[start..len])
}

/// numeric_out's text of a binary numeric (get_str_from_var in numeric.c): the integer
/// part without leading zeros ("0" when there is none), then `dscale` fraction digits.
/// Nothing is written when the value is not a well-formed numeric.
pub(crate) fn numeric_bin_to_text<O: TextOut + ?Sized>(bytes: &[u8], out: &mut O) -> Result<()> {
    let n = numeric_bin(bytes)?;
    match n.sign {
        NUMERIC_NAN | NUMERIC_PINF | NUMERIC_NINF => {
            out.push_str(match n.sign {
                NUMERIC_NAN => "NaN",
                NUMERIC_PINF => "Infinity",
                _ => "-Infinity",
            });
            return Ok(());
        }
        _ => {}
    }
    let mut buf = [0u8; SHORT_TEXT];
    if let Some(text) = short_numeric_bin_text(&n, &mut buf) {
        out.push_ascii_bytes(text);
        return Ok(());
    }
    if n.sign == NUMERIC_NEG {
        out.push_ascii(b'-');
    }
    let weight = n.weight as i32;
    if weight < 0 {
        out.push_ascii(b'0');
    } else {
        for i in 0..=weight {
            push_digits(out, n.digit(i as usize) as u64, if i == 0 { 1 } else { 4 });
        }
    }
    let dscale = n.dscale as i32;
    if dscale > 0 {
        out.push_ascii(b'.');
        let mut left = dscale;
        let mut i = weight + 1;
        while left > 0 {
            let d = if i < 0 { 0 } else { n.digit(i as usize) };
            let take = left.min(4) as usize;
            if take == 4 {
                push_digits(out, d as u64, 4);
            } else {
                // The first `take` of the group's four digits.
                push_digits(out, d as u64 / 10u64.pow(4 - take as u32), take);
            }
            left -= take as i32;
            i += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{
        lcg, long_numeric_text, numeric_bin_to_text, random_numeric_bin, random_numeric_sign, short_numeric_text,
    };

    /// numeric_out's text (get_str_from_var) by `fmt`, digit group by digit group: the rule
    /// the in-place renderer replaced; None for what is not a well-formed numeric.
    fn numeric_out_reference(bytes: &[u8]) -> Option<String> {
        let word = |i: usize| u16::from_be_bytes([bytes[i], bytes[i + 1]]);
        if bytes.len() < 8 {
            return None;
        }
        let (ndigits, weight, sign, dscale) = (word(0) as usize, word(2) as i16 as i32, word(4), word(6) as i32);
        if bytes.len() != 8 + 2 * ndigits {
            return None;
        }
        let digits: Vec<u16> = (0..ndigits).map(|i| word(8 + 2 * i)).collect();
        if digits.iter().any(|&d| d >= 10_000) {
            return None;
        }
        let mut out = match sign {
            0xC000 => return Some("NaN".into()),
            0xD000 => return Some("Infinity".into()),
            0xF000 => return Some("-Infinity".into()),
            0x4000 => "-".to_string(),
            0 => String::new(),
            _ => return None,
        };
        let digit = |i: i32| if i < 0 { 0 } else { digits.get(i as usize).copied().unwrap_or(0) };
        if weight < 0 {
            out.push('0');
        }
        for i in 0..=weight {
            out.push_str(&if i == 0 { format!("{}", digit(i)) } else { format!("{:04}", digit(i)) });
        }
        if dscale > 0 {
            let mut frac = String::new();
            let mut i = weight + 1;
            while (frac.len() as i32) < dscale {
                frac.push_str(&format!("{:04}", digit(i)));
                i += 1;
            }
            out.push('.');
            out.push_str(&frac[..dscale as usize]);
        }
        Some(out)
    }

    /// The in-place renderer (into a String and into bytes) against the reference, on
    /// pseudo-random numerics: any digits, weights (negative too) and display scales (not
    /// multiples of four, trailing zeros, past the short path), signs and specials, and
    /// malformed headers.
    #[test]
    fn numeric_bin_to_text_is_numeric_out() {
        let mut x: u64 = 0x3c6e_f372_fe94_f82b;
        let mut next = |m: u64| {
            x = lcg(x);
            (x >> 33) % m
        };
        let mut rendered = 0;
        for _ in 0..300_000 {
            let ndigits = next(10) as usize;
            let weight = next(16) as i16 - 6;
            let sign = random_numeric_sign(&mut next);
            // Up to past what the stack buffer of short_numeric_bin_text takes (28).
            let dscale = next(36) as u16;
            let bytes = random_numeric_bin(&mut next, ndigits, weight, sign, dscale, true);
            let (mut text, mut raw) = (String::from("x"), b"x".to_vec());
            let (a, b) = (numeric_bin_to_text(&bytes, &mut text), numeric_bin_to_text(&bytes, &mut raw));
            match numeric_out_reference(&bytes) {
                Some(expected) => {
                    assert!(a.is_ok() && b.is_ok(), "{bytes:?}");
                    assert_eq!(text, format!("x{expected}"), "{bytes:?}");
                    rendered += 1;
                }
                None => assert!(a.is_err() && b.is_err() && text == "x", "{bytes:?}: {text}"),
            }
            assert_eq!(raw, text.as_bytes());
        }
        assert!(rendered > 200_000, "{rendered}");
    }

    /// The short numeric rule against the digit-wise one, on pseudo-random strings of digits
    /// mixed with points, signs and other bytes (each byte value near the digits' included):
    /// the same value where it gives one, and it gives one for every numeric of at most 18
    /// digits.
    #[test]
    fn short_numeric_text_agrees_with_the_digit_wise_rule() {
        const BYTES: &[u8] = b"0123456789012345678901234567890123456789../+-a :\x00\xff\xfa\x2f\x3a\x39\x30";
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        let (mut refused, mut short_taken) = (0, 0);
        for case in 0..300_000 {
            let len = (case % 21) as usize;
            let clean = case % 3 != 0;
            let text: Vec<u8> = (0..len)
                .map(|_| {
                    x = lcg(x);
                    let i = (x >> 33) as usize;
                    if clean { BYTES[i % 42] } else { BYTES[i % BYTES.len()] }
                })
                .collect();
            let digits = text.iter().filter(|c| c.is_ascii_digit()).count();
            let long = long_numeric_text(&text);
            match short_numeric_text(&text) {
                Some((v, frac)) => {
                    assert_eq!(long, Some(Ok((v as i128, frac))), "{text:?}");
                    short_taken += 1;
                }
                None => {
                    assert!(digits > 18 || !matches!(long, Some(Ok(_))), "{text:?}");
                    refused += 1;
                }
            }
        }
        assert!(refused > 100_000 && short_taken > 30_000, "{refused} {short_taken}");
    }
}
