//! The incremental decoder: pgoutput messages in, Arrow batches of committed
//! changes out, in commit order.
//!
//! Transaction assembly follows PostgreSQL's logical decoding (src/backend/
//! replication/pgoutput/pgoutput.c and the protocol's "Logical Streaming
//! Replication Protocol" section), with the boundaries kept by
//! [`pgoutput_proto::TxnFraming`]: a transaction sent whole (Begin … Commit) is
//! buffered until its Commit; a streamed one (protocol 2+) is assembled from its
//! Stream Start … Stop blocks until Stream Commit, and loses at Stream Abort either
//! everything or, for a subtransaction, only the changes carrying that
//! subtransaction's xid; a two-phase one (protocol 3+) waits from its Prepare until
//! Commit Prepared or Rollback Prepared.
//!
//! The work is split by job: `input.rs` takes the bytes (and appends the common row
//! change of a transaction sent whole on a short path), `lifecycle.rs` follows each
//! transaction from its first message to its outcome, `emit.rs` turns changes into rows
//! of the builders and complete builders into [`Output`] batches.

mod emit;
mod input;
mod lifecycle;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use pgoutput_proto::TxnFraming;

use crate::assemble::assemble;
use crate::catalog::Catalog;
use crate::error::DecodeError;
use crate::meta::{MessagesBuilder, TransactionsBuilder, TruncatesBuilder};
use crate::options::{DecoderOptions, EmitMode};
use crate::output::{Changes, Output};
use crate::table::TableBuilder;
use crate::txn::{Entry, Txn};

use input::RecentRelations;

/// Decodes a pgoutput stream into Arrow batches. See the crate documentation for
/// the output model.
pub struct Decoder {
    opts: DecoderOptions,
    arrived: bool,
    /// Number of the next message pushed: `_seq`.
    seq: u64,
    next_buffer_id: u64,
    catalog: Catalog,
    /// The transactions begun and not decided, each with its buffered messages.
    framing: TxnFraming<Box<Txn>>,
    /// Builders by schema id.
    tables: Vec<Option<TableBuilder>>,
    /// Per table name: the schema id whose builder receives its rows now.
    active: Vec<Option<u32>>,
    truncates: TruncatesBuilder,
    messages: MessagesBuilder,
    transactions: TransactionsBuilder,
    ready: Vec<Output>,
    /// Bytes of messages (and their bookkeeping) buffered in memory.
    buffered: usize,
    /// End LSN of the last transaction decoded or discarded.
    finished_end: u64,
    /// Rows in builders, not yet in `ready`.
    unflushed_rows: usize,
    /// `finished_end` when the builders were last empty.
    safe_at_empty: u64,
    stopped: Option<String>,
    /// The entry vector of the last transaction decoded, reused by the next one.
    spare_entries: Vec<Entry>,
    /// The allocation of the last transaction decoded, reused by the next Begin.
    spare_txn: Option<Box<Txn>>,
    /// By schema id: rows of the open transaction taken out of a builder by a flush
    /// before its Commit, in order; they come out at the Commit.
    carries: Vec<Vec<RecordBatch>>,
    /// Relations the short path of `direct_change` looked up last.
    recent_relations: RecentRelations,
}

impl Decoder {
    pub fn new(options: DecoderOptions) -> Self {
        let arrived = options.emit == EmitMode::Arrived;
        Decoder {
            opts: DecoderOptions { batch_size: options.batch_size.max(1), ..options },
            arrived,
            seq: 0,
            next_buffer_id: 0,
            catalog: Catalog::default(),
            framing: TxnFraming::new(),
            tables: Vec::new(),
            active: Vec::new(),
            truncates: TruncatesBuilder::new(arrived),
            messages: MessagesBuilder::new(arrived),
            transactions: TransactionsBuilder::new(),
            ready: Vec::new(),
            buffered: 0,
            finished_end: 0,
            unflushed_rows: 0,
            safe_at_empty: 0,
            stopped: None,
            spare_entries: Vec::new(),
            spare_txn: None,
            carries: Vec::new(),
            recent_relations: RecentRelations::default(),
        }
    }

    pub fn options(&self) -> &DecoderOptions {
        &self.opts
    }

    /// Batches completed so far, in the order they were completed; drains them.
    /// Rows of one table come in commit order across its batches.
    pub fn take_ready(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.ready)
    }

    /// Turns partially filled builders into batches (call at the end of input or
    /// before acknowledging `safe_lsn`).
    pub fn flush(&mut self) -> Result<(), DecodeError> {
        self.flush_all().map_err(|e| *e)
    }

    /// Which attnum each column of `relation_id` has, as `pg_attribute` says now: the
    /// Relation messages that follow are matched to the relation's earlier definitions by
    /// attnum rather than by PostgreSQL's ordering rules (a reader with a connection to the
    /// server tells it before it feeds a Relation message; see the catalog's rule).
    pub fn column_attnums(&mut self, relation_id: u32, columns: impl IntoIterator<Item = (String, i16)>) {
        self.catalog.column_attnums(relation_id, columns);
    }

    /// The LSN up to which every transaction is decoded and handed out (or
    /// discarded): what a consumer may confirm to PostgreSQL once it has stored the
    /// batches taken so far. It counts batches still in the builders as not handed
    /// out (call `flush` first). Transactions still open do not hold it back, since
    /// they commit after it and PostgreSQL sends them again from their start after a
    /// reconnection; prepared transactions awaiting their outcome do (PostgreSQL does
    /// not send a PREPARE again once it is confirmed).
    pub fn safe_lsn(&self) -> u64 {
        let safe = if self.unflushed_rows == 0 { self.finished_end } else { self.safe_at_empty };
        match self.framing.prepare_floor_with_open() {
            Some(floor) => safe.min(floor),
            None => safe,
        }
    }

    /// Transactions begun whose outcome is not known yet (open, streamed, prepared).
    pub fn pending_transactions(&self) -> usize {
        self.framing.pending()
    }

    /// Bytes of messages of pending transactions held in memory.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }

    /// Bytes of messages of pending transactions held in spill files.
    pub fn spilled_bytes(&self) -> u64 {
        self.framing.pending_iter().map(|t| t.spilled_bytes()).sum()
    }

    /// Messages pushed so far (the next `_seq`).
    pub fn messages_pushed(&self) -> u64 {
        self.seq
    }

    /// Flushes and assembles everything not taken yet into whole tables. Pending
    /// transactions are left out (they have no outcome).
    pub fn finish(mut self) -> Result<Changes, DecodeError> {
        self.flush()?;
        let outputs = std::mem::take(&mut self.ready);
        assemble(&self.catalog, &self.opts.types, self.arrived, outputs)
    }
}

/// Where the message being handled lies.
struct At<'a> {
    lsn: u64,
    seq: u64,
    base: &'a Buffer,
    buffer_id: u64,
    start: usize,
    len: usize,
    in_stream: bool,
}

impl At<'_> {
    fn bytes(&self) -> &[u8] {
        &self.base.as_slice()[self.start..self.start + self.len]
    }

    /// Whether output values may reference the buffer (see `MessageCtx::zero_copy`).
    fn zero_copy(&self) -> bool {
        self.base.len() > self.len
    }

    fn protocol(&self, kind: &'static str, message: String) -> Box<DecodeError> {
        Box::new(DecodeError::Protocol { lsn: self.lsn, index: self.seq, kind, message })
    }
}

/// Errors after which the decoder's state is not sound any more.
fn stops(e: &DecodeError) -> bool {
    matches!(e, DecodeError::Value { .. } | DecodeError::Arrow { .. } | DecodeError::Spill(_) | DecodeError::Stopped(_))
}
