//! Input: messages pushed one at a time, as an Arrow binary array (a capture's `data`
//! column) or as a BinaryView array, each message kept as a slice of the buffer it came in;
//! and the short path of the common row change of a transaction sent whole.

use arrow_array::{Array, BinaryViewArray, GenericBinaryArray, OffsetSizeTrait};
use arrow_buffer::Buffer;
use pgoutput_proto::{parse_message, parse_row_change, ChangeKind, Lsn, RowChange};

use std::collections::HashSet;

use super::{stops, At, Decoder};
use crate::canonical::{self, CaptureRow, MessageSink, RelationCatalog};
use crate::catalog::Catalog;
use crate::error::{DecodeError, Fallible};
use crate::table::{MessageCtx, Op, TxnMeta};

/// The schema ids of the last few relation ids looked up outside a stream, while the
/// catalog's global definitions stay as they were: a transaction touches a few tables
/// in turn (pgbench: four), and this costs less than the hash lookup per change.
#[derive(Default)]
pub(super) struct RecentRelations {
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
    pub(super) fn new_buffer_id(&mut self) -> u64 {
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

    /// The rebuild of `rows` ([`canonical::rebuild`]: whole transactions in any order, the
    /// `pieces` framed from the `catalog`), fed as it is made: a row's own message is
    /// referenced in whichever of `buffers` holds it (the buffers the rows' messages are
    /// slices of), not copied into a rebuilt stream first; the messages the rebuild injects
    /// (definitions, framing, stream edges) are copied. Stops at the first error.
    pub fn push_canonical(
        &mut self,
        rows: &[CaptureRow<'_>],
        buffers: &[Buffer],
        catalog: &RelationCatalog,
        history: bool,
        pieces: &HashSet<u64>,
    ) -> Result<(), DecodeError> {
        let buffers: Vec<(Buffer, u64)> = buffers.iter().map(|b| (b.clone(), self.new_buffer_id())).collect();
        let mut sink = InPlace { decoder: self, buffers, last: 0 };
        canonical::rebuild(rows, catalog, history, pieces, &mut sink)
    }

    #[inline]
    fn push_slice(&mut self, lsn: u64, base: &Buffer, buffer_id: u64, start: usize, len: usize) -> Fallible<()> {
        if let Some(why) = &self.stopped {
            return Err(Box::new(DecodeError::Stopped(why.clone())));
        }
        let seq = self.seq;
        self.seq += 1;
        let bytes = &base.as_slice()[start..start + len];
        // Inside a stream block, changes carry an xid: the short path reads only those outside.
        let in_stream = self.framing.stream_block().is_some();
        let at = At { lsn, seq, base, buffer_id, start, len, in_stream };
        let direct = if in_stream { None } else { parse_row_change(bytes).and_then(|c| self.direct_change(&c, &at)) };
        let result = match direct {
            Some(result) => result,
            None => match parse_message(bytes, in_stream) {
                Ok(message) => self.handle(message, &at),
                Err(source) => return Err(Box::new(DecodeError::Parse { lsn, index: seq, source })),
            },
        };
        result.inspect_err(|e| {
            if stops(e) {
                self.stopped = Some(e.to_string());
            }
        })
    }

    /// A row change of a transaction sent whole whose rows go to the builders as they
    /// arrive (`Txn::direct`), the common case: appended with one relation lookup and no
    /// [`Message`](pgoutput_proto::Message). It does what `handle` → `check_change` →
    /// `change` → `decode` → `append_row` do for such a change, and returns None, having
    /// changed nothing, for anything else (an unknown relation, tuples that do not fit it,
    /// a table whose builder is not made yet or not in force), which then takes that path
    /// and gets its errors from there.
    #[inline]
    fn direct_change(&mut self, change: &RowChange<'_>, at: &At<'_>) -> Option<Fallible<()>> {
        if self.arrived || self.framing.stream_block().is_some() {
            return None;
        }
        let txn = self.framing.current_mut().filter(|t| t.direct)?;
        let schema_id = self.recent_relations.lookup(&self.catalog, change.relation_id)?;
        let old = change.old.as_ref().map(|o| o.tuple());
        let (op, row) = match (change.kind, &change.new, old) {
            (ChangeKind::Insert, Some(new), None) => (Op::Insert, *new),
            (ChangeKind::Update, Some(new), _) => (Op::Update, *new),
            (ChangeKind::Delete, None, Some(old)) => (Op::Delete, old.unchecked()),
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
        let meta = TxnMeta { commit_lsn: txn.final_lsn, commit_ts: txn.commit_ts, xid: txn.xid, status: None };
        let ctx = MessageCtx {
            base: at.base,
            buffer_id: at.buffer_id,
            message: at.bytes(),
            lsn: at.lsn,
            seq: at.seq,
            subxid: None,
            zero_copy: at.zero_copy(),
        };
        // A malformed new tuple leaves the builder as it was: the message then takes the
        // parser's path, which reports it.
        let appended = builder.append_unchecked(op, &row, old, &ctx, &meta).ok()?;
        txn.changes += 1;
        txn.direct_rows += 1;
        if let Err(e) = appended {
            return Some(Err(e));
        }
        let full = builder.full(self.opts.batch_size);
        if !txn.touched.contains(&schema_id) {
            txn.touched.push(schema_id);
        }
        Some(if full { self.cut_full_builder(schema_id) } else { Ok(()) })
    }
}

/// A [`MessageSink`] into a decoder that references each message in the buffer holding it
/// ([`Decoder::push_canonical`]).
struct InPlace<'d> {
    decoder: &'d mut Decoder,
    /// The buffers messages may lie in, and their ids for the decoder.
    buffers: Vec<(Buffer, u64)>,
    /// The buffer the last message was found in (rows come mostly from one).
    last: usize,
}

impl InPlace<'_> {
    /// The buffer holding all of `data`, and where it starts there.
    fn holder(&mut self, data: &[u8]) -> Option<(usize, usize)> {
        let start = data.as_ptr() as usize;
        let end = start.checked_add(data.len())?;
        let within = |b: &Buffer| {
            let base = b.as_ptr() as usize;
            (start >= base && end <= base + b.len()).then(|| start - base)
        };
        if let Some(offset) = self.buffers.get(self.last).and_then(|(b, _)| within(b)) {
            return Some((self.last, offset));
        }
        let (k, offset) = self.buffers.iter().enumerate().find_map(|(k, (b, _))| within(b).map(|o| (k, o)))?;
        self.last = k;
        Some((k, offset))
    }
}

impl MessageSink for InPlace<'_> {
    fn push(&mut self, lsn: u64, data: &[u8]) -> Result<(), DecodeError> {
        match self.holder(data) {
            Some((k, offset)) => {
                let (buffer, id) = &self.buffers[k];
                self.decoder.push_slice(lsn, buffer, *id, offset, data.len()).map_err(|e| *e)
            }
            None => self.decoder.push(lsn, &Buffer::from(data.to_vec())),
        }
    }
}
