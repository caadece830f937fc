//! The three tables that are not relations: truncates, logical decoding messages
//! and transactions.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Int64Builder, ListBuilder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use pgoutput_proto::PG_EPOCH_OFFSET_MICROS;

use crate::error::{DecodeError, Fallible};
use crate::table::{TxnMeta, MAX_BATCH_VALUE_BYTES};

fn ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")))
}

fn ts_builder() -> TimestampMicrosecondBuilder {
    TimestampMicrosecondBuilder::new().with_timezone("UTC")
}

fn pg_ts(ts: Option<i64>) -> Option<i64> {
    ts.map(|t| t.saturating_add(PG_EPOCH_OFFSET_MICROS))
}

fn txn_fields(arrived: bool) -> Vec<Field> {
    let mut f = vec![
        Field::new("_lsn", DataType::Int64, false),
        Field::new("_commit_lsn", DataType::Int64, true),
        Field::new("_commit_ts", ts_type(), true),
        Field::new("_xid", DataType::Int64, true),
        Field::new("_seq", DataType::Int64, false),
    ];
    if arrived {
        f.push(Field::new("_status", DataType::Utf8, false));
    }
    f
}

/// Schema of the Truncates table.
pub fn truncates_schema(arrived: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("relations", DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))), false),
        Field::new("cascade", DataType::Boolean, false),
        Field::new("restart_identity", DataType::Boolean, false),
    ];
    fields.extend(txn_fields(arrived));
    Arc::new(Schema::new(fields))
}

/// Schema of the Messages table (logical decoding messages).
pub fn messages_schema(arrived: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("prefix", DataType::Utf8, false),
        Field::new("content", DataType::Binary, false),
        Field::new("transactional", DataType::Boolean, false),
    ];
    fields.extend(txn_fields(arrived));
    Arc::new(Schema::new(fields))
}

/// Schema of the Transactions table.
pub fn transactions_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("xid", DataType::Int64, false),
        Field::new("begin_lsn", DataType::Int64, true),
        Field::new("commit_lsn", DataType::Int64, true),
        Field::new("end_lsn", DataType::Int64, true),
        Field::new("commit_ts", ts_type(), true),
        Field::new("origin", DataType::Utf8, true),
        Field::new("origin_lsn", DataType::Int64, true),
        Field::new("gid", DataType::Utf8, true),
        Field::new("outcome", DataType::Utf8, false),
        Field::new("streamed", DataType::Boolean, false),
        Field::new("changes", DataType::Int64, false),
        Field::new("_seq", DataType::Int64, false),
    ]))
}

/// The transaction columns shared by Truncates and Messages.
struct TxnColumns {
    lsn: Int64Builder,
    commit_lsn: Int64Builder,
    commit_ts: TimestampMicrosecondBuilder,
    xid: Int64Builder,
    seq: Int64Builder,
    status: Option<StringBuilder>,
}

impl TxnColumns {
    fn new(arrived: bool) -> Self {
        TxnColumns {
            lsn: Int64Builder::new(),
            commit_lsn: Int64Builder::new(),
            commit_ts: ts_builder(),
            xid: Int64Builder::new(),
            seq: Int64Builder::new(),
            status: arrived.then(StringBuilder::new),
        }
    }

    fn append(&mut self, lsn: u64, seq: u64, txn: Option<&TxnMeta>) {
        self.lsn.append_value(lsn as i64);
        self.commit_lsn.append_option(txn.and_then(|t| t.commit_lsn).map(|l| l as i64));
        self.commit_ts.append_option(pg_ts(txn.and_then(|t| t.commit_ts)));
        self.xid.append_option(txn.map(|t| t.xid as i64));
        self.seq.append_value(seq as i64);
        if let Some(status) = &mut self.status {
            status.append_value(txn.and_then(|t| t.status).unwrap_or("committed"));
        }
    }

    fn finish(&mut self, arrays: &mut Vec<ArrayRef>) {
        arrays.push(Arc::new(self.lsn.finish()));
        arrays.push(Arc::new(self.commit_lsn.finish()));
        arrays.push(Arc::new(self.commit_ts.finish()));
        arrays.push(Arc::new(self.xid.finish()));
        arrays.push(Arc::new(self.seq.finish()));
        if let Some(status) = &mut self.status {
            arrays.push(Arc::new(status.finish()));
        }
    }
}

pub(crate) struct TruncatesBuilder {
    schema: SchemaRef,
    relations: ListBuilder<StringBuilder>,
    cascade: BooleanBuilder,
    restart_identity: BooleanBuilder,
    txn: TxnColumns,
    len: usize,
}

impl TruncatesBuilder {
    pub fn new(arrived: bool) -> Self {
        TruncatesBuilder {
            schema: truncates_schema(arrived),
            relations: ListBuilder::new(StringBuilder::new())
                .with_field(Arc::new(Field::new("item", DataType::Utf8, false))),
            cascade: BooleanBuilder::new(),
            restart_identity: BooleanBuilder::new(),
            txn: TxnColumns::new(arrived),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// `batch_size` rows, or names enough that the names column nears its 2 GiB.
    pub fn full(&self, batch_size: usize) -> bool {
        self.len >= batch_size || self.relations.values_ref().values_slice().len() >= MAX_BATCH_VALUE_BYTES
    }

    pub fn append(&mut self, relations: &[Arc<str>], cascade: bool, restart_identity: bool, lsn: u64, seq: u64, txn: &TxnMeta) {
        for r in relations {
            self.relations.values().append_value(r);
        }
        self.relations.append(true);
        self.cascade.append_value(cascade);
        self.restart_identity.append_value(restart_identity);
        self.txn.append(lsn, seq, Some(txn));
        self.len += 1;
    }

    pub fn finish(&mut self) -> Fallible<RecordBatch> {
        self.len = 0;
        let mut arrays: Vec<ArrayRef> = vec![
            Arc::new(self.relations.finish()),
            Arc::new(self.cascade.finish()),
            Arc::new(self.restart_identity.finish()),
        ];
        self.txn.finish(&mut arrays);
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(|e| DecodeError::boxed_arrow("the truncates batch", e))
    }
}

pub(crate) struct MessagesBuilder {
    schema: SchemaRef,
    prefix: StringBuilder,
    content: BinaryBuilder,
    transactional: BooleanBuilder,
    txn: TxnColumns,
    len: usize,
}

impl MessagesBuilder {
    pub fn new(arrived: bool) -> Self {
        MessagesBuilder {
            schema: messages_schema(arrived),
            prefix: StringBuilder::new(),
            content: BinaryBuilder::new(),
            transactional: BooleanBuilder::new(),
            txn: TxnColumns::new(arrived),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// `batch_size` rows, or contents enough (each at most 1 GB) that the next one could
    /// take the content column past its 2 GiB.
    pub fn full(&self, batch_size: usize) -> bool {
        self.len >= batch_size || self.content.values_slice().len() >= MAX_BATCH_VALUE_BYTES
    }

    /// `lsn` is the message's own LSN (from its body); `txn` is None when it is not transactional.
    pub fn append(&mut self, prefix: &str, content: &[u8], lsn: u64, seq: u64, txn: Option<&TxnMeta>) {
        self.prefix.append_value(prefix);
        self.content.append_value(content);
        self.transactional.append_value(txn.is_some());
        self.txn.append(lsn, seq, txn);
        self.len += 1;
    }

    pub fn finish(&mut self) -> Fallible<RecordBatch> {
        self.len = 0;
        let mut arrays: Vec<ArrayRef> = vec![
            Arc::new(self.prefix.finish()),
            Arc::new(self.content.finish()),
            Arc::new(self.transactional.finish()),
        ];
        self.txn.finish(&mut arrays);
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(|e| DecodeError::boxed_arrow("the messages batch", e))
    }
}

/// One row of the Transactions table.
pub(crate) struct TxnRow<'a> {
    pub xid: u32,
    pub begin_lsn: Option<u64>,
    pub commit_lsn: Option<u64>,
    pub end_lsn: Option<u64>,
    /// PostgreSQL microseconds since 2000-01-01: when the outcome was decided.
    pub commit_ts: Option<i64>,
    pub origin: Option<(&'a str, u64)>,
    pub gid: Option<&'a str>,
    pub outcome: &'static str,
    pub streamed: bool,
    pub changes: u64,
    pub seq: u64,
}

/// An Int64 column of optional values as plain vectors: Arrow builders cost a
/// transaction of a few changes more than its own bookkeeping.
#[derive(Default)]
struct OptionalI64s {
    values: Vec<i64>,
    /// Materialized at the first null, as a builder's.
    nulls: Option<BooleanBufferBuilder>,
}

impl OptionalI64s {
    #[inline(always)]
    fn push(&mut self, v: Option<i64>) {
        match (v, &self.nulls) {
            (Some(v), None) => self.values.push(v),
            _ => self.push_with_nulls(v),
        }
    }

    #[cold]
    fn push_with_nulls(&mut self, v: Option<i64>) {
        let len = self.values.len();
        let nulls = self.nulls.get_or_insert_with(|| {
            let mut b = BooleanBufferBuilder::new(len + 1);
            b.append_n(len, true);
            b
        });
        nulls.append(v.is_some());
        self.values.push(v.unwrap_or_default());
    }

    fn finish(&mut self) -> (ScalarBuffer<i64>, Option<NullBuffer>) {
        let nulls = self.nulls.take().map(|mut b| NullBuffer::new(b.finish()));
        (std::mem::take(&mut self.values).into(), nulls)
    }
}

/// The Transactions table, column by column in plain vectors until `finish`.
pub(crate) struct TransactionsBuilder {
    schema: SchemaRef,
    xid: Vec<i64>,
    begin_lsn: OptionalI64s,
    commit_lsn: OptionalI64s,
    end_lsn: OptionalI64s,
    /// Microseconds since 1970.
    commit_ts: OptionalI64s,
    /// Rare: (row, name, LSN) of the rows that have one.
    origins: Vec<(usize, Box<str>, u64)>,
    /// Rare: (row, gid) of the rows that have one.
    gids: Vec<(usize, Box<str>)>,
    outcome: Vec<&'static str>,
    streamed: Vec<bool>,
    changes: Vec<i64>,
    seq: Vec<i64>,
}

/// A Utf8 column of `len` rows, null but at the rows given.
fn sparse_strings<'a>(len: usize, values: impl ExactSizeIterator<Item = (usize, &'a str)>) -> StringArray {
    if values.len() == 0 {
        return StringArray::new_null(len);
    }
    let mut out = StringBuilder::new();
    let mut next = 0;
    for (row, v) in values {
        for _ in next..row {
            out.append_null();
        }
        out.append_value(v);
        next = row + 1;
    }
    for _ in next..len {
        out.append_null();
    }
    out.finish()
}

impl TransactionsBuilder {
    pub fn new() -> Self {
        TransactionsBuilder {
            schema: transactions_schema(),
            xid: Vec::new(),
            begin_lsn: OptionalI64s::default(),
            commit_lsn: OptionalI64s::default(),
            end_lsn: OptionalI64s::default(),
            commit_ts: OptionalI64s::default(),
            origins: Vec::new(),
            gids: Vec::new(),
            outcome: Vec::new(),
            streamed: Vec::new(),
            changes: Vec::new(),
            seq: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.xid.len()
    }

    pub fn append(&mut self, r: TxnRow<'_>) {
        let i = |v: Option<u64>| v.map(|v| v as i64);
        let row = self.xid.len();
        self.xid.push(r.xid as i64);
        self.begin_lsn.push(i(r.begin_lsn));
        self.commit_lsn.push(i(r.commit_lsn));
        self.end_lsn.push(i(r.end_lsn));
        self.commit_ts.push(pg_ts(r.commit_ts));
        if let Some((name, lsn)) = r.origin {
            self.origins.push((row, name.into(), lsn));
        }
        if let Some(gid) = r.gid {
            self.gids.push((row, gid.into()));
        }
        self.outcome.push(r.outcome);
        self.streamed.push(r.streamed);
        self.changes.push(r.changes as i64);
        self.seq.push(r.seq as i64);
    }

    pub fn finish(&mut self) -> Fallible<RecordBatch> {
        let len = self.xid.len();
        let int64 = |(values, nulls)| Arc::new(Int64Array::new(values, nulls)) as ArrayRef;
        let (ts, ts_nulls) = self.commit_ts.finish();
        let mut origin_lsn = OptionalI64s::default();
        if self.origins.is_empty() {
            origin_lsn.values = vec![0; len];
            origin_lsn.nulls = (len > 0).then(|| {
                let mut b = BooleanBufferBuilder::new(len);
                b.append_n(len, false);
                b
            });
        }
        let mut next = if self.origins.is_empty() { len } else { 0 };
        for &(row, _, lsn) in &self.origins {
            for _ in next..row {
                origin_lsn.push(None);
            }
            // PostgreSQL sends InvalidXLogRecPtr (0) as the origin LSN of a streamed
            // transaction (pgoutput_stream_start), which is not known before its commit.
            origin_lsn.push((lsn != 0).then_some(lsn as i64));
            next = row + 1;
        }
        for _ in next..len {
            origin_lsn.push(None);
        }
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(std::mem::take(&mut self.xid))),
            int64(self.begin_lsn.finish()),
            int64(self.commit_lsn.finish()),
            int64(self.end_lsn.finish()),
            Arc::new(TimestampMicrosecondArray::new(ts, ts_nulls).with_timezone("UTC")),
            Arc::new(sparse_strings(len, self.origins.iter().map(|(row, name, _)| (*row, &**name)))),
            int64(origin_lsn.finish()),
            Arc::new(sparse_strings(len, self.gids.iter().map(|(row, gid)| (*row, &**gid)))),
            Arc::new(StringArray::from_iter_values(self.outcome.drain(..))),
            Arc::new(BooleanArray::from(std::mem::take(&mut self.streamed))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.changes))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.seq))),
        ];
        self.origins.clear();
        self.gids.clear();
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(|e| DecodeError::boxed_arrow("the transactions batch", e))
    }
}
