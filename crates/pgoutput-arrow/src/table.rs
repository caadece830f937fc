//! The rows of one relation version, built column by column into a RecordBatch:
//! the published columns, then the change metadata columns.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, NullBufferBuilder, StringBuilder};
use arrow_array::{
    make_array, new_null_array, ArrayRef, Int64Array, ListArray, MapArray, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};
use pgoutput_proto::{Cell, TupleData, UncheckedTuple, PG_EPOCH_OFFSET_MICROS};

use crate::catalog::RelVersion;
use crate::error::{DecodeError, Fallible};
use crate::nulls::{null_data, zero_bytes};
use crate::types::{ColumnBuilder, Source, SpecialValues, TypeOptions};

/// Names of the metadata columns, after the published columns, in order.
pub const META_COLUMNS: [&str; 9] =
    ["_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before", "_unchanged", "_special"];
/// Added in [`EmitMode::Arrived`](crate::EmitMode::Arrived).
pub const ARRIVED_COLUMNS: [&str; 2] = ["_status", "_subxid"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Insert = 0,
    Update = 1,
    Delete = 2,
    /// A row read from the initial snapshot (COPY), before every change of the stream.
    Snapshot = 3,
}

const OP_NAMES: [&str; 4] = ["insert", "update", "delete", "snapshot"];

/// The transaction facts every row of a change carries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TxnMeta {
    pub commit_lsn: Option<u64>,
    /// PostgreSQL microseconds since 2000-01-01.
    pub commit_ts: Option<i64>,
    pub xid: u32,
    /// Arrived mode only.
    pub status: Option<&'static str>,
}

/// Where the message being decoded came from, for zero copy and error messages.
pub(crate) struct MessageCtx<'a> {
    pub base: &'a Buffer,
    pub buffer_id: u64,
    pub message: &'a [u8],
    pub lsn: u64,
    pub seq: u64,
    /// The xid carried inside a stream block (Arrived mode's `_subxid`).
    pub subxid: Option<u32>,
    /// Output values may reference `base`: it is shared by many messages (a
    /// capture's values buffer). A buffer that holds one message alone is not
    /// referenced: each would become a data block of the view arrays and keep the
    /// whole message alive for a value of a few bytes.
    pub zero_copy: bool,
}

impl MessageCtx<'_> {
    fn source(&self, value: &[u8]) -> Option<Source<'_>> {
        // Values are slices of `message`, which is a slice of `base`: their distance
        // from the start of `base` is their offset in it.
        self.zero_copy.then(|| Source {
            buffer: self.base,
            buffer_id: self.buffer_id,
            offset: value.as_ptr() as usize - self.base.as_ptr() as usize,
        })
    }

    fn offset_in_message(&self, value: &[u8]) -> usize {
        value.as_ptr() as usize - self.message.as_ptr() as usize
    }
}

fn utc() -> Option<Arc<str>> {
    Some(Arc::from("UTC"))
}

/// The Arrow field of each published column, with the pg.* metadata.
pub(crate) fn column_fields(rel: &RelVersion, builders: &[ColumnBuilder]) -> Fields {
    rel.columns
        .iter()
        .zip(builders)
        .map(|(c, b)| {
            let field = b.field(&c.name);
            let mut md = field.metadata().clone();
            md.insert("pg.key".to_string(), c.is_key.to_string());
            md.insert("pg.column_id".to_string(), c.id.to_string());
            Arc::new(field.with_metadata(md))
        })
        .collect()
}

/// The schema of a relation version's table.
pub(crate) fn table_schema(rel: &RelVersion, fields: &Fields, arrived: bool) -> SchemaRef {
    table_schema_with_before(rel, fields, fields, arrived)
}

/// The schema of a relation version's table whose `_before` children are typed apart (an
/// old row's array column that settled at another depth than the column's).
fn table_schema_with_before(rel: &RelVersion, fields: &Fields, before: &Fields, arrived: bool) -> SchemaRef {
    let mut all: Vec<FieldRef> = fields.iter().cloned().collect();
    all.extend(meta_fields(before, arrived));
    let metadata = HashMap::from([
        ("pg.relation_id".to_string(), rel.relation_id.to_string()),
        ("pg.replica_identity".to_string(), rel.replica_identity.name().to_string()),
        ("pg.table".to_string(), rel.table.to_string()),
        ("pg.version".to_string(), rel.version.to_string()),
    ]);
    Arc::new(Schema::new_with_metadata(all, metadata))
}

/// The metadata fields that follow the published columns `fields`.
pub fn meta_fields(fields: &Fields, arrived: bool) -> Vec<FieldRef> {
    let mut out = vec![
        Arc::new(Field::new("_op", DataType::Utf8, false)),
        Arc::new(Field::new("_lsn", DataType::Int64, false)),
        Arc::new(Field::new("_commit_lsn", DataType::Int64, true)),
        Arc::new(Field::new("_commit_ts", DataType::Timestamp(TimeUnit::Microsecond, utc()), true)),
        Arc::new(Field::new("_xid", DataType::Int64, false)),
        Arc::new(Field::new("_seq", DataType::Int64, false)),
        Arc::new(Field::new("_before", DataType::Struct(fields.clone()), true)),
        Arc::new(Field::new("_unchanged", unchanged_type(), false)),
        Arc::new(Field::new("_special", special_type(), true)),
    ];
    if arrived {
        out.push(Arc::new(Field::new("_status", DataType::Utf8, false)));
        out.push(Arc::new(Field::new("_subxid", DataType::Int64, true)));
    }
    out
}

/// Bytes of incoming values after which a batch is cut whatever its row count.
pub const MAX_BATCH_VALUE_BYTES: usize = 256 << 20;

/// What the metadata columns of a row hold, about.
const META_ROW_BYTES: usize = 56;

/// What an unchanged TOAST cell adds to `_unchanged`: a column name, at most 63 bytes.
const UNCHANGED_NAME_BYTES: usize = 64;

pub(crate) fn unchanged_type() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, false)))
}

/// `_special`: column name → PostgreSQL's text of a value its column cannot hold
/// ([`SpecialValues::Keep`](crate::SpecialValues::Keep)); `_before.<column>` for old values.
pub fn special_type() -> DataType {
    DataType::Map(Arc::new(Field::new("entries", DataType::Struct(special_entry_fields()), false)), false)
}

fn special_entry_fields() -> Fields {
    Fields::from(vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Utf8, true)])
}

/// The special values of the rows of a batch: entries with their row, no per-row work
/// while a batch has none (nearly always).
#[derive(Default)]
struct SpecialColumn {
    /// Row (within the batch) of each entry, in order.
    rows: Vec<u32>,
    keys: Vec<String>,
    values: Vec<String>,
}

impl SpecialColumn {
    /// An entry of the row being appended, `row` rows after the batch's first.
    fn add(&mut self, row: usize, key: String, value: String) {
        self.rows.push(row as u32);
        self.keys.push(key);
        self.values.push(value);
    }

    /// The entries of row `row` (the last) taken back.
    fn take_back(&mut self, row: usize) {
        let keep = self.rows.iter().rposition(|&r| (r as usize) < row).map_or(0, |i| i + 1);
        self.rows.truncate(keep);
        self.keys.truncate(keep);
        self.values.truncate(keep);
    }

    fn finish(&mut self, rows: usize) -> Result<ArrayRef, arrow_schema::ArrowError> {
        if self.rows.is_empty() {
            return Ok(new_null_array(&special_type(), rows));
        }
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0i32);
        let mut entries = self.rows.drain(..).peekable();
        let mut end = 0i32;
        for row in 0..rows as u32 {
            while entries.next_if_eq(&row).is_some() {
                end += 1;
            }
            offsets.push(end);
        }
        let nulls: NullBuffer = offsets.windows(2).map(|w| w[1] > w[0]).collect::<Vec<bool>>().into();
        let keys: ArrayRef = Arc::new(StringArray::from_iter_values(self.keys.drain(..)));
        let values: ArrayRef = Arc::new(StringArray::from_iter_values(self.values.drain(..)));
        let entries = StructArray::try_new(special_entry_fields(), vec![keys, values], None)?;
        let DataType::Map(field, _) = special_type() else { unreachable!("special_type is a map") };
        let map = MapArray::try_new(field, OffsetBuffer::new(ScalarBuffer::from(offsets)), entries, Some(nulls), false)?;
        Ok(Arc::new(map))
    }
}

/// A new tuple that is not well formed ([`TableBuilder::append_unchecked`]): the message's
/// parser says where and what.
#[derive(Debug)]
pub(crate) struct Malformed;

pub(crate) struct TableBuilder {
    pub rel: Arc<RelVersion>,
    pub schema: SchemaRef,
    columns: Vec<ColumnBuilder>,
    before: Vec<ColumnBuilder>,
    before_fields: Fields,
    /// Which rows carry old values; None while none of this batch does.
    before_valid: Option<BooleanBufferBuilder>,
    /// Rows without old values not yet appended to the `_before` children: a batch
    /// without any old values gets an all-null struct without per-row work.
    before_pending: usize,
    /// Some `_before` list column may still learn its depth (see `settle_before_depths`).
    before_lists_open: bool,
    ops: Vec<u8>,
    lsn: Vec<i64>,
    /// Plain vectors, so that the rows of a transaction decoded before its Commit
    /// can take the Commit's values; null (Arrived mode) per `commit_nulls`.
    commit_lsn: Vec<i64>,
    commit_ts: Vec<i64>,
    commit_nulls: NullBufferBuilder,
    /// Rows of finished transactions; those after belong to the open one.
    pub committed: usize,
    xid: Vec<i64>,
    seq: Vec<i64>,
    unchanged_offsets: Vec<i32>,
    unchanged: Vec<u16>,
    special: SpecialColumn,
    /// SpecialValues::Keep: a special value becomes a null and an entry of `_special`.
    keep_special: bool,
    /// Every column can take a value back ([`ColumnBuilder::can_truncate`]): a new tuple
    /// is walked once, into the columns ([`TableBuilder::append_unchecked`]).
    truncatable: bool,
    arrived: Option<(StringBuilder, Int64Builder)>,
    len: usize,
    /// Bytes of the values appended to this batch as they came in (see [`Self::full`]).
    value_bytes: usize,
    /// Rows of the last batch: the next one reserves that much at its first row,
    /// rather than growing (and copying) its vectors row by row.
    reserve: usize,
    /// The zeros the all-null arrays of the batches share ([`null_data`]): kept from batch
    /// to batch, since an output array only ever reads them.
    zeros: Buffer,
}

impl TableBuilder {
    pub fn new(rel: Arc<RelVersion>, opts: &TypeOptions, arrived: bool) -> Self {
        let columns: Vec<ColumnBuilder> = rel.columns.iter().map(|c| ColumnBuilder::new(&c.ty, opts)).collect();
        let before: Vec<ColumnBuilder> = rel.columns.iter().map(|c| ColumnBuilder::new(&c.ty, opts)).collect();
        let fields = column_fields(&rel, &columns);
        let schema = table_schema(&rel, &fields, arrived);
        let truncatable = columns.iter().all(|c| c.can_truncate());
        TableBuilder {
            rel,
            schema,
            columns,
            before,
            before_fields: fields,
            before_valid: None,
            before_pending: 0,
            before_lists_open: opts.learn_array_ndims,
            ops: Vec::new(),
            lsn: Vec::new(),
            commit_lsn: Vec::new(),
            commit_ts: Vec::new(),
            commit_nulls: NullBufferBuilder::new(0),
            committed: 0,
            xid: Vec::new(),
            seq: Vec::new(),
            unchanged_offsets: vec![0],
            unchanged: Vec::new(),
            special: SpecialColumn::default(),
            keep_special: opts.special_values == SpecialValues::Keep,
            truncatable,
            arrived: arrived.then(|| (StringBuilder::new(), Int64Builder::new())),
            len: 0,
            value_bytes: 0,
            reserve: 0,
            zeros: Buffer::from_vec(Vec::<u8>::new()),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Per column: whether its values can be given in their type's send format.
    pub fn send_format_columns(&self) -> Vec<bool> {
        self.columns.iter().map(|c| c.takes_send_format()).collect()
    }

    /// Whether the batch should be cut: `batch_size` rows, or [`MAX_BATCH_VALUE_BYTES`] of
    /// values, so that a batch of large values stays bounded in memory and a utf8 or
    /// binary column (32-bit offsets, without views) never passes 2 GiB.
    pub fn full(&self, batch_size: usize) -> bool {
        self.len >= batch_size || self.value_bytes >= MAX_BATCH_VALUE_BYTES
    }

    /// Bytes this batch holds, roughly: its values, and the metadata and a word per
    /// column of each row.
    pub fn memory_estimate(&self) -> usize {
        self.value_bytes + self.len * (META_ROW_BYTES + 8 * self.columns.len())
    }

    /// Appends one change. `row` fills the published columns (the new tuple, or the
    /// old one of a Delete); `old` fills `_before`. The tuples' lengths were checked
    /// against the relation when the message arrived.
    pub fn append(
        &mut self,
        op: Op,
        row: &TupleData<'_>,
        old: Option<&TupleData<'_>>,
        ctx: &MessageCtx<'_>,
        txn: &TxnMeta,
    ) -> Fallible<()> {
        self.check_lengths(row.len(), old, ctx)?;
        self.append_checked(op, row, old, ctx, txn)
    }

    /// The tuples of a change have as many values as the relation has columns.
    fn check_lengths(&self, row: usize, old: Option<&TupleData<'_>>, ctx: &MessageCtx<'_>) -> Fallible<()> {
        let n = self.columns.len();
        if row != n || old.is_some_and(|o| o.len() != n) {
            return Err(Box::new(DecodeError::Protocol {
                lsn: ctx.lsn,
                index: ctx.seq,
                kind: "change",
                message: format!(
                    "a tuple of {} values for {}, whose Relation message announced {} columns",
                    if row != n { row } else { old.map_or(0, |o| o.len()) },
                    self.rel.table,
                    n
                ),
            }));
        }
        Ok(())
    }

    /// [`append`](Self::append) of a change whose new tuple (`row`) was not walked yet: the
    /// walk of its cells into the columns is its check. `Err(Malformed)` if it is not well
    /// formed, with the builder as it was before (the cells appended already taken back).
    /// A value error in a row that is malformed further on is `Malformed` too: the
    /// message's parse error comes first, as when the tuple was walked before.
    pub fn append_unchecked(
        &mut self,
        op: Op,
        row: &UncheckedTuple<'_>,
        old: Option<&TupleData<'_>>,
        ctx: &MessageCtx<'_>,
        txn: &TxnMeta,
    ) -> Result<Fallible<()>, Malformed> {
        if let Err(e) = self.check_lengths(row.len(), old, ctx) {
            return Ok(Err(e));
        }
        if !self.truncatable {
            // A list column cannot take a value back: the tuple is checked before.
            let row = row.check().ok_or(Malformed)?;
            return Ok(self.append_checked(op, &row, old, ctx, txn));
        }
        let mut cells = row.cells();
        let appended = self.append_cells(&mut cells, op != Op::Delete, ctx);
        if appended.is_err() || !cells.is_whole() {
            return self.malformed_or(row, row.len() - cells.unread(), op, appended);
        }
        Ok(self.append_rest(op, old, ctx, txn))
    }

    /// The first `read` cells of `row` were appended, then came an error or a malformed
    /// cell: if the tuple is malformed, the row's cells are taken back; else the error
    /// stands. Out of line, the builder's state before the row recovered here rather than
    /// kept: the cell loop stays as tight as it was with the tuple walked before.
    #[cold]
    #[inline(never)]
    fn malformed_or(
        &mut self,
        row: &UncheckedTuple<'_>,
        read: usize,
        op: Op,
        appended: Fallible<()>,
    ) -> Result<Fallible<()>, Malformed> {
        if row.check().is_some() {
            return Ok(appended);
        }
        for c in &mut self.columns {
            c.truncate(self.len);
        }
        let unchanged = self.unchanged_offsets.last().copied().unwrap_or(0);
        self.unchanged.truncate(unchanged as usize);
        self.special.take_back(self.len);
        // What the cells read added to `value_bytes`, as the cell loop counts.
        for cell in row.cells().take(read) {
            self.value_bytes -= match cell {
                Cell::Text(v) | Cell::Binary(v) => v.len(),
                Cell::UnchangedToast if op != Op::Delete => UNCHANGED_NAME_BYTES,
                Cell::Null | Cell::UnchangedToast => 0,
            };
        }
        Err(Malformed)
    }

    /// [`append`](Self::append) once the lengths are checked.
    fn append_checked(
        &mut self,
        op: Op,
        row: &TupleData<'_>,
        old: Option<&TupleData<'_>>,
        ctx: &MessageCtx<'_>,
        txn: &TxnMeta,
    ) -> Fallible<()> {
        self.append_cells(row.cells(), op != Op::Delete, ctx)?;
        self.append_rest(op, old, ctx, txn)
    }

    /// What follows the published columns of a change: `_before` and the metadata columns.
    #[inline(always)]
    fn append_rest(&mut self, op: Op, old: Option<&TupleData<'_>>, ctx: &MessageCtx<'_>, txn: &TxnMeta) -> Fallible<()> {
        match old {
            Some(old) => {
                if self.before_lists_open {
                    self.settle_before_depths();
                }
                for c in &mut self.before {
                    for _ in 0..self.before_pending {
                        c.append_null();
                    }
                }
                self.before_pending = 0;
                for (i, (cell, col)) in old.cells().zip(self.before.iter_mut()).enumerate() {
                    let (v, binary, result) = match cell {
                        // An unchanged TOAST value in an old row is not sent either.
                        Cell::Null | Cell::UnchangedToast => {
                            col.append_null();
                            continue;
                        }
                        Cell::Text(v) => (v, false, col.append_text(v, ctx.source(v))),
                        Cell::Binary(v) => (v, true, col.append_binary(v, ctx.source(v))),
                    };
                    self.value_bytes += v.len();
                    if let Err(e) = result {
                        let keep = self.keep_special.then_some((&mut self.special, self.len, "_before."));
                        cell_error(&self.rel, i, col, ctx, v, binary, e, keep)?;
                    }
                }
                let len = self.len;
                let valid = self.before_valid.get_or_insert_with(|| {
                    let mut v = BooleanBufferBuilder::new(len + 1);
                    v.append_n(len, false);
                    v
                });
                valid.append(true);
            }
            None => {
                self.before_pending += 1;
                if let Some(valid) = &mut self.before_valid {
                    valid.append(false);
                }
            }
        }
        self.append_meta(op, ctx, txn);
        Ok(())
    }

    /// Appends one row of the initial snapshot: `cells` fill the published columns, no old
    /// values; `_op` is `snapshot`. The caller checked the number of cells.
    pub fn append_snapshot<'c>(
        &mut self,
        cells: impl Iterator<Item = Cell<'c>>,
        ctx: &MessageCtx<'_>,
        txn: &TxnMeta,
    ) -> Fallible<()> {
        self.append_cells(cells, true, ctx)?;
        self.before_pending += 1;
        if let Some(valid) = &mut self.before_valid {
            valid.append(false);
        }
        self.append_meta(Op::Snapshot, ctx, txn);
        Ok(())
    }

    /// The published columns of one row (`track_unchanged`: an unchanged TOAST cell is
    /// listed in `_unchanged`).
    #[inline(always)]
    fn append_cells<'c>(
        &mut self,
        cells: impl Iterator<Item = Cell<'c>>,
        track_unchanged: bool,
        ctx: &MessageCtx<'_>,
    ) -> Fallible<()> {
        if self.len == 0 && self.reserve > 0 {
            let n = std::mem::take(&mut self.reserve);
            self.ops.reserve(n);
            self.lsn.reserve(n);
            self.commit_lsn.reserve(n);
            self.commit_ts.reserve(n);
            self.xid.reserve(n);
            self.seq.reserve(n);
            self.unchanged_offsets.reserve(n);
            for c in &mut self.columns {
                c.reserve(n);
            }
        }
        for (i, (cell, col)) in cells.zip(self.columns.iter_mut()).enumerate() {
            match cell {
                Cell::Null => col.append_null(),
                Cell::UnchangedToast => {
                    col.append_null();
                    if track_unchanged {
                        self.unchanged.push(i as u16);
                        self.value_bytes += UNCHANGED_NAME_BYTES;
                    }
                }
                Cell::Text(v) => {
                    self.value_bytes += v.len();
                    if let Err(e) = col.append_text(v, ctx.source(v)) {
                        let keep = self.keep_special.then_some((&mut self.special, self.len, ""));
                        cell_error(&self.rel, i, col, ctx, v, false, e, keep)?;
                    }
                }
                Cell::Binary(v) => {
                    self.value_bytes += v.len();
                    if let Err(e) = col.append_binary(v, ctx.source(v)) {
                        let keep = self.keep_special.then_some((&mut self.special, self.len, ""));
                        cell_error(&self.rel, i, col, ctx, v, true, e, keep)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The metadata columns of the row whose published columns were just appended.
    #[inline(always)]
    fn append_meta(&mut self, op: Op, ctx: &MessageCtx<'_>, txn: &TxnMeta) {
        self.ops.push(op as u8);
        self.lsn.push(ctx.lsn as i64);
        match (txn.commit_lsn, txn.commit_ts) {
            (Some(lsn), Some(ts)) => {
                self.commit_lsn.push(lsn as i64);
                self.commit_ts.push(ts.saturating_add(PG_EPOCH_OFFSET_MICROS));
                self.commit_nulls.append_non_null();
            }
            _ => {
                self.commit_lsn.push(0);
                self.commit_ts.push(0);
                self.commit_nulls.append_null();
            }
        }
        self.xid.push(txn.xid as i64);
        self.seq.push(ctx.seq as i64);
        self.unchanged_offsets.push(self.unchanged.len() as i32);
        if let Some((status, subxid)) = &mut self.arrived {
            status.append_value(txn.status.unwrap_or("committed"));
            subxid.append_option(ctx.subxid.map(i64::from));
        }
        self.len += 1;
    }

    /// The commit LSN and time of the rows from `from` on (the open transaction's,
    /// decoded before its Commit with the values its Begin announced).
    pub fn set_commit(&mut self, from: usize, commit_lsn: u64, commit_ts: i64) {
        let ts = commit_ts.saturating_add(PG_EPOCH_OFFSET_MICROS);
        for v in self.commit_lsn.iter_mut().skip(from) {
            *v = commit_lsn as i64;
        }
        for v in self.commit_ts.iter_mut().skip(from) {
            *v = ts;
        }
    }

    /// A list column took the depth of its first non-empty array: the old values' column
    /// follows it where it still may (and the other way round), and the schema is made again.
    fn refresh_retyped(&mut self) {
        let mut retyped = false;
        for (col, before) in self.columns.iter_mut().zip(self.before.iter_mut()) {
            if !(col.take_retyped() | before.take_retyped()) {
                continue;
            }
            retyped = true;
            if let (Some((a, a_open)), Some((b, _))) = (col.list_depth(), before.list_depth()) {
                // Where both are settled at different depths, `_before` keeps its own.
                if a != b && !a_open {
                    before.renest(a);
                } else if a != b {
                    col.renest(b);
                }
                col.take_retyped();
                before.take_retyped();
            }
        }
        if retyped {
            let fields = column_fields(&self.rel, &self.columns);
            self.before_fields = column_fields(&self.rel, &self.before);
            self.schema = table_schema_with_before(&self.rel, &fields, &self.before_fields, self.arrived.is_some());
        }
    }

    /// The rows so far as a batch; the builder starts again empty.
    pub fn finish(&mut self) -> Fallible<RecordBatch> {
        self.refresh_retyped();
        self.committed = 0;
        let len = std::mem::take(&mut self.len);
        self.reserve = len;
        self.value_bytes = 0;
        let mut arrays: Vec<ArrayRef> = self.columns.iter_mut().map(|c| c.finish()).collect();
        let before_type = DataType::Struct(self.before_fields.clone());
        let valid = self.before_valid.take();
        let before: ArrayRef = if valid.is_none() || self.before.is_empty() {
            // No row of this batch carried old values (or there are no columns).
            self.before_pending = 0;
            if self.before.is_empty() {
                let nulls = valid.map(|mut v| NullBuffer::new(v.finish())).or_else(|| self.before_nulls_finish(len));
                Arc::new(StructArray::new_empty_fields(len, nulls))
            } else {
                let zeros = zero_bytes(&before_type, len);
                if self.zeros.len() < zeros {
                    self.zeros = MutableBuffer::from_len_zeroed(zeros).into();
                }
                make_array(null_data(&before_type, len, &self.zeros))
            }
        } else {
            for c in &mut self.before {
                for _ in 0..self.before_pending {
                    c.append_null();
                }
            }
            self.before_pending = 0;
            let children: Vec<ArrayRef> = self.before.iter_mut().map(|c| c.finish()).collect();
            let nulls = valid.map(|mut v| NullBuffer::new(v.finish()));
            Arc::new(
                StructArray::try_new(self.before_fields.clone(), children, nulls)
                    .map_err(|e| DecodeError::boxed_arrow(format!("_before of {}", self.rel.table), e))?,
            )
        };
        arrays.push(Arc::new(StringArray::from_iter_values(self.ops.drain(..).map(|o| OP_NAMES[o as usize]))));
        arrays.push(Arc::new(Int64Array::from(std::mem::take(&mut self.lsn))));
        let commit_nulls = self.commit_nulls.finish();
        arrays.push(Arc::new(Int64Array::new(std::mem::take(&mut self.commit_lsn).into(), commit_nulls.clone())));
        arrays.push(Arc::new(
            TimestampMicrosecondArray::new(std::mem::take(&mut self.commit_ts).into(), commit_nulls).with_timezone("UTC"),
        ));
        arrays.push(Arc::new(Int64Array::from(std::mem::take(&mut self.xid))));
        arrays.push(Arc::new(Int64Array::from(std::mem::take(&mut self.seq))));
        arrays.push(before);
        arrays.push(self.finish_unchanged()?);
        arrays.push(
            self.special.finish(len).map_err(|e| DecodeError::boxed_arrow(format!("_special of {}", self.rel.table), e))?,
        );
        if let Some((status, subxid)) = &mut self.arrived {
            arrays.push(Arc::new(status.finish()));
            arrays.push(Arc::new(subxid.finish()));
        }
        RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| DecodeError::boxed_arrow(format!("a batch of {}", self.rel.table), e))
    }

    /// Before an old row's values: a list column whose depth is settled (it holds an array,
    /// or a batch of it came out) gives that depth for good to its old values' column, which
    /// has not seen an array yet, so that an old value of another depth is a special value
    /// there as it is in the column (torture seeds 302 and 2043: a 2-D array first seen in an
    /// old row made `_before`'s column 2-D beside a 1-D column). Cheap once none is open.
    fn settle_before_depths(&mut self) {
        let mut open = false;
        for (col, before) in self.columns.iter().zip(self.before.iter_mut()) {
            match (col.list_depth(), before.list_depth()) {
                (Some((a, false)), Some((_, true))) => before.settle(a),
                (Some(_), Some((_, true))) => open = true,
                _ => {}
            }
        }
        self.before_lists_open = open;
    }

    fn before_nulls_finish(&mut self, len: usize) -> Option<NullBuffer> {
        Some(NullBuffer::new_null(len)).filter(|_| len > 0)
    }

    fn finish_unchanged(&mut self) -> Fallible<ArrayRef> {
        let names: StringArray =
            self.unchanged.drain(..).map(|i| Some(self.rel.columns[i as usize].name.as_str())).collect();
        let offsets = std::mem::replace(&mut self.unchanged_offsets, vec![0]);
        let field = Arc::new(Field::new("item", DataType::Utf8, false));
        let list = ListArray::try_new(field, OffsetBuffer::new(ScalarBuffer::from(offsets)), Arc::new(names), None)
            .map_err(|e| DecodeError::boxed_arrow(format!("_unchanged of {}", self.rel.table), e))?;
        Ok(Arc::new(list))
    }
}

/// A value the column builder refused. A special value under SpecialValues::Keep (`keep`:
/// the batch's `_special` column, the row's index in the batch and the key's prefix) is a
/// null in the column and PostgreSQL's text in `_special`; anything else is an error.
/// Out of line: the cell loop stays small.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn cell_error(
    rel: &RelVersion,
    column: usize,
    col: &mut ColumnBuilder,
    ctx: &MessageCtx<'_>,
    value: &[u8],
    binary: bool,
    err: crate::types::ValueError,
    keep: Option<(&mut SpecialColumn, usize, &str)>,
) -> Fallible<()> {
    match keep {
        Some((special, row, prefix)) if err.special => {
            col.append_null();
            let text = col.special_text(value, binary);
            special.add(row, format!("{prefix}{}", rel.columns[column].name), text);
            Ok(())
        }
        _ => Err(Box::new(value_error(rel, column, ctx, value, err.message))),
    }
}

fn value_error(rel: &RelVersion, column: usize, ctx: &MessageCtx<'_>, value: &[u8], message: String) -> DecodeError {
    DecodeError::Value {
        table: rel.table.to_string(),
        column: rel.columns[column].name.clone(),
        lsn: ctx.lsn,
        message,
        index: ctx.seq,
        offset: ctx.offset_in_message(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::RelColumn;
    use crate::types::PgColumnType;
    use pgoutput_proto::{parse_row_change, ReplicaIdentity};

    /// int4, text, int8 columns: a table whose builders take values back.
    fn builder() -> TableBuilder {
        let col = |name: &str, oid: u32, id: u32| RelColumn {
            name: name.to_string(),
            ty: PgColumnType { oid, typmod: -1, type_name: None },
            is_key: id == 0,
            id,
            attnum: None,
        };
        let rel = RelVersion {
            relation_id: 1,
            table: Arc::from("public.t"),
            table_index: 0,
            version: 1,
            replica_identity: ReplicaIdentity::Default,
            columns: vec![col("id", 23, 0), col("v", 25, 1), col("n", 20, 2)],
        };
        TableBuilder::new(Arc::new(rel), &TypeOptions::default(), false)
    }

    /// An Update without old values whose new tuple is `cells` (written as they are).
    fn update(cells: &[u8]) -> Vec<u8> {
        let mut m = vec![b'U', 0, 0, 0, 1, b'N', 0, 3];
        m.extend_from_slice(cells);
        m
    }

    fn text(v: &str) -> Vec<u8> {
        let mut c = vec![b't'];
        c.extend_from_slice(&(v.len() as i32).to_be_bytes());
        c.extend_from_slice(v.as_bytes());
        c
    }

    /// What a taken-back row must leave as it was: rows, the bytes that cut a batch, the
    /// memory estimate, `_unchanged` and `_special` entries, every column's length.
    fn state(b: &TableBuilder) -> (usize, usize, usize, usize, usize, Vec<usize>) {
        let lens = b.columns.iter().map(|c| c.len()).collect();
        (b.len, b.value_bytes, b.memory_estimate(), b.unchanged.len(), b.special.rows.len(), lens)
    }

    /// Every cut and the trailing byte of tuples with values, unchanged TOAST cells, a
    /// value the column refuses before the cut.
    #[test]
    fn a_malformed_tuple_is_taken_back_whole() {
        let txn = TxnMeta { commit_lsn: None, commit_ts: None, xid: 7, status: None };
        let rows: Vec<Vec<u8>> = vec![
            [text("1"), text("a value longer than twelve bytes"), text("10")].concat(),
            [text("2"), vec![b'u'], text("20")].concat(),
            [text("3"), vec![b'u'], text("not a number")].concat(),
            [text("x"), text("v"), vec![b'n']].concat(),
        ];
        for good_rows in 0..3 {
            for bad in &rows {
                let mut b = builder();
                let base = Buffer::from_vec(Vec::<u8>::new());
                let append = |b: &mut TableBuilder, message: &[u8]| {
                    let ctx = MessageCtx { base: &base, buffer_id: 0, message, lsn: 1, seq: 1, subxid: None, zero_copy: false };
                    let change = parse_row_change(message).expect("an update");
                    b.append_unchecked(Op::Update, &change.new.expect("a new tuple"), None, &ctx, &txn)
                };
                for _ in 0..good_rows {
                    append(&mut b, &update(&rows[0])).expect("well formed").expect("decodes");
                }
                let before = state(&b);
                let whole = update(bad);
                let mut malformed: Vec<Vec<u8>> = (8..whole.len()).map(|cut| whole[..cut].to_vec()).collect();
                malformed.push([whole.as_slice(), b"n"].concat());
                for m in malformed {
                    assert!(append(&mut b, &m).is_err(), "{m:?}");
                    assert_eq!(state(&b), before, "{m:?}");
                }
                append(&mut b, &update(&rows[0])).expect("well formed").expect("decodes");
                assert_eq!(b.finish().expect("a batch").num_rows(), good_rows + 1);
            }
        }
    }
}
