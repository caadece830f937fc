//! The three tables that are not relations: truncates, logical decoding messages
//! and transactions.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Int64Builder, ListBuilder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use pgoutput_proto::PG_EPOCH_OFFSET_MICROS;

use crate::error::{DecodeError, Fallible};
use crate::table::TxnMeta;

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

pub(crate) struct TransactionsBuilder {
    schema: SchemaRef,
    xid: Int64Builder,
    begin_lsn: Int64Builder,
    commit_lsn: Int64Builder,
    end_lsn: Int64Builder,
    commit_ts: TimestampMicrosecondBuilder,
    origin: StringBuilder,
    origin_lsn: Int64Builder,
    gid: StringBuilder,
    outcome: StringBuilder,
    streamed: BooleanBuilder,
    changes: Int64Builder,
    seq: Int64Builder,
    len: usize,
}

impl TransactionsBuilder {
    pub fn new() -> Self {
        TransactionsBuilder {
            schema: transactions_schema(),
            xid: Int64Builder::new(),
            begin_lsn: Int64Builder::new(),
            commit_lsn: Int64Builder::new(),
            end_lsn: Int64Builder::new(),
            commit_ts: ts_builder(),
            origin: StringBuilder::new(),
            origin_lsn: Int64Builder::new(),
            gid: StringBuilder::new(),
            outcome: StringBuilder::new(),
            streamed: BooleanBuilder::new(),
            changes: Int64Builder::new(),
            seq: Int64Builder::new(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn append(&mut self, r: TxnRow<'_>) {
        let i = |v: Option<u64>| v.map(|v| v as i64);
        self.xid.append_value(r.xid as i64);
        self.begin_lsn.append_option(i(r.begin_lsn));
        self.commit_lsn.append_option(i(r.commit_lsn));
        self.end_lsn.append_option(i(r.end_lsn));
        self.commit_ts.append_option(pg_ts(r.commit_ts));
        self.origin.append_option(r.origin.map(|o| o.0));
        // PostgreSQL sends InvalidXLogRecPtr (0) as the origin LSN of a streamed
        // transaction (pgoutput_stream_start), which is not known before its commit.
        self.origin_lsn.append_option(r.origin.map(|o| o.1 as i64).filter(|&lsn| lsn != 0));
        self.gid.append_option(r.gid);
        self.outcome.append_value(r.outcome);
        self.streamed.append_value(r.streamed);
        self.changes.append_value(r.changes as i64);
        self.seq.append_value(r.seq as i64);
        self.len += 1;
    }

    pub fn finish(&mut self) -> Fallible<RecordBatch> {
        self.len = 0;
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(self.xid.finish()),
            Arc::new(self.begin_lsn.finish()),
            Arc::new(self.commit_lsn.finish()),
            Arc::new(self.end_lsn.finish()),
            Arc::new(self.commit_ts.finish()),
            Arc::new(self.origin.finish()),
            Arc::new(self.origin_lsn.finish()),
            Arc::new(self.gid.finish()),
            Arc::new(self.outcome.finish()),
            Arc::new(self.streamed.finish()),
            Arc::new(self.changes.finish()),
            Arc::new(self.seq.finish()),
        ];
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(|e| DecodeError::boxed_arrow("the transactions batch", e))
    }
}
