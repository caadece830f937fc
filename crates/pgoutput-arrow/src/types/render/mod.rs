//! Binary send formats rendered as exactly the text PostgreSQL's output function prints,
//! for the types that are Utf8 in Arrow. Each renderer names the C function it follows
//! (src/backend/utils/adt). Settings assumed where the output depends on them:
//! DateStyle ISO, IntervalStyle postgres, TimeZone UTC (timestamptz and tstzrange print
//! "+00"), extra_float_digits 1 (shortest exact floats) and lc_monetary C ("$1,234.56").

use std::fmt::Write;

use super::datetime;
use super::interval;
use super::num::{err, fixed, numeric_bin_to_text, push_hex, push_uuid, TextOut};
use super::oid;
use super::value::{Result, ValueError};

/// The element type of a range or multirange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RangeElem {
    Int4,
    Int8,
    Numeric,
    Date,
    Timestamp,
    TimestampTz,
}

/// How a Utf8 column's binary values become text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StrKind {
    /// The send format is the text (text, varchar, bpchar, name, refcursor, xml).
    Text,
    Json,
    /// A version byte 1, then the text.
    Jsonb,
    Jsonpath,
    Char,
    Numeric,
    Date,
    Time,
    Timestamp,
    TimestampTz,
    Interval,
    TimeTz,
    Inet,
    Macaddr,
    Macaddr8,
    Money,
    Bit,
    Point,
    Line,
    Lseg,
    Box,
    Path,
    Polygon,
    Circle,
    Range(RangeElem),
    Multirange(RangeElem),
    PgLsn,
    Xid,
    Xid8,
    Tid,
    Int2Vector,
    OidVector,
    Snapshot,
    TsVector,
    /// Element types, for arrays rendered as text.
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Float4,
    Float8,
    Bytea,
    Uuid,
    /// A whole array as array_out's literal, with this element type.
    Array(u32),
    /// No renderer: text mode passes the text; a binary value is shown as `\x` hex.
    Unrendered,
}

impl StrKind {
    pub(crate) fn for_oid(oid: u32) -> StrKind {
        use RangeElem as R;
        match oid {
            oid::TEXT | oid::VARCHAR | oid::BPCHAR | oid::NAME | oid::REFCURSOR | oid::XML => StrKind::Text,
            oid::JSON => StrKind::Json,
            oid::JSONB => StrKind::Jsonb,
            oid::JSONPATH => StrKind::Jsonpath,
            oid::CHAR => StrKind::Char,
            oid::NUMERIC => StrKind::Numeric,
            oid::DATE => StrKind::Date,
            oid::TIME => StrKind::Time,
            oid::TIMESTAMP => StrKind::Timestamp,
            oid::TIMESTAMPTZ => StrKind::TimestampTz,
            oid::INTERVAL => StrKind::Interval,
            oid::TIMETZ => StrKind::TimeTz,
            oid::INET | oid::CIDR => StrKind::Inet,
            oid::MACADDR => StrKind::Macaddr,
            oid::MACADDR8 => StrKind::Macaddr8,
            oid::MONEY => StrKind::Money,
            oid::BIT | oid::VARBIT => StrKind::Bit,
            oid::POINT => StrKind::Point,
            oid::LINE => StrKind::Line,
            oid::LSEG => StrKind::Lseg,
            oid::BOX => StrKind::Box,
            oid::PATH => StrKind::Path,
            oid::POLYGON => StrKind::Polygon,
            oid::CIRCLE => StrKind::Circle,
            oid::INT4RANGE => StrKind::Range(R::Int4),
            oid::INT8RANGE => StrKind::Range(R::Int8),
            oid::NUMRANGE => StrKind::Range(R::Numeric),
            oid::DATERANGE => StrKind::Range(R::Date),
            oid::TSRANGE => StrKind::Range(R::Timestamp),
            oid::TSTZRANGE => StrKind::Range(R::TimestampTz),
            oid::INT4MULTIRANGE => StrKind::Multirange(R::Int4),
            oid::INT8MULTIRANGE => StrKind::Multirange(R::Int8),
            oid::NUMMULTIRANGE => StrKind::Multirange(R::Numeric),
            oid::DATEMULTIRANGE => StrKind::Multirange(R::Date),
            oid::TSMULTIRANGE => StrKind::Multirange(R::Timestamp),
            oid::TSTZMULTIRANGE => StrKind::Multirange(R::TimestampTz),
            oid::PG_LSN => StrKind::PgLsn,
            oid::XID | oid::CID => StrKind::Xid,
            oid::XID8 => StrKind::Xid8,
            oid::TID => StrKind::Tid,
            oid::INT2VECTOR => StrKind::Int2Vector,
            oid::OIDVECTOR => StrKind::OidVector,
            oid::TXID_SNAPSHOT | oid::PG_SNAPSHOT => StrKind::Snapshot,
            oid::TSVECTOR => StrKind::TsVector,
            oid::BOOL => StrKind::Bool,
            oid::INT2 => StrKind::Int2,
            oid::INT4 => StrKind::Int4,
            oid::INT8 => StrKind::Int8,
            oid::OID => StrKind::Oid,
            oid::FLOAT4 => StrKind::Float4,
            oid::FLOAT8 => StrKind::Float8,
            oid::BYTEA => StrKind::Bytea,
            oid::UUID => StrKind::Uuid,
            _ => match oid::array_element(oid) {
                Some(elem) if StrKind::for_oid(elem) != StrKind::Unrendered => StrKind::Array(elem),
                _ => StrKind::Unrendered,
            },
        }
    }

    /// Where the text starts in a binary value whose send format is its text.
    pub(crate) fn binary_text_offset(self, bytes: &[u8]) -> Result<Option<usize>> {
        match self {
            StrKind::Text | StrKind::Json => Ok(Some(0)),
            StrKind::Jsonb | StrKind::Jsonpath => match bytes.first() {
                Some(1) => Ok(Some(1)),
                Some(v) => Err(ValueError::new(format!("unsupported binary jsonb/jsonpath version {v}"))),
                None => err("binary jsonb/jsonpath", bytes),
            },
            _ => Ok(None),
        }
    }
}

/// Reads big-endian fields of a send format; every read is checked.
struct Bin<'a> {
    b: &'a [u8],
    what: &'static str,
    all: &'a [u8],
}

impl<'a> Bin<'a> {
    fn new(b: &'a [u8], what: &'static str) -> Self {
        Bin { b, what, all: b }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return err(self.what, self.all);
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(self.i32()? as u32)
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    fn len_prefixed(&mut self) -> Result<&'a [u8]> {
        let n = self.i32()?;
        if n < 0 {
            return err(self.what, self.all);
        }
        self.take(n as usize)
    }
    fn end(&self) -> Result<()> {
        if self.b.is_empty() {
            Ok(())
        } else {
            err(self.what, self.all)
        }
    }
}

/// Renders one binary value of `kind` as PostgreSQL's text output, appended to `out`.
pub(crate) fn render(kind: StrKind, bytes: &[u8], out: &mut String) -> Result<()> {
    match kind {
        StrKind::Text | StrKind::Json | StrKind::Jsonb | StrKind::Jsonpath => {
            let skip = kind.binary_text_offset(bytes)?.unwrap_or(0);
            out.push_str(super::store::check_utf8(&bytes[skip..])?);
        }
        StrKind::Char => {
            // charout: NUL prints as nothing, a high-bit byte as \ooo.
            let c = fixed::<1>("\"char\"", bytes)?[0];
            if c >= 0x80 {
                let _ = write!(out, "\\{c:03o}");
            } else if c != 0 {
                out.push(c as char);
            }
        }
        StrKind::Numeric | StrKind::Date | StrKind::Time | StrKind::Timestamp | StrKind::TimestampTz => {
            render_scalar(kind, bytes, out)?
        }
        StrKind::Interval => interval::interval_to_text(interval::interval_bin(bytes)?, out),
        StrKind::TimeTz => datetime::timetz_bin_to_text(bytes, out)?,
        StrKind::Inet => inet(bytes, out)?,
        StrKind::Macaddr | StrKind::Macaddr8 => {
            let n = if kind == StrKind::Macaddr { 6 } else { 8 };
            if bytes.len() != n {
                return err("binary macaddr", bytes);
            }
            for (i, b) in bytes.iter().enumerate() {
                if i > 0 {
                    out.push(':');
                }
                push_hex(out, std::slice::from_ref(b));
            }
        }
        StrKind::Money => money(i64::from_be_bytes(fixed::<8>("money", bytes)?), out),
        StrKind::Bit => {
            let mut r = Bin::new(bytes, "binary bit");
            let n = r.i32()?;
            let data = r.b;
            if n < 0 || data.len() != (n as usize).div_ceil(8) {
                return err("binary bit", bytes);
            }
            for i in 0..n as usize {
                out.push(if data[i / 8] & (0x80 >> (i % 8)) != 0 { '1' } else { '0' });
            }
        }
        StrKind::Point => {
            let mut r = Bin::new(bytes, "binary point");
            point(&mut r, out)?;
            r.end()?;
        }
        StrKind::Line => {
            let mut r = Bin::new(bytes, "binary line");
            out.push('{');
            for i in 0..3 {
                if i > 0 {
                    out.push(',');
                }
                float8_out(r.f64()?, out);
            }
            out.push('}');
            r.end()?;
        }
        StrKind::Lseg | StrKind::Box => {
            // lseg_out "[(x1,y1),(x2,y2)]"; box_out "(high),(low)" as sent.
            let mut r = Bin::new(bytes, "binary lseg/box");
            let lseg = kind == StrKind::Lseg;
            if lseg {
                out.push('[');
            }
            point(&mut r, out)?;
            out.push(',');
            point(&mut r, out)?;
            if lseg {
                out.push(']');
            }
            r.end()?;
        }
        StrKind::Path | StrKind::Polygon => {
            // path_out: "[...]" open or "(...)" closed; poly_out: always "(...)".
            let mut r = Bin::new(bytes, "binary path/polygon");
            let closed = if kind == StrKind::Path { r.u8()? != 0 } else { true };
            let n = r.i32()?;
            if n < 0 || r.b.len() != n as usize * 16 {
                return err("binary path/polygon", bytes);
            }
            out.push(if closed { '(' } else { '[' });
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                point(&mut r, out)?;
            }
            out.push(if closed { ')' } else { ']' });
        }
        StrKind::Circle => {
            let mut r = Bin::new(bytes, "binary circle");
            out.push('<');
            point(&mut r, out)?;
            out.push(',');
            float8_out(r.f64()?, out);
            out.push('>');
            r.end()?;
        }
        StrKind::Range(elem) => range(elem, bytes, out)?,
        StrKind::Multirange(elem) => {
            let mut r = Bin::new(bytes, "binary multirange");
            let n = r.i32()?;
            if n < 0 {
                return err("binary multirange", bytes);
            }
            out.push('{');
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                range(elem, r.len_prefixed()?, out)?;
            }
            out.push('}');
            r.end()?;
        }
        StrKind::PgLsn => {
            let v = u64::from_be_bytes(fixed::<8>("pg_lsn", bytes)?);
            let _ = write!(out, "{:X}/{:X}", v >> 32, v as u32);
        }
        StrKind::Xid => {
            let _ = write!(out, "{}", u32::from_be_bytes(fixed::<4>("xid", bytes)?));
        }
        StrKind::Xid8 => {
            let _ = write!(out, "{}", u64::from_be_bytes(fixed::<8>("xid8", bytes)?));
        }
        StrKind::Tid => {
            let mut r = Bin::new(bytes, "binary tid");
            let (block, offset) = (r.u32()?, r.u16()?);
            r.end()?;
            let _ = write!(out, "({block},{offset})");
        }
        StrKind::Int2Vector | StrKind::OidVector => vector(kind, bytes, out)?,
        StrKind::Snapshot => {
            // pg_snapshot_send: nxip, xmin, xmax, then the xips.
            let mut r = Bin::new(bytes, "binary snapshot");
            let n = r.i32()?;
            let (xmin, xmax) = (r.u64()?, r.u64()?);
            let _ = write!(out, "{xmin}:{xmax}:");
            for i in 0..n.max(0) {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}", r.u64()?);
            }
            r.end()?;
        }
        StrKind::TsVector => tsvector(bytes, out)?,
        StrKind::Bool => out.push_str(if super::num::bool_bin(bytes)? { "t" } else { "f" }),
        StrKind::Int2 => {
            let _ = write!(out, "{}", super::num::int2_bin(bytes)?);
        }
        StrKind::Int4 => {
            let _ = write!(out, "{}", super::num::int4_bin(bytes)?);
        }
        StrKind::Int8 => {
            let _ = write!(out, "{}", super::num::int8_bin(bytes)?);
        }
        StrKind::Oid => {
            let _ = write!(out, "{}", super::num::oid_bin(bytes)?);
        }
        StrKind::Float4 => float4_out(super::num::float4_bin(bytes)?, out),
        StrKind::Float8 => float8_out(super::num::float8_bin(bytes)?, out),
        StrKind::Bytea => {
            // byteaout with bytea_output 'hex' (the default).
            out.push_str("\\x");
            push_hex(out, bytes);
        }
        StrKind::Uuid => push_uuid(out, &super::num::uuid_bin(bytes)?),
        StrKind::Array(elem) => array(elem, bytes, out)?,
        StrKind::Unrendered => {
            out.push_str("\\x");
            push_hex(out, bytes);
        }
    }
    Ok(())
}

impl StrKind {
    /// Whether [`render_scalar`] renders this kind.
    #[inline]
    pub(crate) fn is_scalar(self) -> bool {
        matches!(self, StrKind::Numeric | StrKind::Date | StrKind::Time | StrKind::Timestamp | StrKind::TimestampTz)
    }
}

/// The kinds whose text is rendered into any [`TextOut`], a utf8 column's bytes included
/// ([`StrKind::is_scalar`]); the others render nothing here. Nothing is written when the
/// value is not well formed: each is checked whole before its first byte is written.
#[inline]
pub(crate) fn render_scalar<O: TextOut + ?Sized>(kind: StrKind, bytes: &[u8], out: &mut O) -> Result<()> {
    match kind {
        StrKind::Numeric => numeric_bin_to_text(bytes, out)?,
        StrKind::Date => datetime::date_to_text(datetime::date_bin(bytes)?, out),
        StrKind::Time => datetime::time_to_text(datetime::time_bin(bytes)?, out),
        StrKind::Timestamp => datetime::timestamp_to_text(datetime::timestamp_bin(bytes)?, false, out),
        StrKind::TimestampTz => datetime::timestamp_to_text(datetime::timestamp_bin(bytes)?, true, out),
        _ => debug_assert!(!kind.is_scalar()),
    }
    Ok(())
}

fn point(r: &mut Bin<'_>, out: &mut String) -> Result<()> {
    out.push('(');
    float8_out(r.f64()?, out);
    out.push(',');
    float8_out(r.f64()?, out);
    out.push(')');
    Ok(())
}


/// cash_out with lc_monetary C: "$1,234.56", "-$1,234.56".
fn money(v: i64, out: &mut String) {
    if v < 0 {
        out.push('-');
    }
    out.push('$');
    let a = v.unsigned_abs();
    let (int, cents) = (a / 100, a % 100);
    let digits = int.to_string();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    let _ = write!(out, ".{cents:02}");
}

/// inet_send: family (2 IPv4, 3 IPv6), bits, is_cidr, address length, address.
/// network_out: the address (IPv6 per inet_net_ntop.c), "/bits" unless an inet of full length.
fn inet(bytes: &[u8], out: &mut String) -> Result<()> {
    let mut r = Bin::new(bytes, "binary inet/cidr");
    let (family, bits, is_cidr, n) = (r.u8()?, r.u8()?, r.u8()?, r.u8()?);
    let addr = r.take(n as usize)?;
    r.end()?;
    let max = match (family, n) {
        (2, 4) => 32,
        (3, 16) => 128,
        _ => return err("binary inet/cidr", bytes),
    };
    if bits > max {
        return err("binary inet/cidr", bytes);
    }
    if max == 32 {
        let _ = write!(out, "{}.{}.{}.{}", addr[0], addr[1], addr[2], addr[3]);
    } else {
        ipv6(addr, out);
    }
    if is_cidr != 0 || bits != max {
        let _ = write!(out, "/{bits}");
    }
    Ok(())
}

/// inet_net_ntop_ipv6: the longest run (2 or more) of zero words as "::", and the last
/// 32 bits in dotted form for ::a.b.c.d and ::ffff:a.b.c.d.
fn ipv6(a: &[u8], out: &mut String) {
    let words: Vec<u16> = a.chunks_exact(2).map(|w| u16::from_be_bytes([w[0], w[1]])).collect();
    let (mut best, mut best_len) = (usize::MAX, 0);
    let mut i = 0;
    while i < 8 {
        if words[i] == 0 {
            let start = i;
            while i < 8 && words[i] == 0 {
                i += 1;
            }
            if i - start > best_len {
                (best, best_len) = (start, i - start);
            }
        } else {
            i += 1;
        }
    }
    if best_len < 2 {
        best = usize::MAX;
    }
    let mut i = 0;
    while i < 8 {
        if best != usize::MAX && i >= best && i < best + best_len {
            if i == best {
                out.push(':');
            }
            i += 1;
            continue;
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6
            && best == 0
            && (best_len == 6 || (best_len == 7 && words[7] != 1) || (best_len == 5 && words[5] == 0xffff))
        {
            let _ = write!(out, "{}.{}.{}.{}", a[12], a[13], a[14], a[15]);
            return;
        }
        let _ = write!(out, "{:x}", words[i]);
        i += 1;
    }
    if best != usize::MAX && best + best_len == 8 {
        out.push(':');
    }
}

mod collections;
mod float;

use collections::*;
pub(crate) use float::{float4_out, float8_out};


#[cfg(test)]
mod tests {
    use super::*;

    fn f8(v: f64) -> String {
        let mut s = String::new();
        float8_out(v, &mut s);
        s
    }
    fn f4(v: f32) -> String {
        let mut s = String::new();
        float4_out(v, &mut s);
        s
    }

    #[test]
    fn floats_print_as_postgresql() {
        // Expected strings are PostgreSQL 18's output for the same values.
        assert_eq!(f8(1e14), "100000000000000");
        assert_eq!(f8(1e15), "1e+15");
        assert_eq!(f8(123456789012345678.0), "1.2345678901234568e+17");
        assert_eq!(f8(0.0001), "0.0001");
        assert_eq!(f8(1e-5), "1e-05");
        assert_eq!(f8(1.5e-5), "1.5e-05");
        assert_eq!(f8(1.7976931348623157e308), "1.7976931348623157e+308");
        assert_eq!(f8(5e-324), "5e-324");
        assert_eq!(f8(-0.0), "-0");
        assert_eq!(f8(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(f4(1e5), "100000");
        assert_eq!(f4(1e6), "1e+06");
        assert_eq!(f4(1234567.0), "1.234567e+06");
        assert_eq!(f4(123456789.0), "1.2345679e+08");
        assert_eq!(f4(3.4028235e38), "3.4028235e+38");
        assert_eq!(f4(1e-45), "1e-45");
        // An exact tie between two shortest candidates: Ryu (PostgreSQL) takes the even
        // digit. SELECT 391899.125::float4 prints 391899.12 (found by tests/torture).
        // 391899.125 is exact in f32 (22 significant bits); as bits, so no literal rounds it.
        assert_eq!(f4(f32::from_bits(0x48BF_5B64)), "391899.12");
        assert_eq!(f4(0.000123), "0.000123");
        assert_eq!(f8(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(f8(-123456.5), "-123456.5");
    }

    #[test]
    fn money_in_c_locale() {
        let mut s = String::new();
        money(-123456, &mut s);
        assert_eq!(s, "-$1,234.56");
        s.clear();
        money(i64::MIN, &mut s);
        assert_eq!(s, "-$92,233,720,368,547,758.08");
    }
}
