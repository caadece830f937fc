//! Arrow values of the columns this crate builds, back to PostgreSQL's text output.
//!
//! Used where two versions of a column have no common lossless Arrow type (ALTER COLUMN
//! … TYPE text → int, or a dropped column re-added under its name with another type):
//! the unified column is then utf8 holding what PostgreSQL would print for each value,
//! under the settings a walsender has by default (see README.md beside this file).

use std::fmt::Write;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    IntervalMonthDayNanoType, Time64MicrosecondType, TimestampMicrosecondType, UInt32Type, UInt64Type,
    UInt8Type, UInt16Type,
};
use arrow_array::{Array, ArrayRef, StringArray};
use arrow_schema::{DataType, TimeUnit};

use super::datetime;
use super::num::{push_hex, push_uuid};
use super::interval::{self, Interval};
use super::render;
use super::value::ValueError;

const UNIX_TO_PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
const UNIX_TO_PG_EPOCH_DAYS: i32 = 10_957;

/// Each value of `array` as PostgreSQL's text output (nulls stay null).
pub fn to_pg_text(array: &dyn Array) -> Result<StringArray, ValueError> {
    let mut out = Vec::with_capacity(array.len());
    let mut text = String::new();
    for i in 0..array.len() {
        if array.is_null(i) {
            out.push(None);
            continue;
        }
        text.clear();
        value_text(array, i, false, &mut text)?;
        out.push(Some(text.clone()));
    }
    Ok(out.into_iter().collect())
}

/// Appends the text of `array[i]` (not null); `in_array` quotes it as array_out does.
fn value_text(array: &dyn Array, i: usize, in_array: bool, out: &mut String) -> Result<(), ValueError> {
    let self_quoting = matches!(
        array.data_type(),
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::List(_)
            | DataType::LargeList(_)
    ) || matches!(array.data_type(), DataType::FixedSizeBinary(w) if *w != 16);
    if in_array && !self_quoting {
        // array_out quotes an element whose text holds white space (a timestamp, a BC
        // date, an interval) or a delimiter, whatever its type.
        let mut element = String::new();
        value_text(array, i, false, &mut element)?;
        array_element(&element, out);
        return Ok(());
    }
    macro_rules! int {
        ($t:ty) => {{
            let _ = write!(out, "{}", array.as_primitive::<$t>().value(i));
        }};
    }
    match array.data_type() {
        DataType::Boolean => out.push(if array.as_boolean().value(i) { 't' } else { 'f' }),
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float32 => render::float4_out(array.as_primitive::<Float32Type>().value(i), out),
        DataType::Float64 => render::float8_out(array.as_primitive::<Float64Type>().value(i), out),
        DataType::Decimal128(_, scale) => decimal(array.as_primitive::<Decimal128Type>().value(i), *scale, out),
        DataType::Date32 => {
            let days = array.as_primitive::<Date32Type>().value(i);
            let pg = match datetime::date32_infinity(days) {
                Some("infinity") => i32::MAX,
                Some(_) => i32::MIN,
                None => days - UNIX_TO_PG_EPOCH_DAYS,
            };
            datetime::date_to_text(pg, out);
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            datetime::time_to_text(array.as_primitive::<Time64MicrosecondType>().value(i), out)
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let micros = array.as_primitive::<TimestampMicrosecondType>().value(i);
            let pg = match datetime::timestamp_infinity(micros) {
                Some("infinity") => i64::MAX,
                Some(_) => i64::MIN,
                None => micros - UNIX_TO_PG_EPOCH_MICROS,
            };
            datetime::timestamp_to_text(pg, tz.is_some(), out);
        }
        DataType::Interval(arrow_schema::IntervalUnit::MonthDayNano) => {
            let v = array.as_primitive::<IntervalMonthDayNanoType>().value(i);
            let micros = match v.nanoseconds {
                i64::MAX | i64::MIN => v.nanoseconds,
                n => n / 1000,
            };
            interval::interval_to_text(Interval { months: v.months, days: v.days, micros }, out);
        }
        DataType::Struct(fields) if super::is_interval_struct(fields) => {
            let s = array.as_struct();
            let v = Interval {
                months: s.column(0).as_primitive::<Int32Type>().value(i),
                days: s.column(1).as_primitive::<Int32Type>().value(i),
                micros: s.column(2).as_primitive::<Int64Type>().value(i),
            };
            interval::interval_to_text(v, out);
        }
        DataType::FixedSizeBinary(16) => {
            let b = array.as_fixed_size_binary().value(i);
            match <&[u8; 16]>::try_from(b) {
                Ok(b) => push_uuid(out, b),
                Err(_) => push_hex(out, b),
            }
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            let bytes: &[u8] = match array.data_type() {
                DataType::Binary => array.as_binary::<i32>().value(i),
                DataType::LargeBinary => array.as_binary::<i64>().value(i),
                DataType::BinaryView => array.as_binary_view().value(i),
                _ => array.as_fixed_size_binary().value(i),
            };
            out.push_str(if in_array { "\"\\\\x" } else { "\\x" });
            push_hex(out, bytes);
            if in_array {
                out.push('"');
            }
            return Ok(());
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let s = match array.data_type() {
                DataType::Utf8 => array.as_string::<i32>().value(i),
                DataType::LargeUtf8 => array.as_string::<i64>().value(i),
                _ => array.as_string_view().value(i),
            };
            if in_array {
                array_element(s, out);
            } else {
                out.push_str(s);
            }
            return Ok(());
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let values: ArrayRef = match array.data_type() {
                DataType::List(_) => array.as_list::<i32>().value(i),
                _ => array.as_list::<i64>().value(i),
            };
            out.push('{');
            for k in 0..values.len() {
                if k > 0 {
                    out.push(',');
                }
                if values.is_null(k) {
                    out.push_str("NULL");
                } else {
                    value_text(values.as_ref(), k, true, out)?;
                }
            }
            out.push('}');
            return Ok(());
        }
        other => return Err(ValueError::new(format!("no PostgreSQL text for Arrow type {other}"))),
    }
    Ok(())
}

/// numeric_out of an unscaled value: exactly `scale` digits after the point (none for a
/// negative scale, whose value is a multiple of 10^-scale).
fn decimal(v: i128, scale: i8, out: &mut String) {
    if scale <= 0 {
        let _ = write!(out, "{}", v * 10i128.pow((-scale) as u32));
        return;
    }
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    if v < 0 {
        out.push('-');
    }
    if digits.len() <= scale {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', scale - digits.len()));
        out.push_str(&digits);
    } else {
        let (int, frac) = digits.split_at(digits.len() - scale);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    }
}

/// An element of array_out: quoted when empty, NULL, or holding a delimiter, brace,
/// quote, backslash or white space.
fn array_element(s: &str, out: &mut String) {
    let quote = s.is_empty()
        || s.eq_ignore_ascii_case("null")
        || s.bytes().any(|b| matches!(b, b'{' | b'}' | b',' | b'"' | b'\\') || b.is_ascii_whitespace());
    if !quote {
        out.push_str(s);
        return;
    }
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Date32Array, Decimal128Array, Int32Array, ListArray, TimestampMicrosecondArray};
    use arrow_array::types::Int32Type as I32;
    use std::sync::Arc;

    fn texts(a: &dyn Array) -> Vec<Option<String>> {
        to_pg_text(a).unwrap().iter().map(|v| v.map(str::to_string)).collect()
    }

    #[test]
    fn scalars_as_postgresql_prints_them() {
        assert_eq!(texts(&Int32Array::from(vec![Some(-5), None])), [Some("-5".into()), None]);
        let d = Decimal128Array::from(vec![150, -5, 0]).with_precision_and_scale(5, 2).unwrap();
        assert_eq!(texts(&d), [Some("1.50".into()), Some("-0.05".into()), Some("0.00".into())]);
        let dates = Date32Array::from(vec![0, i32::MAX, -719_163]);
        assert_eq!(texts(&dates), [Some("1970-01-01".into()), Some("infinity".into()), Some("0001-12-31 BC".into())]);
        let ts = TimestampMicrosecondArray::from(vec![1_500_000]).with_timezone("UTC");
        assert_eq!(texts(&ts), [Some("1970-01-01 00:00:01.5+00".into())]);
    }

    #[test]
    fn arrays_quote_like_array_out() {
        let ints = ListArray::from_iter_primitive::<I32, _, _>(vec![Some(vec![Some(1), None, Some(3)]), Some(vec![])]);
        assert_eq!(texts(&ints), [Some("{1,NULL,3}".into()), Some("{}".into())]);
        let strs = StringArray::from(vec!["a b", "", "null", "x\"y", "plain"]);
        let list = ListArray::new(
            Arc::new(arrow_schema::Field::new("item", DataType::Utf8, true)),
            arrow_buffer::OffsetBuffer::from_lengths([5]),
            Arc::new(strs),
            None,
        );
        assert_eq!(texts(&list), [Some(r#"{"a b","","null","x\"y",plain}"#.into())]);
        // Elements whose text holds a space are quoted, whatever their type (array_out).
        let ts = TimestampMicrosecondArray::from(vec![0, i64::MIN]).with_timezone("UTC");
        let list = ListArray::new(
            Arc::new(arrow_schema::Field::new("item", ts.data_type().clone(), true)),
            arrow_buffer::OffsetBuffer::from_lengths([2]),
            Arc::new(ts),
            None,
        );
        assert_eq!(texts(&list), [Some(r#"{"1970-01-01 00:00:00+00",-infinity}"#.into())]);
        let dates = Date32Array::from(vec![-719_163, 0]);
        let list = ListArray::new(
            Arc::new(arrow_schema::Field::new("item", DataType::Date32, true)),
            arrow_buffer::OffsetBuffer::from_lengths([2]),
            Arc::new(dates),
            None,
        );
        assert_eq!(texts(&list), [Some(r#"{"0001-12-31 BC",1970-01-01}"#.into())]);
    }

    #[test]
    fn arrays_quote_elements_of_every_type_like_array_out() {
        // PostgreSQL: SELECT ARRAY['0044-03-15 BC', '2000-01-01']::date[] prints
        // {"0044-03-15 BC",2000-01-01}; a timestamp always holds a space.
        let dates = Date32Array::from(vec![-719_163, 10_957]);
        let list = ListArray::new(
            Arc::new(arrow_schema::Field::new("item", DataType::Date32, true)),
            arrow_buffer::OffsetBuffer::from_lengths([2]),
            Arc::new(dates),
            None,
        );
        assert_eq!(texts(&list), [Some(r#"{"0001-12-31 BC",2000-01-01}"#.into())]);
        let ts = TimestampMicrosecondArray::from(vec![1_500_000, i64::MAX]);
        let list = ListArray::new(
            Arc::new(arrow_schema::Field::new("item", ts.data_type().clone(), true)),
            arrow_buffer::OffsetBuffer::from_lengths([2]),
            Arc::new(ts),
            None,
        );
        assert_eq!(texts(&list), [Some(r#"{"1970-01-01 00:00:01.5",infinity}"#.into())]);
    }
}
