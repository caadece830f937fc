//! The incremental decoder: pgoutput messages in, Arrow batches of committed
//! changes out, in commit order.
//!
//! Transaction assembly follows PostgreSQL's logical decoding (src/backend/
//! replication/pgoutput/pgoutput.c and the protocol's "Logical Streaming
//! Replication Protocol" section): a transaction sent whole (Begin … Commit) is
//! buffered until its Commit; a streamed one (protocol 2+) is assembled from its
//! Stream Start … Stop blocks until Stream Commit, and loses at Stream Abort either
//! everything or, for a subtransaction, only the changes carrying that
//! subtransaction's xid; a two-phase one (protocol 3+) waits from its Prepare until
//! Commit Prepared or Rollback Prepared.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, BinaryViewArray, GenericBinaryArray, OffsetSizeTrait, RecordBatch};
use arrow_buffer::Buffer;
use pgoutput_proto::{
    parse_message, parse_row_change, Cell, ChangeKind, Lsn, Message, Parser, RowChange, TupleData, Xid,
};

use crate::catalog::Catalog;
use crate::changes::{assemble, Changes};
use crate::error::{DecodeError, Fallible};
use crate::idmap::IdMap;
use crate::meta::{MessagesBuilder, TransactionsBuilder, TruncatesBuilder, TxnRow};
use crate::options::{DecoderOptions, EmitMode};
use crate::spill::EntryHeader;
use crate::table::{MessageCtx, Op, TableBuilder, TxnMeta};
use crate::txn::{Entry, Txn};

/// A batch that is complete.
#[derive(Debug, Clone)]
pub enum Output {
    /// Changes of one relation version: `name` is "schema.table", `version` counts
    /// its distinct definitions (1 for the first Relation message seen).
    Table { name: String, version: u32, batch: RecordBatch },
    Truncates(RecordBatch),
    Messages(RecordBatch),
    Transactions(RecordBatch),
}

/// How a transaction ended, from the message that says so.
struct Finish {
    commit_lsn: Option<u64>,
    end_lsn: Option<u64>,
    ts: Option<i64>,
    outcome: &'static str,
    lsn: u64,
    seq: u64,
}

/// Decodes a pgoutput stream into Arrow batches. See the crate documentation for
/// the output model.
pub struct Decoder {
    opts: DecoderOptions,
    arrived: bool,
    parser: Parser,
    catalog: Catalog,
    /// Number of the next message pushed: `_seq`.
    seq: u64,
    next_buffer_id: u64,
    /// The transaction between Begin (or Begin Prepare) and Commit (or Prepare).
    current: Option<Box<Txn>>,
    /// Streamed transactions not yet committed, by top-level xid.
    streams: IdMap<Xid, Box<Txn>>,
    /// Inside a Stream Start … Stop block: its top-level xid.
    stream_xid: Option<Xid>,
    /// Prepared transactions waiting for their outcome, by gid.
    prepared: HashMap<String, Box<Txn>>,
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

/// The schema ids of the last few relation ids looked up outside a stream, while the
/// catalog's global definitions stay as they were: a transaction touches a few tables
/// in turn (pgbench: four), and this costs less than the hash lookup per change.
#[derive(Default)]
struct RecentRelations {
    entries: [Option<(u32, u32)>; 4],
    next: usize,
    /// `Catalog::activations` when the entries were found.
    activations: u64,
}

impl RecentRelations {
    #[inline]
    fn lookup(&mut self, catalog: &Catalog, relation_id: u32) -> Option<u32> {
        if self.activations != catalog.activations() {
            *self = RecentRelations { activations: catalog.activations(), ..Default::default() };
        }
        if let Some((_, schema_id)) = self.entries.iter().flatten().find(|(id, _)| *id == relation_id) {
            return Some(*schema_id);
        }
        let schema_id = catalog.lookup(relation_id, None)?;
        self.entries[self.next % self.entries.len()] = Some((relation_id, schema_id));
        self.next += 1;
        Some(schema_id)
    }
}

impl Decoder {
    pub fn new(options: DecoderOptions) -> Self {
        let arrived = options.emit == EmitMode::Arrived;
        Decoder {
            opts: DecoderOptions { batch_size: options.batch_size.max(1), ..options },
            arrived,
            parser: Parser::new(),
            catalog: Catalog::default(),
            seq: 0,
            next_buffer_id: 0,
            current: None,
            streams: IdMap::default(),
            stream_xid: None,
            prepared: HashMap::new(),
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

    fn new_buffer_id(&mut self) -> u64 {
        self.next_buffer_id += 1;
        self.next_buffer_id
    }

    /// One pgoutput message and the LSN it came with. The Buffer owns the bytes so
    /// values may be referenced without copying.
    pub fn push(&mut self, lsn: u64, message: &Buffer) -> Result<(), DecodeError> {
        let id = self.new_buffer_id();
        self.push_slice(lsn, message, id, 0, message.len()).map_err(|e| *e)
    }

    /// Many messages at once, e.g. the `data` column of a capture: values are
    /// referenced in the array's values buffer, not copied. Stops at the first
    /// error; the messages before it are decoded.
    pub fn push_array<O: OffsetSizeTrait>(&mut self, lsns: &[u64], data: &GenericBinaryArray<O>) -> Result<(), DecodeError> {
        if lsns.len() != data.len() {
            return Err(DecodeError::Input(format!("{} LSNs for {} messages", lsns.len(), data.len())));
        }
        let values = data.values();
        let id = self.new_buffer_id();
        let offsets = data.value_offsets();
        for (i, &lsn) in lsns.iter().enumerate() {
            if data.is_null(i) {
                return Err(DecodeError::Input(format!("message {i} of the array (LSN {}) is null", Lsn(lsn))));
            }
            let start = offsets[i].as_usize();
            let end = offsets[i + 1].as_usize();
            self.push_slice(lsn, values, id, start, end - start).map_err(|e| *e)?;
        }
        Ok(())
    }

    /// Like [`push_array`](Self::push_array) for a BinaryView array.
    pub fn push_view_array(&mut self, lsns: &[u64], data: &BinaryViewArray) -> Result<(), DecodeError> {
        if lsns.len() != data.len() {
            return Err(DecodeError::Input(format!("{} LSNs for {} messages", lsns.len(), data.len())));
        }
        let first_id = self.next_buffer_id + 1;
        self.next_buffer_id += data.data_buffers().len() as u64;
        for (i, (&lsn, &view)) in lsns.iter().zip(data.views().iter()).enumerate() {
            if data.is_null(i) {
                return Err(DecodeError::Input(format!("message {i} of the array (LSN {}) is null", Lsn(lsn))));
            }
            let len = view as u32 as usize;
            if len <= 12 {
                // Short values live inside the view itself.
                let buffer = Buffer::from(data.value(i));
                let id = self.new_buffer_id();
                self.push_slice(lsn, &buffer, id, 0, len).map_err(|e| *e)?;
            } else {
                let index = (view >> 64) as u32 as usize;
                let offset = (view >> 96) as u32 as usize;
                self.push_slice(lsn, &data.data_buffers()[index], first_id + index as u64, offset, len).map_err(|e| *e)?;
            }
        }
        Ok(())
    }

    fn push_slice(&mut self, lsn: u64, base: &Buffer, buffer_id: u64, start: usize, len: usize) -> Fallible<()> {
        if let Some(why) = &self.stopped {
            return Err(Box::new(DecodeError::Stopped(why.clone())));
        }
        let seq = self.seq;
        self.seq += 1;
        let bytes = &base.as_slice()[start..start + len];
        let in_stream = self.parser.in_stream();
        if !in_stream {
            if let Some(change) = parse_row_change(bytes) {
                let at = At { lsn, seq, base, buffer_id, start, len, in_stream };
                if let Some(result) = self.direct_change(&change, &at) {
                    return result.inspect_err(|e| {
                        if stops(e) {
                            self.stopped = Some(e.to_string());
                        }
                    });
                }
            }
        }
        let message = self.parser.parse(bytes).map_err(|source| DecodeError::Parse { lsn, index: seq, source })?;
        let at = At { lsn, seq, base, buffer_id, start, len, in_stream };
        self.handle(message, &at).inspect_err(|e| {
            if stops(e) {
                self.stopped = Some(e.to_string());
            }
        })
    }

    fn protocol(at: &At<'_>, kind: &'static str, message: String) -> DecodeError {
        DecodeError::Protocol { lsn: at.lsn, index: at.seq, kind, message }
    }

    fn handle(&mut self, message: Message<'_>, at: &At<'_>) -> Fallible<()> {
        let kind = message.kind_name();
        let open_txn_error = |what: &str, xid: Xid| format!("{kind} while {what} {xid} is open");
        match message {
            Message::Begin(b) => {
                if let Some(t) = &self.current {
                    return Err(Box::new(Self::protocol(at, kind, open_txn_error("transaction", t.xid))));
                }
                if let Some(x) = self.stream_xid {
                    return Err(Box::new(Self::protocol(at, kind, open_txn_error("the stream block of transaction", x))));
                }
                let mut txn = match self.spare_txn.take() {
                    Some(mut t) => {
                        t.renew(b.xid, at.lsn, false);
                        t
                    }
                    None => Box::new(Txn::new(b.xid, at.lsn, false)),
                };
                txn.entries = std::mem::take(&mut self.spare_entries);
                txn.direct = !self.arrived;
                txn.final_lsn = Some(b.final_lsn.0);
                txn.commit_ts = Some(b.commit_ts);
                self.current = Some(txn);
            }
            Message::BeginPrepare(b) => {
                if let Some(t) = &self.current {
                    return Err(Box::new(Self::protocol(at, kind, open_txn_error("transaction", t.xid))));
                }
                if let Some(x) = self.stream_xid {
                    return Err(Box::new(Self::protocol(at, kind, open_txn_error("the stream block of transaction", x))));
                }
                let mut txn = Box::new(Txn::new(b.xid, at.lsn, false));
                txn.gid = Some(b.gid.to_string());
                txn.prepare_lsn = Some(b.prepare_lsn.0);
                self.current = Some(txn);
            }
            Message::Commit(c) => {
                let txn = match self.current.take() {
                    Some(t) if t.gid.is_none() => t,
                    other => {
                        self.current = other;
                        return Err(Box::new(Self::protocol(at, kind, "Commit without a Begin before it".into())));
                    }
                };
                let fin = Finish {
                    commit_lsn: Some(c.commit_lsn.0),
                    end_lsn: Some(c.end_lsn.0),
                    ts: Some(c.commit_ts),
                    outcome: "committed",
                    lsn: at.lsn,
                    seq: at.seq,
                };
                self.finish_txn(txn, fin)?;
            }
            Message::Prepare(p) => {
                let mut txn = match self.current.take() {
                    Some(t) if t.gid.is_some() => t,
                    other => {
                        self.current = other;
                        return Err(Box::new(Self::protocol(at, kind, "Prepare without a Begin Prepare before it".into())));
                    }
                };
                txn.prepare_lsn = Some(p.prepare_lsn.0);
                txn.gid = Some(p.gid.to_string());
                self.prepare(txn, p.prepare_ts, at)?;
            }
            Message::Origin(o) => {
                let txn = match self.stream_xid {
                    Some(x) => self.streams.get_mut(&x),
                    None => self.current.as_mut(),
                };
                match txn {
                    Some(t) => t.origin = Some((o.name.to_string(), o.commit_lsn.0)),
                    None => return Err(Box::new(Self::protocol(at, kind, "Origin outside a transaction".into()))),
                }
            }
            Message::Relation(r) => {
                self.catalog.relation(&r, self.stream_xid);
            }
            Message::Type(t) => self.catalog.type_message(t.oid, t.namespace, t.name),
            Message::Insert(ref i) => {
                let schema_id = self.check_change(i.relation_id, &i.new, None, at)?;
                self.change(&message, i.xid, schema_id, at)?;
            }
            Message::Update(ref u) => {
                let schema_id = self.check_change(u.relation_id, &u.new, u.old.as_ref().map(|o| o.tuple()), at)?;
                self.change(&message, u.xid, schema_id, at)?;
            }
            Message::Delete(ref d) => {
                let schema_id = self.check_change(d.relation_id, d.old.tuple(), None, at)?;
                self.change(&message, d.xid, schema_id, at)?;
            }
            Message::Truncate(ref t) => {
                let mut names = Vec::with_capacity(t.relation_ids.len());
                for &id in &t.relation_ids {
                    let schema_id = self
                        .catalog
                        .lookup(id, self.stream_xid)
                        .ok_or_else(|| DecodeError::UnknownRelation { relation_id: id, lsn: at.lsn })?;
                    names.push(self.catalog.version(schema_id).table.clone());
                }
                let names: Arc<[Arc<str>]> = names.into();
                let txn = self.open_txn(at, kind)?;
                let aux = txn.truncates.len() as u32;
                txn.truncates.push(names);
                self.change(&message, t.xid, aux, at)?;
            }
            Message::Message(ref m) => {
                if !m.transactional {
                    // Sent as soon as it is decoded, outside any transaction.
                    self.begin_emit();
                    self.messages.append(m.prefix, m.content, m.lsn.0, at.seq, None);
                    self.row_added_meta();
                    self.finished_end = self.finished_end.max(at.lsn);
                } else {
                    self.open_txn(at, kind)?;
                    self.change(&message, m.xid, 0, at)?;
                }
            }
            Message::StreamStart(s) => {
                if let Some(x) = self.stream_xid {
                    return Err(Box::new(Self::protocol(at, kind, open_txn_error("the stream block of transaction", x))));
                }
                if let Some(t) = &self.current {
                    return Err(Box::new(Self::protocol(at, kind, open_txn_error("transaction", t.xid))));
                }
                self.stream_xid = Some(s.xid);
                if s.first_segment {
                    // A first segment for a transaction already open means the stream
                    // was started again (a reconnection): what it had is sent anew.
                    if let Some(old) = self.streams.remove(&s.xid) {
                        self.buffered = self.buffered.saturating_sub(old.memory);
                        self.catalog.drop_scope(s.xid);
                    }
                }
                self.streams.entry(s.xid).or_insert_with(|| Box::new(Txn::new(s.xid, at.lsn, true)));
            }
            Message::StreamStop => {
                if self.stream_xid.take().is_none() {
                    return Err(Box::new(Self::protocol(at, kind, "Stream Stop outside a stream block".into())));
                }
            }
            Message::StreamCommit(c) => {
                let Some(txn) = self.streams.remove(&c.xid) else {
                    return Err(Box::new(Self::protocol(
                        at,
                        kind,
                        format!("Stream Commit for transaction {}, which no Stream Start opened", c.xid),
                    )));
                };
                if self.stream_xid == Some(c.xid) {
                    self.stream_xid = None;
                }
                self.catalog.commit_scope(c.xid);
                let fin = Finish {
                    commit_lsn: Some(c.commit_lsn.0),
                    end_lsn: Some(c.end_lsn.0),
                    ts: Some(c.commit_ts),
                    outcome: "committed",
                    lsn: at.lsn,
                    seq: at.seq,
                };
                self.finish_txn(txn, fin)?;
            }
            Message::StreamAbort(a) => {
                if a.xid == a.subxid {
                    // PostgreSQL 18 reports aborts of transactions it never streamed
                    // (connections without streaming): nothing to drop then.
                    let Some(txn) = self.streams.remove(&a.xid) else { return Ok(()) };
                    self.catalog.drop_scope(a.xid);
                    self.buffered = self.buffered.saturating_sub(txn.memory);
                    self.begin_emit();
                    self.transactions.append(TxnRow {
                        xid: txn.xid,
                        begin_lsn: Some(txn.begin_lsn),
                        commit_lsn: None,
                        end_lsn: a.abort_lsn.map(|l| l.0),
                        commit_ts: a.abort_ts,
                        origin: txn.origin.as_ref().map(|(n, l)| (n.as_str(), *l)),
                        gid: None,
                        outcome: "aborted",
                        streamed: true,
                        changes: if self.arrived { txn.changes } else { 0 },
                        seq: at.seq,
                    });
                    self.row_added_meta();
                    self.finished_end = self.finished_end.max(a.abort_lsn.map_or(at.lsn, |l| l.0));
                } else {
                    let Some(txn) = self.streams.get_mut(&a.xid) else { return Ok(()) };
                    let freed = txn.abort_subtransaction(a.subxid);
                    self.buffered = self.buffered.saturating_sub(freed);
                    if self.arrived {
                        self.begin_emit();
                        self.transactions.append(TxnRow {
                            xid: a.subxid,
                            begin_lsn: None,
                            commit_lsn: None,
                            end_lsn: a.abort_lsn.map(|l| l.0),
                            commit_ts: a.abort_ts,
                            origin: None,
                            gid: None,
                            outcome: "subtransaction-aborted",
                            streamed: true,
                            changes: 0,
                            seq: at.seq,
                        });
                        self.row_added_meta();
                    }
                }
            }
            Message::StreamPrepare(p) => {
                let Some(mut txn) = self.streams.remove(&p.xid) else {
                    return Err(Box::new(Self::protocol(
                        at,
                        kind,
                        format!("Stream Prepare for transaction {}, which no Stream Start opened", p.xid),
                    )));
                };
                if self.stream_xid == Some(p.xid) {
                    self.stream_xid = None;
                }
                self.catalog.commit_scope(p.xid);
                txn.prepare_lsn = Some(p.prepare_lsn.0);
                txn.gid = Some(p.gid.to_string());
                self.prepare(txn, p.prepare_ts, at)?;
            }
            Message::CommitPrepared(c) => {
                let Some(txn) = self.prepared.remove(c.gid) else {
                    return Err(Box::new(Self::protocol(
                        at,
                        kind,
                        format!(
                            "Commit Prepared of gid {:?} (xid {}), whose Prepare this decoder did not see",
                            c.gid, c.xid
                        ),
                    )));
                };
                let fin = Finish {
                    commit_lsn: Some(c.commit_lsn.0),
                    end_lsn: Some(c.end_lsn.0),
                    ts: Some(c.commit_ts),
                    outcome: "prepared-committed",
                    lsn: at.lsn,
                    seq: at.seq,
                };
                self.finish_txn(txn, fin)?;
            }
            Message::RollbackPrepared(r) => {
                // A transaction prepared before this decoder started is rolled back
                // too: there is nothing of it to drop, and its outcome is recorded.
                let txn = self.prepared.remove(r.gid);
                let (begin_lsn, streamed, origin, changes) = match &txn {
                    Some(t) => {
                        self.buffered = self.buffered.saturating_sub(t.memory);
                        (Some(t.begin_lsn), t.streamed, t.origin.clone(), if self.arrived { t.changes } else { 0 })
                    }
                    None => (None, false, None, 0),
                };
                self.begin_emit();
                self.transactions.append(TxnRow {
                    xid: r.xid,
                    begin_lsn,
                    commit_lsn: None,
                    end_lsn: Some(r.rollback_end_lsn.0),
                    commit_ts: Some(r.rollback_ts),
                    origin: origin.as_ref().map(|(n, l)| (n.as_str(), *l)),
                    gid: Some(r.gid),
                    outcome: "prepared-rolled-back",
                    streamed,
                    changes,
                    seq: at.seq,
                });
                self.row_added_meta();
                self.finished_end = self.finished_end.max(r.rollback_end_lsn.0);
            }
        }
        Ok(())
    }

    /// The transaction a change belongs to: the stream block's, or the open one.
    fn open_txn(&mut self, at: &At<'_>, kind: &'static str) -> Fallible<&mut Txn> {
        let txn = match self.stream_xid {
            Some(x) => self.streams.get_mut(&x),
            None => self.current.as_mut(),
        };
        txn.map(|t| &mut **t).ok_or_else(|| Box::new(Self::protocol(at, kind, format!("{kind} outside a transaction"))))
    }

    /// The schema id in force for a change, after checking that its tuples fit it.
    fn check_change(
        &self,
        relation_id: u32,
        row: &TupleData<'_>,
        old: Option<&TupleData<'_>>,
        at: &At<'_>,
    ) -> Fallible<u32> {
        let schema_id = self
            .catalog
            .lookup(relation_id, self.stream_xid)
            .ok_or_else(|| DecodeError::UnknownRelation { relation_id, lsn: at.lsn })?;
        let rel = self.catalog.version(schema_id);
        for t in std::iter::once(row).chain(old) {
            if t.len() != rel.columns.len() {
                return Err(Box::new(DecodeError::Protocol {
                    lsn: at.lsn,
                    index: at.seq,
                    kind: "change",
                    message: format!(
                        "a tuple of {} values for {} (relation id {relation_id}), whose Relation message announced {} columns",
                        t.len(),
                        rel.table,
                        rel.columns.len()
                    ),
                }));
            }
        }
        Ok(schema_id)
    }

    /// A change (or transactional message) of the open transaction: buffered, or
    /// decoded at once in Arrived mode.
    fn change(&mut self, message: &Message<'_>, carried_xid: Option<Xid>, aux: u32, at: &At<'_>) -> Fallible<()> {
        let kind = message.kind_name();
        let is_row = matches!(message, Message::Insert(_) | Message::Update(_) | Message::Delete(_));
        if self.arrived {
            let txn = self.open_txn(at, kind)?;
            if is_row {
                txn.changes += 1;
            }
            let status = if txn.streamed {
                "in-progress"
            } else if txn.gid.is_some() {
                "prepared"
            } else {
                "committed"
            };
            let meta = TxnMeta { commit_lsn: txn.final_lsn, commit_ts: txn.commit_ts, xid: txn.xid, status: Some(status) };
            let names = match message {
                Message::Truncate(_) => txn.truncates.pop(),
                _ => None,
            };
            let ctx = MessageCtx {
                base: at.base,
                buffer_id: at.buffer_id,
                message: &at.base.as_slice()[at.start..at.start + at.len],
                lsn: at.lsn,
                seq: at.seq,
                subxid: carried_xid,
                zero_copy: at.base.len() > at.len,
            };
            self.begin_emit();
            return self.decode(message, aux, names.as_deref(), &ctx, &meta, false).map(|_| ()).inspect_err(|_| {
                self.stopped.get_or_insert_with(|| "a change could not be decoded".into());
            });
        }
        if !at.in_stream {
            if let Some(t) = self.current.as_mut().filter(|t| t.direct) {
                if is_row {
                    t.changes += 1;
                    t.direct_rows += 1;
                    let meta = TxnMeta { commit_lsn: t.final_lsn, commit_ts: t.commit_ts, xid: t.xid, status: None };
                    let ctx = MessageCtx {
                        base: at.base,
                        buffer_id: at.buffer_id,
                        message: &at.base.as_slice()[at.start..at.start + at.len],
                        lsn: at.lsn,
                        seq: at.seq,
                        subxid: None,
                        zero_copy: at.base.len() > at.len,
                    };
                    let full = self.decode(message, aux, None, &ctx, &meta, true)?;
                    if let Some(t) = self.current.as_mut() {
                        if !t.touched.contains(&aux) {
                            t.touched.push(aux);
                        }
                    }
                    if full {
                        self.cut_full_builder(aux)?;
                    }
                    return Ok(());
                }
                // Truncates and messages wait for the Commit (their builders hold no
                // uncommitted rows); the rows after them still go straight to their
                // builders, `_seq` keeping the order across tables.
            }
        }
        let entry = Entry {
            h: EntryHeader { lsn: at.lsn, seq: at.seq, xid: carried_xid.unwrap_or(0), aux, in_stream: at.in_stream },
            base: at.base.clone(),
            buffer_id: at.buffer_id,
            start: at.start,
            len: at.len,
        };
        let txn = self.open_txn(at, kind)?;
        if is_row {
            txn.changes += 1;
        }
        self.buffered += txn.push(entry);
        self.maybe_spill()
    }

    /// A row change of a transaction sent whole whose rows go to the builders as they
    /// arrive (`Txn::direct`), the common case: appended with one relation lookup and no
    /// [`Message`]. It does what `handle` → `check_change` → `change` → `decode` →
    /// `append_row` do for such a change, and returns None, having changed nothing, for
    /// anything else (an unknown relation, tuples that do not fit it, a table whose
    /// builder is not made yet or not in force), which then takes that path and gets its
    /// errors from there.
    #[inline]
    fn direct_change(&mut self, change: &RowChange<'_>, at: &At<'_>) -> Option<Fallible<()>> {
        if self.arrived || self.stream_xid.is_some() {
            return None;
        }
        if !self.current.as_ref().is_some_and(|t| t.direct) {
            return None;
        }
        let schema_id = self.recent_relations.lookup(&self.catalog, change.relation_id)?;
        let txn = self.current.as_mut()?;
        let (op, row, old) = match (change.kind, &change.new, &change.old) {
            (ChangeKind::Insert, Some(new), None) => (Op::Insert, new, None),
            (ChangeKind::Update, Some(new), old) => (Op::Update, new, old.as_ref().map(|o| o.tuple())),
            (ChangeKind::Delete, None, Some(old)) => (Op::Delete, old.tuple(), Some(old.tuple())),
            _ => return None,
        };
        let rel = self.catalog.version(schema_id);
        let columns = rel.columns.len();
        if row.len() != columns || old.is_some_and(|o| o.len() != columns) {
            return None;
        }
        if self.active.get(rel.table_index as usize).copied().flatten() != Some(schema_id) {
            return None;
        }
        let builder = self.tables.get_mut(schema_id as usize)?.as_mut()?;
        txn.changes += 1;
        txn.direct_rows += 1;
        let meta = TxnMeta { commit_lsn: txn.final_lsn, commit_ts: txn.commit_ts, xid: txn.xid, status: None };
        let ctx = MessageCtx {
            base: at.base,
            buffer_id: at.buffer_id,
            message: &at.base.as_slice()[at.start..at.start + at.len],
            lsn: at.lsn,
            seq: at.seq,
            subxid: None,
            zero_copy: at.base.len() > at.len,
        };
        if let Err(e) = builder.append(op, row, old, &ctx, &meta) {
            return Some(Err(e));
        }
        let full = builder.full(self.opts.batch_size);
        if !txn.touched.contains(&schema_id) {
            txn.touched.push(schema_id);
        }
        Some(if full { self.cut_full_builder(schema_id) } else { Ok(()) })
    }

    /// The open transaction sent whole filled the builder `sid`: the builder's
    /// committed rows go out and the transaction's own wait in `carries` for the
    /// Commit, so that its next rows still go straight to the builders. Once what
    /// waits so would pass half the memory limit, the rest of the transaction waits
    /// as messages instead, which can spill.
    fn cut_full_builder(&mut self, sid: u32) -> Fallible<()> {
        let held = self.tables.get(sid as usize).and_then(|b| b.as_ref()).map_or(0, |b| b.memory_estimate());
        let Some(txn) = self.current.as_mut() else { return Ok(()) };
        if txn.carried + held > self.opts.memory_limit / 2 {
            txn.direct = false;
            return Ok(());
        }
        txn.carried += held;
        self.flush_table(sid as usize)
    }

    /// Keeps buffered memory under the limit by spilling the largest transactions.
    fn maybe_spill(&mut self) -> Fallible<()> {
        if self.buffered <= self.opts.memory_limit {
            return Ok(());
        }
        let dir = self.opts.spill_dir.clone();
        while self.buffered > self.opts.memory_limit / 2 {
            let largest = self
                .current
                .iter_mut()
                .chain(self.streams.values_mut())
                .chain(self.prepared.values_mut())
                .max_by_key(|t| t.memory);
            let Some(txn) = largest.filter(|t| t.memory > 0) else { break };
            let freed = txn.spill(dir.as_deref())?;
            self.buffered = self.buffered.saturating_sub(freed);
        }
        Ok(())
    }

    fn prepare(&mut self, txn: Box<Txn>, prepare_ts: i64, at: &At<'_>) -> Fallible<()> {
        let gid = txn.gid.clone().unwrap_or_default();
        if self.arrived {
            self.begin_emit();
            self.transactions.append(TxnRow {
                xid: txn.xid,
                begin_lsn: Some(txn.begin_lsn),
                commit_lsn: None,
                end_lsn: None,
                commit_ts: Some(prepare_ts),
                origin: txn.origin.as_ref().map(|(n, l)| (n.as_str(), *l)),
                gid: Some(&gid),
                outcome: "prepared",
                streamed: txn.streamed,
                changes: txn.changes,
                seq: at.seq,
            });
            self.row_added_meta();
        }
        // The same gid again is the prepare sent anew after a reconnection.
        if let Some(old) = self.prepared.insert(gid, txn) {
            self.buffered = self.buffered.saturating_sub(old.memory);
        }
        Ok(())
    }

    /// Decodes a finished transaction's changes into the builders and records it.
    fn finish_txn(&mut self, mut txn: Box<Txn>, fin: Finish) -> Fallible<()> {
        self.buffered = self.buffered.saturating_sub(txn.memory);
        self.begin_emit();
        let meta = TxnMeta { commit_lsn: fin.commit_lsn, commit_ts: fin.ts, xid: txn.xid, status: None };
        let mut emitted = txn.direct_rows;
        // Rows decoded before the Commit are committed now.
        for &sid in &txn.touched {
            let Some(b) = self.tables.get_mut(sid as usize).and_then(|b| b.as_mut()) else { continue };
            if let (Some(lsn), Some(ts)) = (fin.commit_lsn, fin.ts) {
                b.set_commit(b.committed, lsn, ts);
            }
            self.unflushed_rows += b.len() - b.committed;
            b.committed = b.len();
            if let Some(carried) = self.carries.get_mut(sid as usize).filter(|c| !c.is_empty()) {
                let name = b.rel.table.to_string();
                for batch in carried.drain(..) {
                    self.ready.push(Output::Table { name: name.clone(), version: b.rel.version, batch });
                }
            }
        }
        for &sid in &txn.touched {
            if self.tables[sid as usize].as_ref().is_some_and(|b| b.full(self.opts.batch_size)) {
                self.flush_table(sid as usize)?;
            }
        }
        if !self.arrived {
            let truncates = std::mem::take(&mut txn.truncates);
            let mut next_id = self.next_buffer_id;
            let result = txn.replay(&mut next_id, |e| {
                let message = parse_message(e.message, e.h.in_stream)
                    .map_err(|source| DecodeError::Parse { lsn: e.h.lsn, index: e.h.seq, source })?;
                if matches!(message, Message::Insert(_) | Message::Update(_) | Message::Delete(_)) {
                    emitted += 1;
                }
                let names = match message {
                    Message::Truncate(_) => truncates.get(e.h.aux as usize).map(|n| &n[..]),
                    _ => None,
                };
                let ctx = MessageCtx {
                    base: e.base,
                    buffer_id: e.buffer_id,
                    message: e.message,
                    lsn: e.h.lsn,
                    seq: e.h.seq,
                    subxid: e.h.in_stream.then_some(e.h.xid),
                    zero_copy: e.zero_copy,
                };
                self.decode(&message, e.h.aux, names, &ctx, &meta, false).map(|_| ())
            });
            self.next_buffer_id = next_id;
            let mut entries = std::mem::take(&mut txn.entries);
            if entries.capacity() <= 1 << 16 {
                entries.clear();
                self.spare_entries = entries;
            }
            if let Err(e) = result {
                // The transaction is partly in the builders: nothing sound can follow.
                self.stopped.get_or_insert_with(|| e.to_string());
                return Err(e);
            }
        } else {
            emitted = txn.changes;
        }
        self.transactions.append(TxnRow {
            xid: txn.xid,
            begin_lsn: Some(txn.begin_lsn),
            commit_lsn: fin.commit_lsn,
            end_lsn: fin.end_lsn,
            commit_ts: fin.ts,
            origin: txn.origin.as_ref().map(|(n, l)| (n.as_str(), *l)),
            gid: txn.gid.as_deref(),
            outcome: fin.outcome,
            streamed: txn.streamed,
            changes: emitted,
            seq: fin.seq,
        });
        self.row_added_meta();
        self.finished_end = self.finished_end.max(fin.end_lsn.unwrap_or(fin.lsn));
        // Builders that grew past the batch size while the rows waited, or whose
        // table changed definition meanwhile.
        for &sid in &txn.touched {
            let Some(b) = self.tables.get(sid as usize).and_then(|b| b.as_ref()) else { continue };
            let active = self.active.get(b.rel.table_index as usize).copied().flatten() == Some(sid);
            if b.full(self.opts.batch_size) || !active {
                self.flush_table(sid as usize)?;
            }
        }
        self.spare_txn = Some(txn);
        Ok(())
    }

    /// Decodes one change into the builders. `direct`: the row belongs to the open
    /// transaction, not committed yet; returns whether its builder is full then.
    fn decode(
        &mut self,
        message: &Message<'_>,
        aux: u32,
        truncated: Option<&[Arc<str>]>,
        ctx: &MessageCtx<'_>,
        meta: &TxnMeta,
        direct: bool,
    ) -> Fallible<bool> {
        match message {
            Message::Insert(i) => self.append_row(aux, Op::Insert, &i.new, None, ctx, meta, direct),
            Message::Update(u) => {
                self.append_row(aux, Op::Update, &u.new, u.old.as_ref().map(|o| o.tuple()), ctx, meta, direct)
            }
            Message::Delete(d) => self.append_row(aux, Op::Delete, d.old.tuple(), Some(d.old.tuple()), ctx, meta, direct),
            Message::Truncate(t) => {
                self.truncates.append(truncated.unwrap_or(&[]), t.cascade, t.restart_identity, ctx.lsn, ctx.seq, meta);
                self.row_added_meta();
                Ok(false)
            }
            Message::Message(m) => {
                self.messages.append(m.prefix, m.content, m.lsn.0, ctx.seq, Some(meta));
                self.row_added_meta();
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn append_row(
        &mut self,
        schema_id: u32,
        op: Op,
        row: &TupleData<'_>,
        old: Option<&TupleData<'_>>,
        ctx: &MessageCtx<'_>,
        meta: &TxnMeta,
        direct: bool,
    ) -> Fallible<bool> {
        let sid = schema_id as usize;
        if self.tables.len() <= sid {
            self.tables.resize_with(sid + 1, || None);
        }
        if self.tables[sid].is_none() {
            if self.opts.detect_binary {
                let first = row.cells().chain(old.into_iter().flat_map(|o| o.cells())).find_map(|c| match c {
                    Cell::Text(_) => Some(false),
                    Cell::Binary(_) => Some(true),
                    Cell::Null | Cell::UnchangedToast => None,
                });
                if let Some(binary) = first {
                    self.opts.types.binary = binary;
                    self.opts.detect_binary = false;
                }
            }
            let rel = self.catalog.version(schema_id).clone();
            self.tables[sid] = Some(TableBuilder::new(rel, &self.opts.types, self.arrived));
        }
        let table_index = self.catalog.version(schema_id).table_index as usize;
        if self.active.len() <= table_index {
            self.active.resize(self.catalog.table_count().max(table_index + 1), None);
        }
        if self.active[table_index] != Some(schema_id) {
            // The table changed definition: its rows so far come out first.
            if let Some(previous) = self.active[table_index] {
                self.flush_table(previous as usize)?;
            }
            self.active[table_index] = Some(schema_id);
        }
        let builder = self.tables[sid].as_mut().expect("created above");
        builder.append(op, row, old, ctx, meta)?;
        if direct {
            return Ok(builder.full(self.opts.batch_size));
        }
        builder.committed += 1;
        self.unflushed_rows += 1;
        if builder.full(self.opts.batch_size) {
            self.flush_table(sid)?;
        }
        Ok(false)
    }

    /// Called before rows are added: remembers what was safe while nothing was pending.
    fn begin_emit(&mut self) {
        if self.unflushed_rows == 0 {
            self.safe_at_empty = self.finished_end;
        }
    }

    /// A row was added to the truncates, messages or transactions builder.
    fn row_added_meta(&mut self) {
        self.unflushed_rows += 1;
        let n = self.opts.batch_size;
        if self.truncates.full(n) || self.messages.full(n) || self.transactions.len() >= n {
            // These builders cannot fail on well-formed rows; a failure is reported at flush.
            let _ = self.flush_meta();
        }
    }

    /// Hands out the committed rows of a builder; rows of the open transaction
    /// wait in `carries` for its Commit.
    fn flush_table(&mut self, sid: usize) -> Fallible<()> {
        let Some(builder) = self.tables.get_mut(sid).and_then(|b| b.as_mut()) else { return Ok(()) };
        let rows = builder.len();
        if rows == 0 {
            return Ok(());
        }
        let committed = builder.committed;
        let batch = builder.finish()?;
        let (name, version) = (builder.rel.table.to_string(), builder.rel.version);
        if committed < rows {
            if self.carries.len() <= sid {
                self.carries.resize_with(sid + 1, Vec::new);
            }
            self.carries[sid].push(batch.slice(committed, rows - committed));
        }
        if committed > 0 {
            self.unflushed_rows = self.unflushed_rows.saturating_sub(committed);
            let batch = if committed < rows { batch.slice(0, committed) } else { batch };
            self.ready.push(Output::Table { name, version, batch });
        }
        Ok(())
    }

    fn flush_meta(&mut self) -> Fallible<()> {
        let n = self.truncates.len();
        if n > 0 {
            let batch = self.truncates.finish()?;
            self.unflushed_rows = self.unflushed_rows.saturating_sub(n);
            self.ready.push(Output::Truncates(batch));
        }
        let n = self.messages.len();
        if n > 0 {
            let batch = self.messages.finish()?;
            self.unflushed_rows = self.unflushed_rows.saturating_sub(n);
            self.ready.push(Output::Messages(batch));
        }
        let n = self.transactions.len();
        if n > 0 {
            let batch = self.transactions.finish()?;
            self.unflushed_rows = self.unflushed_rows.saturating_sub(n);
            self.ready.push(Output::Transactions(batch));
        }
        Ok(())
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

    fn flush_all(&mut self) -> Fallible<()> {
        if let Some(why) = &self.stopped {
            return Err(Box::new(DecodeError::Stopped(why.clone())));
        }
        let result = (|| {
            for sid in 0..self.tables.len() {
                self.flush_table(sid)?;
            }
            self.flush_meta()
        })();
        result.inspect_err(|e| {
            self.stopped.get_or_insert_with(|| e.to_string());
        })
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
        let mut safe = if self.unflushed_rows == 0 { self.finished_end } else { self.safe_at_empty };
        let prepared = self.prepared.values().chain(self.current.iter().filter(|t| t.gid.is_some()));
        for t in prepared {
            if let Some(p) = t.prepare_lsn {
                safe = safe.min(p);
            }
        }
        safe
    }

    /// Transactions begun whose outcome is not known yet (open, streamed, prepared).
    pub fn pending_transactions(&self) -> usize {
        self.current.iter().count() + self.streams.len() + self.prepared.len()
    }

    /// Bytes of messages of pending transactions held in memory.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }

    /// Bytes of messages of pending transactions held in spill files.
    pub fn spilled_bytes(&self) -> u64 {
        self.current
            .iter()
            .chain(self.streams.values())
            .chain(self.prepared.values())
            .map(|t| t.spilled_bytes())
            .sum()
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

/// Errors after which the decoder's state is not sound any more.
fn stops(e: &DecodeError) -> bool {
    matches!(e, DecodeError::Value { .. } | DecodeError::Arrow { .. } | DecodeError::Spill(_) | DecodeError::Stopped(_))
}
