//! One value into a [`ColumnBuilder`]: the fast paths of the common types, and `put`, which
//! decodes every type (text or send format), applies the special-value policy and checks
//! an array's elements before appending any.

use arrow_buffer::IntervalMonthDayNano;

use super::array::ArrayDecoder;
use super::render::StrKind;
use super::{datetime, interval, num, oid, render, store};
use super::{Col, ColumnBuilder, Result, Source, Special, SpecialValues, ValueError};

impl ColumnBuilder {
    pub fn append_null(&mut self) {
        self.len += 1;
        match &mut self.col {
            Col::Bool(b) => b.append_null(),
            Col::Int2(b) => b.append_null(),
            Col::Int4(b) => b.append_null(),
            Col::Int8(b) => b.append_null(),
            Col::Oid(b) => b.append_null(),
            Col::Float4(b) => b.append_null(),
            Col::Float8(b) => b.append_null(),
            Col::Decimal { b, .. } => b.append_null(),
            Col::Date(b) => b.append_null(),
            Col::Time(b) => b.append_null(),
            Col::Timestamp { b, .. } => b.append_null(),
            Col::Interval(b) => b.append_null(),
            Col::IntervalStruct(b) => b.append_null(),
            Col::Uuid(b) => b.append_null(),
            Col::Bytea(s) | Col::Raw(s) => s.append_null(),
            Col::Str { out, .. } => out.append_null(),
            Col::List(l) => {
                let last = l.offsets.last().copied().unwrap_or(0);
                l.offsets.push(last);
                l.nulls.append_null();
            }
        }
    }

    /// `bytes` is the value of a 't' cell. `source` is Some when the bytes lie inside a Buffer
    /// the output may reference. Inlined into the cell loop of `TableBuilder::append`: as a
    /// call, its prologue and epilogue were a quarter of the work for an integer.
    #[inline(always)]
    pub fn append_text(&mut self, bytes: &[u8], source: Option<Source<'_>>) -> Result<()> {
        // The common types in one dispatch, without `put`'s machinery (a second dispatch and
        // the dry run's flags); a value that does not parse, or a special one, goes through
        // `put`, which parses it again and decides.
        let (sv, range, dt) = (self.special, self.datetime_range, self.datetime);
        let done = match &mut self.col {
            Col::Str { out, .. } => {
                out.append(bytes, source)?;
                true
            }
            Col::Int4(b) => num::parse_i64(bytes).and_then(|v| i32::try_from(v).ok()).map(|v| b.append_value(v)).is_some(),
            Col::Int8(b) => num::parse_i64(bytes).map(|v| b.append_value(v)).is_some(),
            Col::Int2(b) => num::parse_i64(bytes).and_then(|v| i16::try_from(v).ok()).map(|v| b.append_value(v)).is_some(),
            Col::Bool(b) => num::bool_text(bytes).map(|v| b.append_value(v)).is_ok(),
            Col::Float4(b) => num::float_text(bytes).map(|v| b.append_value(v)).is_ok(),
            Col::Float8(b) => num::float_text(bytes).map(|v| b.append_value(v)).is_ok(),
            Col::Decimal { b, precision, scale } => match num::numeric_text_to_decimal(bytes, *precision, *scale) {
                Ok(Ok(v)) => {
                    b.append_value(v);
                    true
                }
                _ => false,
            },
            Col::Timestamp { b, tz, last } => {
                datetime::timestamp_text_last(bytes, *tz, dt, last)
                    .ok()
                    .and_then(|v| datetime::timestamp_to_arrow(v, sv, range).ok())
                    .map(|v| b.append_value(v))
                    .is_some()
            }
            Col::Date(b) => datetime::date_text(bytes, dt)
                .ok()
                .and_then(|v| datetime::date_to_arrow(v, sv, range).ok())
                .map(|v| b.append_value(v))
                .is_some(),
            _ => false,
        };
        if done {
            self.len += 1;
            return Ok(());
        }
        self.put(bytes, source, false, false)
    }

    /// `bytes` is the value of a 'b' cell (the type's send format). Inlined as `append_text`.
    #[inline(always)]
    pub fn append_binary(&mut self, bytes: &[u8], source: Option<Source<'_>>) -> Result<()> {
        // The common types in one dispatch, as in `append_text`: the fixed-width ones, text
        // whose send format is the text itself, and text rendered from the send format. A value
        // of the wrong width or a special one goes through `put`, which decides.
        let (sv, range) = (self.special, self.datetime_range);
        let done = match &mut self.col {
            // text, varchar, bpchar, name, json: stored as they came, as `put` would after
            // finding that the text starts at byte 0.
            Col::Str { kind: StrKind::Text | StrKind::Json, out } => {
                out.append(bytes, source)?;
                true
            }
            Col::Timestamp { b, .. } => bytes
                .try_into()
                .ok()
                .and_then(|v| datetime::timestamp_to_arrow(i64::from_be_bytes(v), sv, range).ok())
                .map(|v| b.append_value(v))
                .is_some(),
            Col::Date(b) => bytes
                .try_into()
                .ok()
                .and_then(|v| datetime::date_to_arrow(i32::from_be_bytes(v), sv, range).ok())
                .map(|v| b.append_value(v))
                .is_some(),
            Col::Int4(b) => bytes.try_into().map(|v| b.append_value(i32::from_be_bytes(v))).is_ok(),
            Col::Int8(b) => bytes.try_into().map(|v| b.append_value(i64::from_be_bytes(v))).is_ok(),
            Col::Int2(b) => bytes.try_into().map(|v| b.append_value(i16::from_be_bytes(v))).is_ok(),
            Col::Float8(b) => num::float8_bin(bytes).map(|v| b.append_value(v)).is_ok(),
            Col::Float4(b) => num::float4_bin(bytes).map(|v| b.append_value(v)).is_ok(),
            Col::Bool(b) => num::bool_bin(bytes).map(|v| b.append_value(v)).is_ok(),
            Col::Decimal { b, precision, scale } => match num::numeric_bin_to_decimal(bytes, *precision, *scale) {
                Ok(Ok(v)) => {
                    b.append_value(v);
                    true
                }
                _ => false,
            },
            Col::Bytea(out) | Col::Raw(out) => {
                out.append(bytes, source)?;
                true
            }
            Col::Str { kind: StrKind::Uuid, out } => match <&[u8; 16]>::try_from(bytes) {
                Ok(u) => {
                    out.append_ascii(&num::uuid_ascii(u))?;
                    true
                }
                Err(_) => false,
            },
            // Numerics and times as text (numeric without a typmod; time by default): rendered
            // in place, without a scratch String and its copy.
            Col::Str { kind, out } if kind.is_scalar() => {
                out.append_scalar(*kind, bytes, &mut self.scratch.text)?;
                true
            }
            Col::Str { kind, out } => {
                match kind.binary_text_offset(bytes)? {
                    // jsonb: the text after a version byte.
                    Some(skip) => out.append(&bytes[skip..], source.map(|s| s.advance(skip)))?,
                    None => {
                        let text = &mut self.scratch.text;
                        text.clear();
                        render::render(*kind, bytes, text)?;
                        out.append_str(text)?;
                    }
                }
                true
            }
            _ => false,
        };
        if done {
            self.len += 1;
            return Ok(());
        }
        self.put(bytes, source, true, false)
    }

    /// Decodes one value and, unless `dry`, appends it. A dry run checks an array's
    /// elements before any is appended, so that an error leaves the builder as it was.
    fn put(&mut self, bytes: &[u8], source: Option<Source<'_>>, binary: bool, dry: bool) -> Result<()> {
        // A special value under SpecialValues::Null becomes a null.
        let mut null = false;
        macro_rules! special {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(Special(msg)) => {
                        if self.special == SpecialValues::Null {
                            null = true;
                            Default::default()
                        } else {
                            return Err(ValueError::special(msg));
                        }
                    }
                }
            };
        }
        macro_rules! prim {
            ($b:expr, $v:expr) => {{
                let v = $v;
                if !dry {
                    if null {
                        $b.append_null()
                    } else {
                        $b.append_value(v)
                    }
                }
            }};
        }
        let (sv, range) = (self.special, self.datetime_range);
        match &mut self.col {
            Col::Bool(b) => prim!(b, if binary { num::bool_bin(bytes)? } else { num::bool_text(bytes)? }),
            Col::Int2(b) => prim!(b, if binary { num::int2_bin(bytes)? } else { num::int_text(bytes)? }),
            Col::Int4(b) => prim!(b, if binary { num::int4_bin(bytes)? } else { num::int_text(bytes)? }),
            Col::Int8(b) => prim!(b, if binary { num::int8_bin(bytes)? } else { num::int_text(bytes)? }),
            Col::Oid(b) => {
                let v: u32 = if binary { num::oid_bin(bytes)? } else { num::int_text(bytes)? };
                prim!(b, i64::from(v))
            }
            Col::Float4(b) => prim!(b, if binary { num::float4_bin(bytes)? } else { num::float_text(bytes)? }),
            Col::Float8(b) => prim!(b, if binary { num::float8_bin(bytes)? } else { num::float_text(bytes)? }),
            Col::Decimal { b, precision, scale } => {
                let v = if binary {
                    special!(num::numeric_bin_to_decimal(bytes, *precision, *scale)?)
                } else {
                    special!(num::numeric_text_to_decimal(bytes, *precision, *scale)?)
                };
                prim!(b, v)
            }
            Col::Date(b) => {
                let v = if binary { datetime::date_bin(bytes)? } else { datetime::date_text(bytes, self.datetime)? };
                let v = special!(datetime::date_to_arrow(v, sv, range));
                prim!(b, v)
            }
            Col::Time(b) => {
                let v = if binary { datetime::time_bin(bytes)? } else { datetime::time_text(bytes)? };
                prim!(b, special!(datetime::time_to_arrow(v)))
            }
            Col::Timestamp { b, tz, .. } => {
                let v = match (binary, *tz) {
                    (true, _) => datetime::timestamp_bin(bytes)?,
                    (false, false) => datetime::timestamp_text(bytes, self.datetime)?,
                    (false, true) => datetime::timestamptz_text(bytes, self.datetime)?,
                };
                prim!(b, special!(datetime::timestamp_to_arrow(v, sv, range)))
            }
            Col::Interval(b) => {
                let v = if binary { interval::interval_bin(bytes)? } else { interval::interval_text(bytes)? };
                let v: IntervalMonthDayNano = special!(interval::interval_to_arrow(v, sv));
                prim!(b, v)
            }
            Col::IntervalStruct(b) => {
                let v = if binary { interval::interval_bin(bytes)? } else { interval::interval_text(bytes)? };
                let v = special!(interval::interval_fields(v, sv));
                prim!(b, v)
            }
            Col::Uuid(b) => {
                let v = if binary { num::uuid_bin(bytes)? } else { num::uuid_text(bytes)? };
                if !dry {
                    // Cannot fail: the value has the builder's width of 16.
                    b.append_value(v).map_err(|e| ValueError::new(e.to_string()))?;
                }
            }
            Col::Bytea(out) => {
                if binary {
                    if !dry {
                        out.append(bytes, source)?;
                    }
                } else {
                    // Text mode is `\x` hex, or the legacy escape format (bytea_output = escape).
                    let decoded = num::bytea_text(bytes, &mut self.scratch.bytes)?;
                    if !dry {
                        out.append(decoded, None)?;
                    }
                }
            }
            Col::Raw(out) => {
                if !dry {
                    out.append(bytes, source)?;
                }
            }
            Col::Str { kind, out } => {
                if binary {
                    match kind.binary_text_offset(bytes)? {
                        // The send format is the text itself (after a version byte for jsonb).
                        Some(skip) => {
                            let text = &bytes[skip..];
                            if dry {
                                store::check_utf8(text)?;
                            } else {
                                out.append(text, source.map(|s| s.advance(skip)))?;
                            }
                        }
                        None => {
                            let text = &mut self.scratch.text;
                            text.clear();
                            render::render(*kind, bytes, text)?;
                            if !dry {
                                out.append_str(text)?;
                            }
                        }
                    }
                } else if dry {
                    store::check_utf8(bytes)?;
                } else {
                    out.append(bytes, source)?;
                }
            }
            Col::List(_) => {
                let mut dec = self.scratch.array.take().unwrap_or_default();
                let r = self.put_array(&mut dec, bytes, source, binary, dry);
                self.scratch.array = Some(dec);
                return r;
            }
        }
        if !dry {
            self.len += 1;
        }
        Ok(())
    }

    fn put_array(
        &mut self,
        dec: &mut ArrayDecoder,
        bytes: &[u8],
        source: Option<Source<'_>>,
        binary: bool,
        dry: bool,
    ) -> Result<()> {
        let Col::List(l) = &mut self.col else { return Ok(()) };
        let (elem_oid, ndims) = (l.elem_oid, l.ndims);
        let delim = oid::array_delimiter(elem_oid);
        if binary {
            dec.parse_binary(bytes, elem_oid)?;
        } else {
            dec.parse_text(bytes, delim)?;
        }
        if dec.lower_bounds_not_one() {
            return self.special_array(dry, "array with a lower bound other than 1: a list cannot keep it");
        }
        let dims = dec.dims();
        if !dims.is_empty() && dims.len() != ndims && self.renest(dims.len()) {
            // The column's first non-empty array set its depth.
        } else if !dims.is_empty() && dims.len() != ndims {
            let msg = format!(
                "{}-dimensional array in a column decoded as {}-dimensional lists (TypeOptions::array_ndims)",
                dims.len(),
                ndims
            );
            return self.special_array(dry, &msg);
        }
        let Col::List(l) = &mut self.col else { return Ok(()) };
        let inner = l.innermost();
        // Check every element, then append: an error leaves the builder unchanged.
        for pass_dry in [true, false] {
            if !pass_dry && dry {
                break;
            }
            for i in 0..dec.len() {
                match dec.element(i, bytes) {
                    None => {
                        if !pass_dry {
                            inner.append_null();
                        }
                    }
                    Some((value, at)) => {
                        let src = match (at, source) {
                            (Some(at), Some(s)) => Some(s.advance(at)),
                            _ => None,
                        };
                        inner.put(value, src, binary, pass_dry)?;
                    }
                }
            }
        }
        if dry {
            return Ok(());
        }
        let dims = dec.dims();
        l.push_shape(dims);
        self.len += 1;
        Ok(())
    }

    fn special_array(&mut self, dry: bool, msg: &str) -> Result<()> {
        if self.special == SpecialValues::Null {
            if !dry {
                self.append_null();
            }
            Ok(())
        } else {
            Err(ValueError::special(msg))
        }
    }

    /// PostgreSQL's text output of a value of this column, for a special value that the
    /// column cannot hold: a text cell is that text already; a binary one is rendered.
    pub fn special_text(&self, bytes: &[u8], binary: bool) -> String {
        if !binary {
            return String::from_utf8_lossy(bytes).into_owned();
        }
        let mut text = String::new();
        match render::render(StrKind::for_oid(self.base_oid), bytes, &mut text) {
            Ok(()) => text,
            Err(_) => {
                // Every type with special values has a renderer; this is a fallback only.
                text.clear();
                text.push_str("\\x");
                num::push_hex(&mut text, bytes);
                text
            }
        }
    }
}
