//! The values made of other values: array_out, range_out (and multiranges), the vector
//! types' and tsvector's output.

use super::*;

/// array_out: "{...}" nested per dimension, "[lb:ub]..=" first when a lower bound is not 1;
/// an element is double-quoted when empty, "NULL", or holding a brace, the delimiter, a
/// quote, a backslash or white space, with `"` and `\` escaped by a backslash.
pub(super) fn array(elem: u32, bytes: &[u8], out: &mut String) -> Result<()> {
    let mut dec = super::super::array::ArrayDecoder::default();
    dec.parse_binary(bytes, elem)?;
    let (dims, lbounds) = (dec.dims(), dec.lower_bounds());
    if dims.is_empty() {
        out.push_str("{}");
        return Ok(());
    }
    if lbounds.iter().any(|&lb| lb != 1) {
        for (&n, &lb) in dims.iter().zip(lbounds) {
            let _ = write!(out, "[{}:{}]", lb, lb as i64 + n as i64 - 1);
        }
        out.push('=');
    }
    let kind = StrKind::for_oid(elem);
    let delim = oid::array_delimiter(elem) as char;
    // The running count of elements closes each dimension at its multiples.
    let mut strides = [1usize; 6];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    let mut value = String::new();
    for i in 0..dec.len() {
        let opens = (0..dims.len()).filter(|&d| i % (strides[d] * dims[d]) == 0).count();
        if i > 0 {
            let closes = (0..dims.len()).filter(|&d| i % (strides[d] * dims[d]) == 0).count();
            (0..closes).for_each(|_| out.push('}'));
            out.push(delim);
        }
        (0..opens).for_each(|_| out.push('{'));
        match dec.element(i, bytes) {
            None => out.push_str("NULL"),
            Some((b, _)) => {
                value.clear();
                render(kind, b, &mut value)?;
                let quote = value.is_empty()
                    || value.eq_ignore_ascii_case("NULL")
                    || value.chars().any(|c| {
                        matches!(c, '{' | '}' | '"' | '\\' | ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c') || c == delim
                    });
                if quote {
                    out.push('"');
                }
                for c in value.chars() {
                    if c == '"' || c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                if quote {
                    out.push('"');
                }
            }
        }
    }
    (0..dims.len()).for_each(|_| out.push('}'));
    Ok(())
}

const RANGE_EMPTY: u8 = 0x01;
const RANGE_LB_INC: u8 = 0x02;
const RANGE_UB_INC: u8 = 0x04;
const RANGE_LB_INF: u8 = 0x08;
const RANGE_UB_INF: u8 = 0x10;

/// range_send: flags, then each finite bound as length + the element's send format.
/// range_out: "empty" or "[lower,upper)", bounds quoted by range_bound_escape.
pub(super) fn range(elem: RangeElem, bytes: &[u8], out: &mut String) -> Result<()> {
    let mut r = Bin::new(bytes, "binary range");
    let flags = r.u8()?;
    if flags & RANGE_EMPTY != 0 {
        r.end()?;
        out.push_str("empty");
        return Ok(());
    }
    out.push(if flags & RANGE_LB_INC != 0 { '[' } else { '(' });
    let mut bound = String::new();
    if flags & RANGE_LB_INF == 0 {
        range_bound(elem, r.len_prefixed()?, &mut bound)?;
        range_bound_escape(&bound, out);
    }
    out.push(',');
    if flags & RANGE_UB_INF == 0 {
        bound.clear();
        range_bound(elem, r.len_prefixed()?, &mut bound)?;
        range_bound_escape(&bound, out);
    }
    out.push(if flags & RANGE_UB_INC != 0 { ']' } else { ')' });
    r.end()
}

pub(super) fn range_bound(elem: RangeElem, b: &[u8], out: &mut String) -> Result<()> {
    match elem {
        RangeElem::Int4 => {
            let _ = write!(out, "{}", super::super::num::int4_bin(b)?);
        }
        RangeElem::Int8 => {
            let _ = write!(out, "{}", super::super::num::int8_bin(b)?);
        }
        RangeElem::Numeric => numeric_bin_to_text(b, out)?,
        RangeElem::Date => datetime::date_to_text(datetime::date_bin(b)?, out),
        RangeElem::Timestamp => datetime::timestamp_to_text(datetime::timestamp_bin(b)?, false, out),
        RangeElem::TimestampTz => datetime::timestamp_to_text(datetime::timestamp_bin(b)?, true, out),
    }
    Ok(())
}

pub(super) fn range_bound_escape(v: &str, out: &mut String) {
    let quote = v.is_empty()
        || v.bytes().any(|c| {
            matches!(c, b'"' | b'\\' | b'(' | b')' | b'[' | b']' | b',' | b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
        });
    if quote {
        out.push('"');
    }
    for c in v.chars() {
        if c == '"' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    if quote {
        out.push('"');
    }
}

/// int2vector / oidvector: array_send of one dimension; printed as "1 2 3".
pub(super) fn vector(kind: StrKind, bytes: &[u8], out: &mut String) -> Result<()> {
    let mut r = Bin::new(bytes, "binary int2vector/oidvector");
    let (ndim, _flags, _elem) = (r.i32()?, r.i32()?, r.u32()?);
    let n = match ndim {
        0 => 0,
        1 => {
            let (n, _lbound) = (r.i32()?, r.i32()?);
            n.max(0)
        }
        _ => return err("binary int2vector/oidvector", bytes),
    };
    for i in 0..n {
        if i > 0 {
            out.push(' ');
        }
        let v = r.len_prefixed()?;
        if kind == StrKind::Int2Vector {
            let _ = write!(out, "{}", super::super::num::int2_bin(v)?);
        } else {
            let _ = write!(out, "{}", super::super::num::oid_bin(v)?);
        }
    }
    r.end()
}

/// tsvectorsend: count, then per lexeme its text and NUL, a position count and positions
/// (weight in the top 2 bits). tsvectorout: 'lexeme':1A,2 with ' and \ doubled.
pub(super) fn tsvector(bytes: &[u8], out: &mut String) -> Result<()> {
    let mut r = Bin::new(bytes, "binary tsvector");
    let n = r.i32()?;
    for i in 0..n.max(0) {
        if i > 0 {
            out.push(' ');
        }
        let nul = r.b.iter().position(|&c| c == 0).ok_or_else(|| ValueError::new("invalid binary tsvector"))?;
        let lexeme = super::super::store::check_utf8(r.take(nul)?)?;
        r.take(1)?;
        out.push('\'');
        for c in lexeme.chars() {
            if c == '\'' || c == '\\' {
                out.push(c);
            }
            out.push(c);
        }
        out.push('\'');
        let npos = r.u16()?;
        for p in 0..npos {
            out.push(if p == 0 { ':' } else { ',' });
            let wp = r.u16()?;
            let _ = write!(out, "{}", wp & 0x3fff);
            match wp >> 14 {
                3 => out.push('A'),
                2 => out.push('B'),
                1 => out.push('C'),
                _ => {}
            }
        }
    }
    r.end()
}
