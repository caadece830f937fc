//! Transaction lifecycle: each message applied to the transactions it belongs to
//! (boundaries checked by [`TxnFraming`](pgoutput_proto::TxnFraming)), changes buffered
//! until the outcome is known (or spilled), and the outcome recorded when it comes.

use std::sync::Arc;

use pgoutput_proto::{
    parse_message, Begin, BeginPrepare, Commit, CommitPrepared, FramingError, LogicalMessage, Message, Prepare,
    RollbackPrepared, StreamAbort, StreamAborted, StreamCommit, StreamStart, TupleData, Xid,
};

use super::{At, Decoder};
use crate::error::{DecodeError, Fallible};
use crate::meta::TxnRow;
use crate::spill::EntryHeader;
use crate::table::{MessageCtx, TxnMeta};
use crate::txn::{Entry, Txn};

/// How a transaction ended, from the message that says so.
struct Finish {
    commit_lsn: Option<u64>,
    end_lsn: Option<u64>,
    ts: Option<i64>,
    outcome: &'static str,
    lsn: u64,
    seq: u64,
}

impl Finish {
    fn committed(commit_lsn: u64, end_lsn: u64, ts: i64, outcome: &'static str, at: &At<'_>) -> Self {
        Finish { commit_lsn: Some(commit_lsn), end_lsn: Some(end_lsn), ts: Some(ts), outcome, lsn: at.lsn, seq: at.seq }
    }
}

/// The row of the transactions table that Arrived mode writes at Prepare.
fn prepared_row<'t>(txn: &'t Txn, prepare_ts: i64, at: &At<'_>) -> TxnRow<'t> {
    TxnRow {
        xid: txn.xid,
        begin_lsn: Some(txn.begin_lsn),
        commit_lsn: None,
        end_lsn: None,
        commit_ts: Some(prepare_ts),
        origin: txn.origin.as_ref().map(|(n, l)| (n.as_str(), *l)),
        gid: txn.gid.as_deref(),
        outcome: "prepared",
        streamed: txn.streamed,
        changes: txn.changes,
        seq: at.seq,
    }
}

fn framing_error(at: &At<'_>, e: FramingError) -> Box<DecodeError> {
    at.protocol(e.kind, e.message)
}

impl Decoder {
    /// Applies one message (other than a row change taken by the short path).
    pub(super) fn handle(&mut self, message: Message<'_>, at: &At<'_>) -> Fallible<()> {
        match message {
            Message::Begin(ref b) => self.on_begin(b, at),
            Message::BeginPrepare(ref b) => self.on_begin_prepare(b, at),
            Message::Commit(ref c) => self.on_commit(c, at),
            Message::Prepare(ref p) => self.on_prepare(p, at),
            Message::Origin(o) => match self.framing.open_mut() {
                Some(t) => {
                    t.origin = Some((o.name.to_string(), o.commit_lsn.0));
                    Ok(())
                }
                None => Err(at.protocol("Origin", "Origin outside a transaction".into())),
            },
            Message::Relation(r) => {
                self.catalog.relation(&r, self.framing.stream_block());
                Ok(())
            }
            Message::Type(t) => {
                self.catalog.type_message(t.oid, t.namespace, t.name);
                Ok(())
            }
            Message::Insert(ref i) => {
                let schema_id = self.check_change(i.relation_id, &i.new, None, at)?;
                self.change(&message, i.xid, schema_id, at)
            }
            Message::Update(ref u) => {
                let schema_id = self.check_change(u.relation_id, &u.new, u.old.as_ref().map(|o| o.tuple()), at)?;
                self.change(&message, u.xid, schema_id, at)
            }
            Message::Delete(ref d) => {
                let schema_id = self.check_change(d.relation_id, d.old.tuple(), None, at)?;
                self.change(&message, d.xid, schema_id, at)
            }
            Message::Truncate(ref t) => {
                let block = self.framing.stream_block();
                let mut names = Vec::with_capacity(t.relation_ids.len());
                for &id in &t.relation_ids {
                    let schema_id = self
                        .catalog
                        .lookup(id, block)
                        .ok_or_else(|| DecodeError::UnknownRelation { relation_id: id, lsn: at.lsn })?;
                    names.push(self.catalog.version(schema_id).table.clone());
                }
                let names: Arc<[Arc<str>]> = names.into();
                let txn = self.open_txn(at, "Truncate")?;
                let aux = txn.truncates.len() as u32;
                txn.truncates.push(names);
                self.change(&message, t.xid, aux, at)
            }
            Message::Message(ref m) => self.on_logical_message(m, &message, at),
            Message::StreamStart(ref s) => self.on_stream_start(s, at),
            Message::StreamStop => self.framing.stream_stop().map(|_| ()).map_err(|e| framing_error(at, e)),
            Message::StreamCommit(ref c) => self.on_stream_commit(c, at),
            Message::StreamAbort(ref a) => {
                self.on_stream_abort(a, at);
                Ok(())
            }
            Message::StreamPrepare(ref p) => self.on_stream_prepare(p, at),
            Message::CommitPrepared(ref c) => self.on_commit_prepared(c, at),
            Message::RollbackPrepared(ref r) => {
                self.on_rollback_prepared(r, at);
                Ok(())
            }
        }
    }

    fn on_begin(&mut self, b: &Begin, at: &At<'_>) -> Fallible<()> {
        let (spare_txn, spare_entries, direct) = (&mut self.spare_txn, &mut self.spare_entries, !self.arrived);
        let txn = self
            .framing
            .begin(b.xid, || match spare_txn.take() {
                Some(mut t) => {
                    t.renew(b.xid, at.lsn, false);
                    t
                }
                None => Box::new(Txn::new(b.xid, at.lsn, false)),
            })
            .map_err(|e| framing_error(at, e))?;
        txn.entries = std::mem::take(spare_entries);
        txn.direct = direct;
        txn.final_lsn = Some(b.final_lsn.0);
        txn.commit_ts = Some(b.commit_ts);
        Ok(())
    }

    fn on_begin_prepare(&mut self, b: &BeginPrepare<'_>, at: &At<'_>) -> Fallible<()> {
        let txn = self
            .framing
            .begin_prepare(b.xid, b.prepare_lsn, || Box::new(Txn::new(b.xid, at.lsn, false)))
            .map_err(|e| framing_error(at, e))?;
        txn.gid = Some(b.gid.to_string());
        Ok(())
    }

    fn on_commit(&mut self, c: &Commit, at: &At<'_>) -> Fallible<()> {
        let txn = self.framing.commit().map_err(|e| framing_error(at, e))?;
        self.finish_txn(txn, Finish::committed(c.commit_lsn.0, c.end_lsn.0, c.commit_ts, "committed", at))
    }

    fn on_prepare(&mut self, p: &Prepare<'_>, at: &At<'_>) -> Fallible<()> {
        let arrived = self.arrived;
        if arrived {
            self.begin_emit();
        }
        let (txn, replaced) = self.framing.prepare(p.gid, p.prepare_lsn).map_err(|e| framing_error(at, e))?;
        txn.gid = Some(p.gid.to_string());
        if arrived {
            self.transactions.append(prepared_row(txn, p.prepare_ts, at));
        }
        self.after_prepare(replaced, arrived);
        Ok(())
    }

    fn on_logical_message(&mut self, m: &LogicalMessage<'_>, message: &Message<'_>, at: &At<'_>) -> Fallible<()> {
        if !m.transactional {
            // Sent as soon as it is decoded, outside any transaction.
            self.begin_emit();
            self.messages.append(m.prefix, m.content, m.lsn.0, at.seq, None);
            self.row_added_meta();
            self.finished_end = self.finished_end.max(at.lsn);
            return Ok(());
        }
        self.open_txn(at, "Message")?;
        self.change(message, m.xid, 0, at)
    }

    fn on_stream_start(&mut self, s: &StreamStart, at: &At<'_>) -> Fallible<()> {
        let (_, restarted) =
            self.framing.stream_start(s.xid, s.first_segment, || Box::new(Txn::new(s.xid, at.lsn, true))).map_err(|e| framing_error(at, e))?;
        // A first segment for a transaction already open means the stream was started
        // again (a reconnection): what it had is sent anew.
        if let Some(old) = restarted {
            self.buffered = self.buffered.saturating_sub(old.memory);
            self.catalog.drop_scope(s.xid);
        }
        Ok(())
    }

    fn on_stream_commit(&mut self, c: &StreamCommit, at: &At<'_>) -> Fallible<()> {
        let txn = self.framing.stream_commit(c.xid).map_err(|e| framing_error(at, e))?;
        self.catalog.commit_scope(c.xid);
        self.finish_txn(txn, Finish::committed(c.commit_lsn.0, c.end_lsn.0, c.commit_ts, "committed", at))
    }

    fn on_stream_abort(&mut self, a: &StreamAbort, at: &At<'_>) {
        let end_lsn = a.abort_lsn.map(|l| l.0);
        let arrived = self.arrived;
        match self.framing.stream_abort(a.xid, a.subxid) {
            // PostgreSQL 18 reports aborts of transactions it never streamed
            // (connections without streaming): nothing to drop then.
            StreamAborted::Transaction(None) | StreamAborted::Subtransaction(None) => {}
            StreamAborted::Transaction(Some(txn)) => {
                self.catalog.drop_scope(a.xid);
                self.buffered = self.buffered.saturating_sub(txn.memory);
                self.begin_emit();
                self.transactions.append(TxnRow {
                    xid: txn.xid,
                    begin_lsn: Some(txn.begin_lsn),
                    commit_lsn: None,
                    end_lsn,
                    commit_ts: a.abort_ts,
                    origin: txn.origin.as_ref().map(|(n, l)| (n.as_str(), *l)),
                    gid: None,
                    outcome: "aborted",
                    streamed: true,
                    changes: if arrived { txn.changes } else { 0 },
                    seq: at.seq,
                });
                self.row_added_meta();
                self.finished_end = self.finished_end.max(end_lsn.unwrap_or(at.lsn));
            }
            StreamAborted::Subtransaction(Some(txn)) => {
                let freed = txn.abort_subtransaction(a.subxid);
                self.buffered = self.buffered.saturating_sub(freed);
                if arrived {
                    self.begin_emit();
                    self.transactions.append(TxnRow {
                        xid: a.subxid,
                        begin_lsn: None,
                        commit_lsn: None,
                        end_lsn,
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
    }

    fn on_stream_prepare(&mut self, p: &Prepare<'_>, at: &At<'_>) -> Fallible<()> {
        let arrived = self.arrived;
        if arrived {
            self.begin_emit();
        }
        let (txn, replaced) = self.framing.stream_prepare(p.xid, p.gid, p.prepare_lsn).map_err(|e| framing_error(at, e))?;
        txn.gid = Some(p.gid.to_string());
        if arrived {
            self.transactions.append(prepared_row(txn, p.prepare_ts, at));
        }
        self.catalog.commit_scope(p.xid);
        self.after_prepare(replaced, arrived);
        Ok(())
    }

    fn on_commit_prepared(&mut self, c: &CommitPrepared<'_>, at: &At<'_>) -> Fallible<()> {
        let txn = self.framing.commit_prepared(c.gid, c.xid).map_err(|e| framing_error(at, e))?;
        self.finish_txn(txn, Finish::committed(c.commit_lsn.0, c.end_lsn.0, c.commit_ts, "prepared-committed", at))
    }

    fn on_rollback_prepared(&mut self, r: &RollbackPrepared<'_>, at: &At<'_>) {
        // A transaction prepared before this decoder started is rolled back too: there is
        // nothing of it to drop, and its outcome is recorded.
        let txn = self.framing.rollback_prepared(r.gid);
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

    /// The transaction a change belongs to: the stream block's, or the open one.
    fn open_txn(&mut self, at: &At<'_>, kind: &'static str) -> Fallible<&mut Txn> {
        match self.framing.open_mut() {
            Some(t) => Ok(&mut **t),
            None => Err(at.protocol(kind, format!("{kind} outside a transaction"))),
        }
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
            .lookup(relation_id, self.framing.stream_block())
            .ok_or_else(|| DecodeError::UnknownRelation { relation_id, lsn: at.lsn })?;
        let rel = self.catalog.version(schema_id);
        for t in std::iter::once(row).chain(old) {
            if t.len() != rel.columns.len() {
                return Err(at.protocol(
                    "change",
                    format!(
                        "a tuple of {} values for {} (relation id {relation_id}), whose Relation message announced {} columns",
                        t.len(),
                        rel.table,
                        rel.columns.len()
                    ),
                ));
            }
        }
        Ok(schema_id)
    }

    /// A change (or transactional message) of the open transaction: buffered, or
    /// decoded at once in Arrived mode or when its transaction is sent whole.
    fn change(&mut self, message: &Message<'_>, carried_xid: Option<Xid>, aux: u32, at: &At<'_>) -> Fallible<()> {
        let kind = message.kind_name();
        let is_row = matches!(message, Message::Insert(_) | Message::Update(_) | Message::Delete(_));
        let ctx = |subxid| MessageCtx {
            base: at.base,
            buffer_id: at.buffer_id,
            message: at.bytes(),
            lsn: at.lsn,
            seq: at.seq,
            subxid,
            zero_copy: at.zero_copy(),
        };
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
            self.begin_emit();
            return self.decode(message, aux, names.as_deref(), &ctx(carried_xid), &meta, false).map(|_| ()).inspect_err(
                |_| {
                    self.stopped.get_or_insert_with(|| "a change could not be decoded".into());
                },
            );
        }
        if !at.in_stream && is_row {
            if let Some(t) = self.framing.current_mut().filter(|t| t.direct) {
                t.changes += 1;
                t.direct_rows += 1;
                let meta = TxnMeta { commit_lsn: t.final_lsn, commit_ts: t.commit_ts, xid: t.xid, status: None };
                let full = self.decode(message, aux, None, &ctx(None), &meta, true)?;
                if let Some(t) = self.framing.current_mut() {
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

    /// Keeps buffered memory under the limit by spilling the largest transactions.
    fn maybe_spill(&mut self) -> Fallible<()> {
        if self.buffered <= self.opts.memory_limit {
            return Ok(());
        }
        let dir = self.opts.spill_dir.clone();
        while self.buffered > self.opts.memory_limit / 2 {
            let largest = self.framing.pending_iter_mut().max_by_key(|t| t.memory);
            let Some(txn) = largest.filter(|t| t.memory > 0) else { break };
            let freed = txn.spill(dir.as_deref())?;
            self.buffered = self.buffered.saturating_sub(freed);
        }
        Ok(())
    }

    /// After Prepare or Stream Prepare: `replaced`, prepared earlier under the same gid,
    /// is the prepare sent anew after a reconnection.
    fn after_prepare(&mut self, replaced: Option<Box<Txn>>, recorded: bool) {
        if let Some(old) = replaced {
            self.buffered = self.buffered.saturating_sub(old.memory);
        }
        if recorded {
            self.row_added_meta();
        }
    }

    /// Decodes a finished transaction's changes into the builders and records it.
    fn finish_txn(&mut self, mut txn: Box<Txn>, fin: Finish) -> Fallible<()> {
        self.buffered = self.buffered.saturating_sub(txn.memory);
        self.begin_emit();
        let meta = TxnMeta { commit_lsn: fin.commit_lsn, commit_ts: fin.ts, xid: txn.xid, status: None };
        let mut emitted = txn.direct_rows;
        self.commit_direct_rows(&txn.touched, fin.commit_lsn.zip(fin.ts))?;
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
        self.flush_after_commit(&txn.touched)?;
        self.spare_txn = Some(txn);
        Ok(())
    }
}
