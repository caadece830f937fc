//! Row emission: changes appended to the builders of their table (or of the truncates and
//! messages tables), builders turned into [`Output`] batches when full, when their table
//! changes definition, or on flush; the rows of a transaction not committed yet held back.

use std::sync::Arc;

use arrow_array::RecordBatch;
use pgoutput_proto::{Cell, Message, TupleData};

use super::Decoder;
use crate::error::{DecodeError, Fallible};
use crate::output::Output;
use crate::table::{MessageCtx, Op, TableBuilder, TxnMeta};

impl Decoder {
    /// Decodes one change into the builders. `direct`: the row belongs to the open
    /// transaction, not committed yet; returns whether its builder is full then.
    pub(super) fn decode(
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

    /// At the Commit of a transaction whose rows went to the builders as they arrived
    /// (`touched`: their schema ids): they are committed now, with the commit's LSN and
    /// timestamp, and those cut out of full builders before come out.
    pub(super) fn commit_direct_rows(&mut self, touched: &[u32], commit: Option<(u64, i64)>) -> Fallible<()> {
        for &sid in touched {
            let Some(b) = self.tables.get_mut(sid as usize).and_then(|b| b.as_mut()) else { continue };
            if let Some((lsn, ts)) = commit {
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
        for &sid in touched {
            if self.tables[sid as usize].as_ref().is_some_and(|b| b.full(self.opts.batch_size)) {
                self.flush_table(sid as usize)?;
            }
        }
        Ok(())
    }

    /// After a transaction is decoded: builders that grew past the batch size while its
    /// rows waited, or whose table changed definition meanwhile, come out.
    pub(super) fn flush_after_commit(&mut self, touched: &[u32]) -> Fallible<()> {
        for &sid in touched {
            let Some(b) = self.tables.get(sid as usize).and_then(|b| b.as_ref()) else { continue };
            let active = self.active.get(b.rel.table_index as usize).copied().flatten() == Some(sid);
            if b.full(self.opts.batch_size) || !active {
                self.flush_table(sid as usize)?;
            }
        }
        Ok(())
    }

    /// The open transaction sent whole filled the builder `sid`: the builder's
    /// committed rows go out and the transaction's own wait in `carries` for the
    /// Commit, so that its next rows still go straight to the builders. Once what
    /// waits so would pass half the memory limit, the rest of the transaction waits
    /// as messages instead, which can spill.
    pub(super) fn cut_full_builder(&mut self, sid: u32) -> Fallible<()> {
        let held = self.tables.get(sid as usize).and_then(|b| b.as_ref()).map_or(0, |b| b.memory_estimate());
        let Some(txn) = self.framing.current_mut() else { return Ok(()) };
        if txn.carried + held > self.opts.memory_limit / 2 {
            txn.direct = false;
            return Ok(());
        }
        txn.carried += held;
        self.flush_table(sid as usize)
    }

    /// Called before rows are added: remembers what was safe while nothing was pending.
    pub(super) fn begin_emit(&mut self) {
        if self.unflushed_rows == 0 {
            self.safe_at_empty = self.finished_end;
        }
    }

    /// A row was added to the truncates, messages or transactions builder.
    pub(super) fn row_added_meta(&mut self) {
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
            let batch: RecordBatch = if committed < rows { batch.slice(0, committed) } else { batch };
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

    pub(super) fn flush_all(&mut self) -> Fallible<()> {
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
}
