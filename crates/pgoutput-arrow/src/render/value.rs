//! Per-type encoders: one [`Column`] per Arrow column, made once per batch, writing the
//! value of a row into the output buffer (the shape of arrow-json's writer encoders).
//!
//! JSON-safe means nothing a JSON parser could silently change: 64-bit integers and
//! decimals are strings (doubles cannot hold them), bytes lowercase hex, NaN and ±Infinity
//! the strings `"NaN"`, `"Infinity"`, `"-Infinity"`, dates and timestamps ISO 8601 of any
//! year (timestamps with a time zone in UTC with `Z`), PostgreSQL's ±infinity dates and
//! timestamps (the extreme values of the Arrow type) `"infinity"` and `"-infinity"`,
//! intervals `{"months", "days", "nanoseconds"}`. The pretty format prints the same values
//! for a person: numbers and timestamps bare, text quoted PostgreSQL's way and cut when long.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BooleanArray, FixedSizeBinaryArray, GenericByteArray,
    GenericByteViewArray, PrimitiveArray, StructArray,
};
use arrow_buffer::{IntervalMonthDayNano, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{ArrowError, DataType, Field, IntervalUnit, TimeUnit};

use super::text;

/// How values are written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Style {
    pub pretty: bool,
    /// Pretty: text longer than this many characters is cut (bytea: half as many bytes).
    pub max_chars: usize,
}

impl Style {
    pub fn null(&self) -> &'static [u8] {
        if self.pretty {
            b"NULL"
        } else {
            b"null"
        }
    }

    /// A value JSON has no type for, as text: quoted in JSON, bare in the pretty format.
    fn raw(&self, out: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
        if self.pretty {
            f(out);
        } else {
            out.push(b'"');
            f(out);
            out.push(b'"');
        }
    }

    pub fn text(&self, out: &mut Vec<u8>, s: &str) {
        if self.pretty {
            text::pretty_str(out, s, self.max_chars);
        } else {
            text::json_str(out, s);
        }
    }
}

/// Writes the value of row `i`, which is not null.
trait Encode: Send {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>);
}

/// One column's values, ready to write row by row.
pub(crate) struct Column {
    nulls: Option<NullBuffer>,
    encoder: Box<dyn Encode>,
    null: &'static [u8],
}

impl Column {
    /// The encoder of `array`; `field` (its field, when known) names extension types
    /// (`arrow.uuid`).
    pub fn new(array: &ArrayRef, field: Option<&Field>, style: Style) -> Result<Column, ArrowError> {
        let array = match array.data_type() {
            // Dictionaries are printed as their values.
            DataType::Dictionary(_, value) => arrow_cast::cast(array, value)?,
            _ => array.clone(),
        };
        Ok(Column { nulls: array.logical_nulls(), encoder: encoder(&array, field, style)?, null: style.null() })
    }

    pub fn is_null(&self, i: usize) -> bool {
        self.nulls.as_ref().is_some_and(|n| n.is_null(i))
    }

    pub fn write(&mut self, i: usize, out: &mut Vec<u8>) {
        if self.is_null(i) {
            out.extend_from_slice(self.null);
        } else {
            self.encoder.encode(i, out);
        }
    }
}

fn type_name(field: Option<&Field>) -> Option<&str> {
    field.and_then(|f| f.metadata().get("pg.type_name")).map(String::as_str)
}

fn extension_name(field: Option<&Field>) -> Option<&str> {
    field.and_then(|f| f.metadata().get("ARROW:extension:name")).map(String::as_str)
}

fn encoder(array: &ArrayRef, field: Option<&Field>, style: Style) -> Result<Box<dyn Encode>, ArrowError> {
    use DataType as D;
    let p = style.pretty;
    Ok(match array.data_type() {
        D::Null => Box::new(NullEnc),
        D::Boolean => Box::new(BoolEnc(array.as_boolean().clone())),
        D::Int8 => Box::new(IntEnc { a: array.as_primitive::<Int8Type>().clone(), quoted: false }),
        D::Int16 => Box::new(IntEnc { a: array.as_primitive::<Int16Type>().clone(), quoted: false }),
        D::Int32 => Box::new(IntEnc { a: array.as_primitive::<Int32Type>().clone(), quoted: false }),
        // An oid (Int64 in the decoder's output) fits a JSON number, as it did when it was UInt32.
        D::Int64 if type_name(field) == Some("oid") => {
            Box::new(IntEnc { a: array.as_primitive::<Int64Type>().clone(), quoted: false })
        }
        D::Int64 => Box::new(IntEnc { a: array.as_primitive::<Int64Type>().clone(), quoted: !p }),
        D::UInt8 => Box::new(IntEnc { a: array.as_primitive::<UInt8Type>().clone(), quoted: false }),
        D::UInt16 => Box::new(IntEnc { a: array.as_primitive::<UInt16Type>().clone(), quoted: false }),
        D::UInt32 => Box::new(IntEnc { a: array.as_primitive::<UInt32Type>().clone(), quoted: false }),
        D::UInt64 => Box::new(IntEnc { a: array.as_primitive::<UInt64Type>().clone(), quoted: !p }),
        D::Float32 => Box::new(FloatEnc { a: array.as_primitive::<Float32Type>().clone(), style, scratch: String::new() }),
        D::Float64 => Box::new(FloatEnc { a: array.as_primitive::<Float64Type>().clone(), style, scratch: String::new() }),
        D::Decimal32(_, s) => Box::new(DecimalEnc { a: array.as_primitive::<Decimal32Type>().clone(), scale: *s, style }),
        D::Decimal64(_, s) => Box::new(DecimalEnc { a: array.as_primitive::<Decimal64Type>().clone(), scale: *s, style }),
        D::Decimal128(_, s) => Box::new(DecimalEnc { a: array.as_primitive::<Decimal128Type>().clone(), scale: *s, style }),
        D::Decimal256(_, s) => Box::new(DecimalEnc { a: array.as_primitive::<Decimal256Type>().clone(), scale: *s, style }),
        D::Utf8 => Box::new(StrEnc { a: array.as_string::<i32>().clone(), style }),
        D::LargeUtf8 => Box::new(StrEnc { a: array.as_string::<i64>().clone(), style }),
        D::Utf8View => Box::new(StrEnc { a: array.as_string_view().clone(), style }),
        D::FixedSizeBinary(16) if extension_name(field) == Some("arrow.uuid") => {
            Box::new(UuidEnc { a: array.as_fixed_size_binary().clone(), style })
        }
        D::Binary => Box::new(BinEnc { a: array.as_binary::<i32>().clone(), style }),
        D::LargeBinary => Box::new(BinEnc { a: array.as_binary::<i64>().clone(), style }),
        D::BinaryView => Box::new(BinEnc { a: array.as_binary_view().clone(), style }),
        D::FixedSizeBinary(_) => Box::new(BinEnc { a: array.as_fixed_size_binary().clone(), style }),
        D::Date32 => Box::new(Date32Enc { a: array.as_primitive::<Date32Type>().clone(), style }),
        D::Date64 => Box::new(Date64Enc { a: array.as_primitive::<Date64Type>().clone(), style }),
        D::Timestamp(unit, tz) => {
            let a = arrow_cast::cast(array, &D::Int64)?.as_primitive::<Int64Type>().clone();
            Box::new(TimestampEnc { a, per_us: Scale::of(*unit), utc: tz.is_some(), style })
        }
        D::Time32(unit) | D::Time64(unit) => {
            let a = arrow_cast::cast(array, &D::Int64)?.as_primitive::<Int64Type>().clone();
            Box::new(TimeEnc { a, per_us: Scale::of(*unit), style })
        }
        D::Duration(_) => {
            let a = arrow_cast::cast(array, &D::Int64)?.as_primitive::<Int64Type>().clone();
            Box::new(IntEnc { a, quoted: !p })
        }
        D::Interval(unit) => Box::new(IntervalEnc { a: intervals(array, *unit), style }),
        D::List(f) => {
            let a = array.as_list::<i32>();
            Box::new(ListEnc::new(Ranges::Offsets32(a.offsets().clone()), a.values(), f, style)?)
        }
        D::LargeList(f) => {
            let a = array.as_list::<i64>();
            Box::new(ListEnc::new(Ranges::Offsets64(a.offsets().clone()), a.values(), f, style)?)
        }
        D::ListView(f) => {
            let a = array.as_list_view::<i32>();
            let ranges = Ranges::View32(a.offsets().clone(), a.sizes().clone());
            Box::new(ListEnc::new(ranges, a.values(), f, style)?)
        }
        D::LargeListView(f) => {
            let a = array.as_list_view::<i64>();
            let ranges = Ranges::View64(a.offsets().clone(), a.sizes().clone());
            Box::new(ListEnc::new(ranges, a.values(), f, style)?)
        }
        D::FixedSizeList(f, n) => {
            let a = array.as_fixed_size_list();
            Box::new(ListEnc::new(Ranges::Fixed(*n as usize), a.values(), f, style)?)
        }
        D::Map(f, _) => {
            let a = array.as_map();
            let entries: ArrayRef = Arc::new(a.entries().clone());
            Box::new(ListEnc::new(Ranges::Offsets32(a.offsets().clone()), &entries, f, style)?)
        }
        // An interval (the decoder's struct of PostgreSQL's fields): printed as intervals are.
        D::Struct(f) if crate::types::is_interval_struct(f) => {
            Box::new(IntervalEnc { a: interval_structs(array), style })
        }
        D::Struct(_) => Box::new(StructEnc::new(array.as_struct(), style)?),
        // Anything else: Arrow's own text of the value, so that the line is still printed.
        _ => {
            let formatter = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())?;
            let texts: Vec<String> = (0..array.len()).map(|i| formatter.value(i).to_string()).collect();
            Box::new(TextEnc { texts, style })
        }
    })
}

struct NullEnc;

impl Encode for NullEnc {
    fn encode(&mut self, _: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(b"null");
    }
}

struct BoolEnc(BooleanArray);

impl Encode for BoolEnc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.0.value(i) { b"true" } else { b"false" });
    }
}

/// Integers; 64-bit ones are strings in JSON (`quoted`), which a double cannot hold.
struct IntEnc<T: ArrowPrimitiveType> {
    a: PrimitiveArray<T>,
    quoted: bool,
}

impl<T: ArrowPrimitiveType> Encode for IntEnc<T>
where
    T::Native: Into<i128>,
{
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        let v: i128 = self.a.value(i).into();
        if self.quoted {
            out.push(b'"');
            text::int128(out, v);
            out.push(b'"');
        } else {
            text::int128(out, v);
        }
    }
}

struct FloatEnc<T: ArrowPrimitiveType> {
    a: PrimitiveArray<T>,
    style: Style,
    scratch: String,
}

/// Floats of every width as the f64 Python holds them (`float(np.float32(0.1))`).
trait ToF64 {
    fn to_f64(self) -> f64;
}

impl ToF64 for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl ToF64 for f64 {
    fn to_f64(self) -> f64 {
        self
    }
}

impl<T: ArrowPrimitiveType> Encode for FloatEnc<T>
where
    T::Native: ToF64,
{
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        let v = self.a.value(i).to_f64();
        if v.is_finite() {
            text::py_float(out, v, &mut self.scratch);
        } else {
            let name = text::non_finite(v);
            self.style.raw(out, |o| o.extend_from_slice(name.as_bytes()));
        }
    }
}

struct DecimalEnc<T: ArrowPrimitiveType> {
    a: PrimitiveArray<T>,
    scale: i8,
    style: Style,
}

impl<T: ArrowPrimitiveType> Encode for DecimalEnc<T>
where
    T::Native: std::fmt::Display,
{
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        use std::io::Write as _;
        // The unscaled integer's digits, then the point placed by the scale.
        let mut digits = [0u8; 80];
        let mut cursor = std::io::Cursor::new(&mut digits[..]);
        let _ = write!(cursor, "{}", self.a.value(i));
        let n = cursor.position() as usize;
        let unscaled = std::str::from_utf8(&digits[..n]).unwrap_or("0");
        let scale = self.scale;
        self.style.raw(out, |o| text::decimal(o, unscaled, scale));
    }
}

/// Byte arrays of text: `value(i)` as `&str`.
trait StrAt {
    fn str_at(&self, i: usize) -> &str;
}

impl<O: arrow_array::OffsetSizeTrait> StrAt for GenericByteArray<GenericStringType<O>> {
    fn str_at(&self, i: usize) -> &str {
        self.value(i)
    }
}

impl StrAt for GenericByteViewArray<StringViewType> {
    fn str_at(&self, i: usize) -> &str {
        self.value(i)
    }
}

struct StrEnc<A> {
    a: A,
    style: Style,
}

impl<A: StrAt + Send> Encode for StrEnc<A> {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        self.style.text(out, self.a.str_at(i));
    }
}

/// Byte arrays of binary values: `value(i)` as `&[u8]`.
trait BytesAt {
    fn bytes_at(&self, i: usize) -> &[u8];
}

impl<O: arrow_array::OffsetSizeTrait> BytesAt for GenericByteArray<GenericBinaryType<O>> {
    fn bytes_at(&self, i: usize) -> &[u8] {
        self.value(i)
    }
}

impl BytesAt for GenericByteViewArray<BinaryViewType> {
    fn bytes_at(&self, i: usize) -> &[u8] {
        self.value(i)
    }
}

impl BytesAt for FixedSizeBinaryArray {
    fn bytes_at(&self, i: usize) -> &[u8] {
        self.value(i)
    }
}

/// bytea: hex in JSON, `\x` hex in the pretty format (cut after `max_chars / 2` bytes).
struct BinEnc<A> {
    a: A,
    style: Style,
}

impl<A: BytesAt + Send> Encode for BinEnc<A> {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        let bytes = self.a.bytes_at(i);
        if self.style.pretty {
            text::pretty_hex(out, bytes, self.style.max_chars / 2);
        } else {
            out.push(b'"');
            text::hex(out, bytes);
            out.push(b'"');
        }
    }
}

struct UuidEnc {
    a: FixedSizeBinaryArray,
    style: Style,
}

impl Encode for UuidEnc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        let q = if self.style.pretty { b'\'' } else { b'"' };
        out.push(q);
        text::uuid(out, self.a.value(i));
        out.push(q);
    }
}

/// PostgreSQL's ±infinity dates and timestamps: the extreme values of the Arrow type.
fn infinity(out: &mut Vec<u8>, style: Style, positive: bool) {
    style.raw(out, |o| o.extend_from_slice(if positive { b"infinity" } else { b"-infinity" }));
}

struct Date32Enc {
    a: PrimitiveArray<Date32Type>,
    style: Style,
}

impl Encode for Date32Enc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        match self.a.value(i) {
            i32::MAX => infinity(out, self.style, true),
            i32::MIN | crate::types::DATE32_NEG_INFINITY => infinity(out, self.style, false),
            days => self.style.raw(out, |o| text::iso_date(o, days as i128)),
        }
    }
}

struct Date64Enc {
    a: PrimitiveArray<Date64Type>,
    style: Style,
}

impl Encode for Date64Enc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        let days = (self.a.value(i) as i128).div_euclid(86_400_000);
        self.style.raw(out, |o| text::iso_date(o, days));
    }
}

/// A temporal unit as a factor to or from microseconds.
#[derive(Clone, Copy)]
enum Scale {
    Mul(i128),
    Div(i128),
}

impl Scale {
    fn of(unit: TimeUnit) -> Scale {
        match unit {
            TimeUnit::Second => Scale::Mul(1_000_000),
            TimeUnit::Millisecond => Scale::Mul(1000),
            TimeUnit::Microsecond => Scale::Mul(1),
            TimeUnit::Nanosecond => Scale::Div(1000),
        }
    }

    fn to_us(self, v: i64) -> i128 {
        match self {
            Scale::Mul(m) => v as i128 * m,
            Scale::Div(d) => (v as i128).div_euclid(d),
        }
    }
}

struct TimestampEnc {
    a: PrimitiveArray<Int64Type>,
    per_us: Scale,
    utc: bool,
    style: Style,
}

impl Encode for TimestampEnc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        match self.a.value(i) {
            i64::MAX => infinity(out, self.style, true),
            i64::MIN | crate::types::TIMESTAMP_NEG_INFINITY => infinity(out, self.style, false),
            v => {
                let us = self.per_us.to_us(v);
                let sep = if self.style.pretty { b' ' } else { b'T' };
                let utc = self.utc;
                self.style.raw(out, |o| text::iso_timestamp(o, us, utc, sep));
            }
        }
    }
}

struct TimeEnc {
    a: PrimitiveArray<Int64Type>,
    per_us: Scale,
    style: Style,
}

impl Encode for TimeEnc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        let us = self.per_us.to_us(self.a.value(i));
        self.style.raw(out, |o| text::iso_time(o, us));
    }
}

/// Intervals of every unit as months, days and nanoseconds.
fn intervals(array: &ArrayRef, unit: IntervalUnit) -> Vec<(i32, i32, i128)> {
    intervals_mdn(array, unit).into_iter().map(|v| (v.months, v.days, v.nanoseconds as i128)).collect()
}

/// The decoder's interval structs (PostgreSQL's months, days and microseconds) as months,
/// days and nanoseconds: printed as month_day_nano intervals are, ±infinity (a time part
/// of i64 max/min) kept as i64 max/min nanoseconds.
fn interval_structs(array: &ArrayRef) -> Vec<(i32, i32, i128)> {
    let s = array.as_struct();
    let (m, d, us) = (
        s.column(0).as_primitive::<Int32Type>(),
        s.column(1).as_primitive::<Int32Type>(),
        s.column(2).as_primitive::<Int64Type>(),
    );
    (0..s.len())
        .map(|i| {
            let us = us.value(i);
            let ns = if us == i64::MAX || us == i64::MIN { us as i128 } else { us as i128 * 1000 };
            (m.value(i), d.value(i), ns)
        })
        .collect()
}

fn intervals_mdn(array: &ArrayRef, unit: IntervalUnit) -> Vec<IntervalMonthDayNano> {
    match unit {
        IntervalUnit::MonthDayNano => array.as_primitive::<IntervalMonthDayNanoType>().values().to_vec(),
        IntervalUnit::YearMonth => array
            .as_primitive::<IntervalYearMonthType>()
            .values()
            .iter()
            .map(|&m| IntervalMonthDayNano::new(m, 0, 0))
            .collect(),
        IntervalUnit::DayTime => array
            .as_primitive::<IntervalDayTimeType>()
            .values()
            .iter()
            .map(|v| IntervalMonthDayNano::new(0, v.days, v.milliseconds as i64 * 1_000_000))
            .collect(),
    }
}

/// Months, days and nanoseconds (i128: a struct's microseconds may exceed i64 nanoseconds).
struct IntervalEnc {
    a: Vec<(i32, i32, i128)>,
    style: Style,
}

impl Encode for IntervalEnc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        let (months, days, nanoseconds) = self.a[i];
        if self.style.pretty {
            // `1 mons 2 days 03:04:05`, PostgreSQL's postgres IntervalStyle in one shape.
            text::int(out, months as i64);
            out.extend_from_slice(b" mons ");
            text::int(out, days as i64);
            out.extend_from_slice(b" days ");
            if nanoseconds < 0 {
                out.push(b'-');
            }
            text::iso_time(out, nanoseconds.abs() / 1000);
        } else {
            out.extend_from_slice(b"{\"months\": ");
            text::int(out, months as i64);
            out.extend_from_slice(b", \"days\": ");
            text::int(out, days as i64);
            out.extend_from_slice(b", \"nanoseconds\": \"");
            out.extend_from_slice(nanoseconds.to_string().as_bytes());
            out.extend_from_slice(b"\"}");
        }
    }
}

/// Where each row's elements lie in a list's values.
enum Ranges {
    Offsets32(OffsetBuffer<i32>),
    Offsets64(OffsetBuffer<i64>),
    View32(ScalarBuffer<i32>, ScalarBuffer<i32>),
    View64(ScalarBuffer<i64>, ScalarBuffer<i64>),
    Fixed(usize),
}

impl Ranges {
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        match self {
            Ranges::Offsets32(o) => o[i] as usize..o[i + 1] as usize,
            Ranges::Offsets64(o) => o[i] as usize..o[i + 1] as usize,
            Ranges::View32(o, s) => o[i] as usize..(o[i] + s[i]) as usize,
            Ranges::View64(o, s) => o[i] as usize..(o[i] + s[i]) as usize,
            Ranges::Fixed(n) => i * n..(i + 1) * n,
        }
    }
}

/// `[a, b]` in both formats.
struct ListEnc {
    ranges: Ranges,
    values: Column,
}

impl ListEnc {
    fn new(ranges: Ranges, values: &ArrayRef, field: &Field, style: Style) -> Result<ListEnc, ArrowError> {
        Ok(ListEnc { ranges, values: Column::new(values, Some(field), style)? })
    }
}

impl Encode for ListEnc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        out.push(b'[');
        for (n, j) in self.ranges.range(i).enumerate() {
            if n > 0 {
                out.extend_from_slice(b", ");
            }
            self.values.write(j, out);
        }
        out.push(b']');
    }
}

/// `{"a": 1, "b": 2}` in JSON, `(a=1 b=2)` in the pretty format.
struct StructEnc {
    /// Each field's name, already written as it precedes its value (`"a": ` or `a=`).
    fields: Vec<(Vec<u8>, Column)>,
    pretty: bool,
}

impl StructEnc {
    fn new(array: &StructArray, style: Style) -> Result<StructEnc, ArrowError> {
        let fields = array
            .fields()
            .iter()
            .zip(array.columns())
            .map(|(f, c)| Ok((key(f.name(), style), Column::new(c, Some(f), style)?)))
            .collect::<Result<_, ArrowError>>()?;
        Ok(StructEnc { fields, pretty: style.pretty })
    }
}

/// A key and what separates it from its value: `"name": ` or `name=`.
pub(crate) fn key(name: &str, style: Style) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 4);
    if style.pretty {
        k.extend_from_slice(name.as_bytes());
        k.push(b'=');
    } else {
        text::json_str(&mut k, name);
        k.extend_from_slice(b": ");
    }
    k
}

impl Encode for StructEnc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        let (open, sep, close): (u8, &[u8], u8) = if self.pretty { (b'(', b" ", b')') } else { (b'{', b", ", b'}') };
        out.push(open);
        for (n, (k, column)) in self.fields.iter_mut().enumerate() {
            if n > 0 {
                out.extend_from_slice(sep);
            }
            out.extend_from_slice(k);
            column.write(i, out);
        }
        out.push(close);
    }
}

struct TextEnc {
    texts: Vec<String>,
    style: Style,
}

impl Encode for TextEnc {
    fn encode(&mut self, i: usize, out: &mut Vec<u8>) {
        self.style.text(out, &self.texts[i]);
    }
}
