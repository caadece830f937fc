//! float8out and float4out (extra_float_digits > 0: the shortest digits that read back
//! exactly), without allocating: PostgreSQL's Ryu-based d2s.c / f2s.c.

use super::*;

/// A fixed-size stack buffer for `write!`, so that float digits need no allocation.
pub(super) struct StackBuf {
    buf: [u8; 40],
    len: usize,
}

impl Write for StackBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// float8out / float4out with extra_float_digits > 0: the shortest digits that read back
/// exactly, in fixed notation when the decimal exponent is in -4..fixed_max (15 for float8,
/// 6 for float4), otherwise "d.ddde+XX" (PostgreSQL's Ryu-based d2s.c / f2s.c).
pub(super) fn float_out(v: f64, sci: std::result::Result<StackBuf, std::fmt::Error>, fixed_max: i32, out: &mut String) {
    if v.is_nan() {
        return out.push_str("NaN");
    }
    if v.is_infinite() {
        return out.push_str(if v > 0.0 { "Infinity" } else { "-Infinity" });
    }
    if v == 0.0 {
        return out.push_str(if v.is_sign_negative() { "-0" } else { "0" });
    }
    let Ok(sci) = sci else { return };
    // The shortest round-trip digits (`shortest`): "-1.2345e-7".
    let s = &sci.buf[..sci.len];
    let (neg, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let e_at = s.iter().position(|&c| c == b'e').unwrap_or(s.len());
    let (mant, exp) = s.split_at(e_at);
    let exp: i32 = std::str::from_utf8(exp.get(1..).unwrap_or(b"0")).ok().and_then(|e| e.parse().ok()).unwrap_or(0);
    let mut digits = [0u8; 24];
    let mut nd = 0;
    for &c in mant {
        if c.is_ascii_digit() && nd < digits.len() {
            digits[nd] = c;
            nd += 1;
        }
    }
    let digits = &digits[..nd];
    if neg {
        out.push('-');
    }
    let push = |out: &mut String, d: &[u8]| d.iter().for_each(|&c| out.push(c as char));
    if (-4..fixed_max).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                push(out, digits);
                (digits.len()..int_len).for_each(|_| out.push('0'));
            } else {
                push(out, &digits[..int_len]);
                out.push('.');
                push(out, &digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            (0..(-exp - 1)).for_each(|_| out.push('0'));
            push(out, digits);
        }
    } else {
        push(out, &digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            push(out, &digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs());
    }
}

pub(crate) fn float8_out(v: f64, out: &mut String) {
    let r = if v.is_finite() && v != 0.0 { shortest(ryu::Buffer::new().format_finite(v)) } else { Err(std::fmt::Error) };
    float_out(v, r, 15, out);
}

pub(crate) fn float4_out(v: f32, out: &mut String) {
    let r = if v.is_finite() && v != 0.0 { shortest(ryu::Buffer::new().format_finite(v)) } else { Err(std::fmt::Error) };
    float_out(v as f64, r, 6, out);
}

/// Ryu's shortest round-trip digits (PostgreSQL's float4out/float8out run Ryu too: a value
/// exactly between two shortest candidates takes the even one, 391899.125f32 →
/// "391899.12", where Rust's own `{:e}` rounds half up to "391899.13") in the `-d.ddde±x`
/// form `float_out` reads. Only called for finite, non-zero values.
pub(super) fn shortest(ryu: &str) -> std::result::Result<StackBuf, std::fmt::Error> {
    let (neg, s) = match ryu.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, ryu),
    };
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().map_err(|_| std::fmt::Error)?),
        None => (s, 0),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let all: String = format!("{int}{frac}");
    let lead = all.bytes().take_while(|&c| c == b'0').count();
    let digits = all[lead..].trim_end_matches('0');
    if digits.is_empty() {
        return Err(std::fmt::Error);
    }
    // The exponent of the first significant digit: the integer part's length counts
    // from the point, each leading zero moves it one further right.
    let exp10 = int.len() as i32 - 1 - lead as i32 + exp;
    let mut b = StackBuf { buf: [0; 40], len: 0 };
    if neg {
        write!(b, "-")?;
    }
    write!(b, "{}", &digits[..1])?;
    if digits.len() > 1 {
        write!(b, ".{}", &digits[1..])?;
    }
    write!(b, "e{exp10}")?;
    Ok(b)
}
