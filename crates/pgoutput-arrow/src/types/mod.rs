//! PostgreSQL values to Arrow arrays: one [`ColumnBuilder`] per published column.
//!
//! Each value arrives as the type's text output ('t' cells) or its binary send
//! format ('b' cells, `binary 'true'`). Both give the same Arrow value: the
//! text parsers and binary decoders here are tested against pairs taken from a
//! real PostgreSQL 18 (`tests/data/type_vectors.json`). The mapping of every
//! type and the rule for each special value are in `README.md` beside this file.
//!
//! This file makes a column's builder and its Arrow type and finishes its array;
//! `append.rs` decodes one value into it; `options.rs` holds the choices that type columns.

mod append;
mod array;
mod datetime;
mod interval;
mod num;
mod oid;
mod oid_table;
mod options;
mod pg_text;
mod render;
mod store;
mod value;

pub(crate) use datetime::{civil_from_days, date32_infinity};
pub use datetime::{DateOrder, DateTimeText, TimeZoneName, DATE32_NEG_INFINITY, TIMESTAMP_NEG_INFINITY};

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, FixedSizeBinaryBuilder, Float32Builder,
    Float64Builder, Int16Builder, Int32Builder, Int64Builder, IntervalMonthDayNanoBuilder,
    NullBufferBuilder, Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, ListArray, StructArray};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, FieldRef, IntervalUnit, TimeUnit};

pub use oid::builtin_type_name;
pub use pg_text::to_pg_text;
pub(crate) use oid::builtin_by_name;

use array::ArrayDecoder;
use render::StrKind;
use store::{BinStore, StrStore};
pub use value::{DatetimeRange, Source, SpecialValues, ValueError};
pub(crate) use value::{Result, Special};
pub use options::{
    interval_struct_fields, is_interval_struct, IntervalType, PgColumnType, TimeType, TypeOptions, UuidType,
};

/// How to decode one PostgreSQL type and where its values go. Decided once, at `new`.
enum Col {
    Bool(BooleanBuilder),
    Int2(Int16Builder),
    Int4(Int32Builder),
    Int8(Int64Builder),
    Oid(Int64Builder),
    Float4(Float32Builder),
    Float8(Float64Builder),
    Decimal { b: Decimal128Builder, precision: u8, scale: i8 },
    Date(Date32Builder),
    Time(Time64MicrosecondBuilder),
    /// `last`: the last ISO date of a text value.
    Timestamp { b: TimestampMicrosecondBuilder, tz: bool, last: datetime::LastDate },
    Interval(IntervalMonthDayNanoBuilder),
    IntervalStruct(Box<IntervalStructBuilder>),
    Uuid(FixedSizeBinaryBuilder),
    Bytea(BinStore),
    /// A type we do not decode, kept as the bytes that came (text or send format).
    Raw(BinStore),
    /// Utf8: the text output as sent, or the binary value rendered as that text.
    Str { kind: StrKind, out: StrStore },
    List(Box<ListCol>),
}

/// An interval as `struct<months, days, microseconds>` ([`IntervalType::Struct`]).
struct IntervalStructBuilder {
    months: Int32Builder,
    days: Int32Builder,
    micros: Int64Builder,
    nulls: NullBufferBuilder,
}

impl IntervalStructBuilder {
    fn new() -> Self {
        IntervalStructBuilder {
            months: Int32Builder::new(),
            days: Int32Builder::new(),
            micros: Int64Builder::new(),
            nulls: NullBufferBuilder::new(0),
        }
    }

    fn append_value(&mut self, v: interval::Interval) {
        self.months.append_value(v.months);
        self.days.append_value(v.days);
        self.micros.append_value(v.micros);
        self.nulls.append_non_null();
    }

    fn append_null(&mut self) {
        self.months.append_null();
        self.days.append_null();
        self.micros.append_null();
        self.nulls.append_null();
    }

    fn finish(&mut self) -> ArrayRef {
        let children: Vec<ArrayRef> =
            vec![Arc::new(self.months.finish()), Arc::new(self.days.finish()), Arc::new(self.micros.finish())];
        Arc::new(StructArray::new(interval_struct_fields(), children, self.nulls.finish()))
    }
}

struct ListCol {
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
    child: ColumnBuilder,
    field: FieldRef,
    elem_oid: u32,
    /// Dimensions below and including this level.
    ndims: usize,
    /// How the element builders were made, to make them again at another depth.
    opts: TypeOptions,
    /// A batch with rows came out: the depth is part of a published schema.
    published: bool,
}

/// Builds the Arrow array of one column, value by value.
pub struct ColumnBuilder {
    col: Col,
    data_type: DataType,
    oid: u32,
    /// The type decoded: `oid`, or the base type of a domain.
    base_oid: u32,
    typmod: i32,
    type_name: String,
    extension: Option<&'static str>,
    special: SpecialValues,
    /// What text-mode dates and times need besides their text.
    datetime: DateTimeText,
    datetime_range: DatetimeRange,
    len: usize,
    /// The Arrow type changed since the builder was made (a list column took the depth
    /// of its first non-empty array).
    retyped: bool,
    /// Reused by array parsing and binary-to-text rendering.
    scratch: Scratch,
    /// The values kept by [`ColumnBuilder::truncate`], before those of the builder.
    kept: Option<ArrayRef>,
}

#[derive(Default)]
struct Scratch {
    text: String,
    bytes: Vec<u8>,
    array: Option<Box<ArrayDecoder>>,
}

impl ColumnBuilder {
    pub fn new(ty: &PgColumnType, opts: &TypeOptions) -> Self {
        let ndims = opts.array_ndims;
        if builtin_type_name(ty.oid).is_none() {
            // A domain over a built-in type: decoded as its base type, described as itself.
            if let Some(base) = ty.type_name.as_deref().and_then(oid::builtin_by_name) {
                let mut b = Self::build(base, ty.typmod, None, opts, ndims);
                b.oid = ty.oid;
                b.type_name = ty.type_name.clone().unwrap_or_default();
                return b;
            }
        }
        Self::build(ty.oid, ty.typmod, ty.type_name.as_deref(), opts, ndims)
    }

    fn build(oid: u32, typmod: i32, given_name: Option<&str>, opts: &TypeOptions, ndims: usize) -> Self {
        let type_name = match builtin_type_name(oid) {
            Some(n) => n.to_string(),
            None => given_name.unwrap_or("").to_string(),
        };
        let text_special = opts.special_values == SpecialValues::Text;
        let str_col = |kind: StrKind| Col::Str { kind, out: StrStore::new(opts.views) };
        let mut extension = None;
        let col = if let (Some(_), 0) = (oid::array_element(oid), ndims) {
            // Arrays as array_out's literal: any shape fits.
            match StrKind::for_oid(oid) {
                StrKind::Unrendered if opts.binary => Col::Raw(BinStore::new(opts.views)),
                kind => str_col(kind),
            }
        } else if let Some(elem) = oid::array_element(oid) {
            let child = ColumnBuilder::build_elem(elem, typmod, opts, ndims);
            let field = Arc::new(child.field("item"));
            Col::List(Box::new(ListCol {
                offsets: vec![0],
                nulls: NullBufferBuilder::new(0),
                child,
                field,
                elem_oid: elem,
                ndims,
                opts: opts.clone(),
                published: false,
            }))
        } else {
            match oid {
                oid::BOOL => Col::Bool(BooleanBuilder::new()),
                oid::INT2 => Col::Int2(Int16Builder::new()),
                oid::INT4 => Col::Int4(Int32Builder::new()),
                oid::INT8 => Col::Int8(Int64Builder::new()),
                oid::OID => Col::Oid(Int64Builder::new()),
                oid::FLOAT4 => Col::Float4(Float32Builder::new()),
                oid::FLOAT8 => Col::Float8(Float64Builder::new()),
                oid::NUMERIC => match num::decimal_type(typmod) {
                    Some((precision, scale)) if !text_special => Col::Decimal {
                        b: Decimal128Builder::new()
                            .with_precision_and_scale(precision, scale)
                            .unwrap_or_default(),
                        precision,
                        scale,
                    },
                    _ => str_col(StrKind::Numeric),
                },
                oid::DATE if !text_special => Col::Date(Date32Builder::new()),
                oid::TIME if !text_special && opts.time == TimeType::Time64 => Col::Time(Time64MicrosecondBuilder::new()),
                oid::TIMESTAMP if !text_special => {
                    Col::Timestamp { b: TimestampMicrosecondBuilder::new(), tz: false, last: Default::default() }
                }
                oid::TIMESTAMPTZ if !text_special => Col::Timestamp {
                    b: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
                    tz: true,
                    last: Default::default(),
                },
                oid::INTERVAL if !text_special => match opts.interval {
                    IntervalType::Struct => Col::IntervalStruct(Box::new(IntervalStructBuilder::new())),
                    IntervalType::MonthDayNano => Col::Interval(IntervalMonthDayNanoBuilder::new()),
                },
                oid::UUID if opts.uuid == UuidType::FixedSizeBinary => {
                    extension = Some("arrow.uuid");
                    Col::Uuid(FixedSizeBinaryBuilder::new(16))
                }
                oid::BYTEA => Col::Bytea(BinStore::new(opts.views)),
                // Plain Utf8 (pg.type_name says json): pyspark refuses the arrow.json
                // extension type, and pyarrow neither sorts nor groups by it.
                oid::JSON | oid::JSONB => str_col(StrKind::for_oid(oid)),
                _ => {
                    let kind = StrKind::for_oid(oid);
                    // aclitem has no send function: even a binary stream sends its text.
                    if kind == StrKind::Unrendered && opts.binary && oid != oid::ACLITEM {
                        Col::Raw(BinStore::new(opts.views))
                    } else {
                        str_col(kind)
                    }
                }
            }
        };
        let data_type = match &col {
            Col::Bool(_) => DataType::Boolean,
            Col::Int2(_) => DataType::Int16,
            Col::Int4(_) => DataType::Int32,
            Col::Int8(_) => DataType::Int64,
            // Int64: every oid (u32) fits, and Spark, which has no unsigned types, takes it.
            Col::Oid(_) => DataType::Int64,
            Col::Float4(_) => DataType::Float32,
            Col::Float8(_) => DataType::Float64,
            Col::Decimal { precision, scale, .. } => DataType::Decimal128(*precision, *scale),
            Col::Date(_) => DataType::Date32,
            Col::Time(_) => DataType::Time64(TimeUnit::Microsecond),
            Col::Timestamp { tz, .. } => {
                DataType::Timestamp(TimeUnit::Microsecond, tz.then(|| Arc::from("UTC")))
            }
            Col::Interval(_) => DataType::Interval(IntervalUnit::MonthDayNano),
            Col::IntervalStruct(_) => DataType::Struct(interval_struct_fields()),
            Col::Uuid(_) => DataType::FixedSizeBinary(16),
            Col::Bytea(s) | Col::Raw(s) => s.data_type(),
            Col::Str { out, .. } => out.data_type(),
            Col::List(l) => DataType::List(l.field.clone()),
        };
        ColumnBuilder {
            col,
            data_type,
            oid,
            base_oid: oid,
            typmod,
            type_name,
            extension,
            special: opts.special_values,
            datetime: DateTimeText { order: opts.date_order, timezone: opts.timezone },
            datetime_range: opts.datetime_range,
            len: 0,
            retyped: false,
            scratch: Scratch::default(),
            kept: None,
        }
    }

    /// The builder of the elements of an array type: one level of list per dimension.
    fn build_elem(elem: u32, typmod: i32, opts: &TypeOptions, ndims: usize) -> ColumnBuilder {
        if ndims > 1 {
            // A nested level: same array type, one dimension less.
            let array_oid = oid::array_of(elem).unwrap_or(0);
            let mut b = ColumnBuilder::build(array_oid, typmod, None, opts, ndims - 1);
            if array_oid == 0 {
                b.oid = 0;
            }
            b
        } else {
            ColumnBuilder::build(elem, typmod, None, opts, 1)
        }
    }

    /// Whether a value of this column can be given in its type's send format (COPY's binary
    /// format): false for a type whose binary value this crate can neither render as the
    /// text the column holds nor keep as bytes (a text-mode column of such a type, or an
    /// array of it), whose value must be read as text (`col::text`).
    pub fn takes_send_format(&self) -> bool {
        match &self.col {
            Col::Str { kind: StrKind::Unrendered, .. } => false,
            Col::List(l) => l.child.takes_send_format(),
            _ => true,
        }
    }

    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// The Arrow field: name, type, nullable=true, and metadata "pg.type_oid", "pg.type_name",
    /// "pg.typmod" (and ARROW:extension:name = arrow.uuid for uuid as FixedSizeBinary).
    pub fn field(&self, name: &str) -> Field {
        let mut md = HashMap::new();
        md.insert("pg.type_oid".to_string(), self.oid.to_string());
        md.insert("pg.type_name".to_string(), self.type_name.clone());
        md.insert("pg.typmod".to_string(), self.typmod.to_string());
        if let Some(ext) = self.extension {
            md.insert("ARROW:extension:name".to_string(), ext.to_string());
            md.insert("ARROW:extension:metadata".to_string(), String::new());
        }
        Field::new(name, self.data_type.clone(), true).with_metadata(md)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The depth of a list column, and whether it may still change (see
    /// [`TypeOptions::learn_array_ndims`]); None for other columns.
    pub fn list_depth(&self) -> Option<(usize, bool)> {
        match &self.col {
            Col::List(l) => Some((l.ndims, l.can_renest())),
            _ => None,
        }
    }

    /// Makes a list column `ndims` deep if its depth may still change; true if it is now.
    pub fn renest(&mut self, ndims: usize) -> bool {
        let Col::List(l) = &mut self.col else { return false };
        if l.ndims == ndims {
            return true;
        }
        if !l.can_renest() || ndims == 0 {
            return false;
        }
        // Every row so far is null or an empty array: offsets and nulls stay as they are.
        l.child = ColumnBuilder::build_elem(l.elem_oid, self.typmod, &l.opts, ndims);
        l.field = Arc::new(l.child.field("item"));
        l.ndims = ndims;
        self.data_type = DataType::List(l.field.clone());
        self.retyped = true;
        true
    }

    /// Makes a list column `ndims` deep for good, if its depth may still change (an old
    /// values' column whose column's depth came out in a batch before it saw an array).
    pub fn settle(&mut self, ndims: usize) {
        if self.renest(ndims) {
            if let Col::List(l) = &mut self.col {
                l.published = true;
            }
        }
    }

    /// Whether the Arrow type changed since the last call (see [`ColumnBuilder::renest`]).
    pub fn take_retyped(&mut self) -> bool {
        std::mem::take(&mut self.retyped)
    }

    /// Makes room for `rows` values (the last batch's count) before the first value of a
    /// batch, so that the batch does not grow its buffers, and copy them, as values come.
    /// Only plain primitive and utf8 columns: the builders of the others stay as they are.
    pub fn reserve(&mut self, rows: usize) {
        if self.len > 0 {
            return;
        }
        match &mut self.col {
            Col::Bool(b) => *b = BooleanBuilder::with_capacity(rows),
            Col::Int2(b) => *b = Int16Builder::with_capacity(rows),
            Col::Int4(b) => *b = Int32Builder::with_capacity(rows),
            Col::Int8(b) | Col::Oid(b) => *b = Int64Builder::with_capacity(rows),
            Col::Float4(b) => *b = Float32Builder::with_capacity(rows),
            Col::Float8(b) => *b = Float64Builder::with_capacity(rows),
            Col::Decimal { b, precision, scale } => {
                *b = Decimal128Builder::with_capacity(rows)
                    .with_precision_and_scale(*precision, *scale)
                    .unwrap_or_default()
            }
            Col::Date(b) => *b = Date32Builder::with_capacity(rows),
            Col::Time(b) => *b = Time64MicrosecondBuilder::with_capacity(rows),
            Col::Timestamp { b, tz, .. } => {
                let fresh = TimestampMicrosecondBuilder::with_capacity(rows);
                *b = if *tz { fresh.with_timezone("UTC") } else { fresh };
            }
            Col::Str { out, .. } => out.reserve(rows),
            _ => {}
        }
    }

    /// Finishes the array built so far and resets the builder for the next batch.
    pub fn finish(&mut self) -> ArrayRef {
        let built = self.finish_built();
        match self.kept.take() {
            None => built,
            // Arrays of one type, far from 2 GiB of values (batches are cut long before).
            Some(kept) => arrow_select::concat::concat(&[kept.as_ref(), built.as_ref()])
                .unwrap_or_else(|e| panic!("the kept values of a column and the later ones: {e}")),
        }
    }

    /// Whether [`ColumnBuilder::truncate`] can take values back: not for a list column,
    /// whose depth a value may have settled.
    pub fn can_truncate(&self) -> bool {
        !matches!(self.col, Col::List(_))
    }

    /// Keeps the first `len` values and drops the rest (a row found malformed after some of
    /// its cells were appended). Arrow's builders cannot drop values: the values so far are
    /// finished, and the first `len` kept as an array ahead of the builder's next values.
    /// Cold: a malformed message. Not for a list column ([`ColumnBuilder::can_truncate`]).
    #[cold]
    pub fn truncate(&mut self, len: usize) {
        if self.len <= len || !self.can_truncate() {
            return;
        }
        let all = self.finish();
        self.kept = (len > 0).then(|| all.slice(0, len));
        self.len = len;
    }

    /// Finishes the builder's own values (without those kept by `truncate`).
    fn finish_built(&mut self) -> ArrayRef {
        self.len = 0;
        match &mut self.col {
            Col::Bool(b) => Arc::new(b.finish()),
            Col::Int2(b) => Arc::new(b.finish()),
            Col::Int4(b) => Arc::new(b.finish()),
            Col::Int8(b) => Arc::new(b.finish()),
            Col::Oid(b) => Arc::new(b.finish()),
            Col::Float4(b) => Arc::new(b.finish()),
            Col::Float8(b) => Arc::new(b.finish()),
            Col::Decimal { b, .. } => Arc::new(b.finish()),
            Col::Date(b) => Arc::new(b.finish()),
            Col::Time(b) => Arc::new(b.finish()),
            Col::Timestamp { b, .. } => Arc::new(b.finish()),
            Col::Interval(b) => Arc::new(b.finish()),
            Col::IntervalStruct(b) => b.finish(),
            Col::Uuid(b) => Arc::new(b.finish()),
            Col::Bytea(s) | Col::Raw(s) => s.finish(),
            Col::Str { out, .. } => out.finish(),
            Col::List(l) => l.finish(),
        }
    }
}


impl ListCol {
    fn can_renest(&self) -> bool {
        self.opts.learn_array_ndims && !self.published && self.child.len == 0
    }

    /// The builder of the scalar elements, below every list level.
    fn innermost(&mut self) -> &mut ColumnBuilder {
        let mut b = &mut self.child;
        loop {
            match b.col {
                Col::List(ref mut l) => b = &mut l.child,
                _ => return b,
            }
        }
    }

    /// Appends one array of shape `dims` (outermost first; empty for an empty array)
    /// whose elements have already been appended to the innermost builder.
    fn push_shape(&mut self, dims: &[usize]) {
        self.nulls.append_non_null();
        let first = dims.first().copied().unwrap_or(0);
        let last = self.offsets.last().copied().unwrap_or(0);
        self.offsets.push(last.saturating_add(first as i32));
        if dims.len() > 1 {
            let mut level = &mut self.child;
            let mut count = first;
            for &n in &dims[1..] {
                let Col::List(l) = &mut level.col else { return };
                for _ in 0..count {
                    l.nulls.append_non_null();
                    let last = l.offsets.last().copied().unwrap_or(0);
                    l.offsets.push(last.saturating_add(n as i32));
                }
                level.len += count;
                count *= n;
                level = &mut l.child;
            }
        }
    }

    fn finish(&mut self) -> ArrayRef {
        self.published |= self.offsets.len() > 1;
        let values = self.child.finish();
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let nulls = self.nulls.finish();
        // The offsets are monotonic and end at the child's length by construction.
        let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
        match ListArray::try_new(self.field.clone(), offsets, values, nulls) {
            Ok(a) => Arc::new(a),
            Err(e) => panic!("list offsets inconsistent with elements: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
