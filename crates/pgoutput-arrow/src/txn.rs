//! Open transactions: the messages they buffered until their outcome is known.
//!
//! A buffered message is a cheap clone of the Arrow buffer it arrived in and its
//! range there, never a copy. Beyond the decoder's memory limit the oldest
//! buffered messages of the largest transactions go to a spill file; at commit
//! the spilled prefix is read back before the in-memory suffix, so order holds.

use std::path::Path;
use std::sync::Arc;

use arrow_buffer::Buffer;
use pgoutput_proto::Xid;

use crate::error::Fallible;
use crate::spill::{EntryHeader, SpillFile};

pub(crate) struct Entry {
    pub h: EntryHeader,
    /// The buffer the message arrived in (a whole capture's values, or the message).
    pub base: Buffer,
    pub buffer_id: u64,
    pub start: usize,
    pub len: usize,
}

/// Memory a buffered message costs besides its bytes.
pub(crate) const ENTRY_COST: usize = std::mem::size_of::<Entry>();

/// Memory a buffered message holds: its bytes, its bookkeeping, and the
/// allocation of its own buffer when it came alone (not a slice of a capture).
fn entry_cost(e: &Entry) -> usize {
    let own_allocation = if e.base.len() == e.len { OWN_BUFFER_COST } else { 0 };
    e.len + ENTRY_COST + own_allocation
}

/// What an Arrow buffer of its own costs besides its bytes (the shared `Bytes`
/// header and the allocator's overhead), roughly.
const OWN_BUFFER_COST: usize = 96;

/// A buffered message handed back for decoding.
pub(crate) struct EntryRef<'a> {
    pub h: EntryHeader,
    pub base: &'a Buffer,
    pub buffer_id: u64,
    pub message: &'a [u8],
    /// Whether output values may reference `base` (see `MessageCtx::zero_copy`).
    pub zero_copy: bool,
}

pub(crate) struct Txn {
    /// The top-level transaction id.
    pub xid: Xid,
    /// LSN and stream position of its first message (Begin, Begin Prepare or the
    /// first Stream Start).
    pub begin_lsn: u64,
    /// From Begin: the commit LSN and timestamp, known in advance.
    pub final_lsn: Option<u64>,
    pub commit_ts: Option<i64>,
    pub origin: Option<(String, u64)>,
    pub gid: Option<String>,
    pub streamed: bool,
    /// Messages in memory, after those in `spill`.
    pub entries: Vec<Entry>,
    pub memory: usize,
    pub spill: Option<SpillFile>,
    /// Subtransactions rolled back (ROLLBACK TO SAVEPOINT): their messages are skipped.
    pub aborted_subxids: Vec<Xid>,
    /// The relations of each buffered Truncate, resolved when it arrived.
    pub truncates: Vec<Arc<[Arc<str>]>>,
    /// Row changes buffered (Insert, Update, Delete), aborted subtransactions included.
    pub changes: u64,
    /// Decoded into the builders as they arrive (a transaction sent whole, Begin …
    /// Commit, while the rows it cut out of full builders stay under half the memory
    /// limit); the rows wait there, or in `Decoder::carries`, for the Commit.
    pub direct: bool,
    /// Rows decoded that way, and the builders (schema ids) that hold them.
    pub direct_rows: u64,
    pub touched: Vec<u32>,
    /// Estimated bytes of its rows cut out of full builders to wait for the Commit
    /// (`Decoder::cut_full_builder`).
    pub carried: usize,
}

impl Txn {
    pub fn new(xid: Xid, begin_lsn: u64, streamed: bool) -> Self {
        Txn {
            xid,
            begin_lsn,
            final_lsn: None,
            commit_ts: None,
            origin: None,
            gid: None,
            streamed,
            entries: Vec::new(),
            memory: 0,
            spill: None,
            aborted_subxids: Vec::new(),
            truncates: Vec::new(),
            changes: 0,
            direct: false,
            direct_rows: 0,
            touched: Vec::new(),
            carried: 0,
        }
    }

    /// Makes a finished transaction's allocation the next one's, keeping the capacity of
    /// `touched` (a transaction per few messages: a malloc and a free each otherwise).
    pub fn renew(&mut self, xid: Xid, begin_lsn: u64, streamed: bool) {
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        *self = Txn::new(xid, begin_lsn, streamed);
        self.touched = touched;
    }

    /// Buffers a message; returns the memory it costs.
    pub fn push(&mut self, entry: Entry) -> usize {
        let cost = entry_cost(&entry);
        self.entries.push(entry);
        self.memory += cost;
        cost
    }

    /// Writes the in-memory messages to the spill file; returns the memory freed.
    pub fn spill(&mut self, dir: Option<&Path>) -> Fallible<usize> {
        if self.entries.is_empty() {
            return Ok(0);
        }
        let file = match &mut self.spill {
            Some(file) => file,
            None => self.spill.insert(SpillFile::new(dir)?),
        };
        for e in &self.entries {
            file.write(&e.h, &e.base.as_slice()[e.start..e.start + e.len])?;
        }
        self.entries = Vec::new();
        Ok(std::mem::take(&mut self.memory))
    }

    pub fn spilled_bytes(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.bytes())
    }

    /// Drops the changes of a rolled-back subtransaction; returns the memory freed.
    pub fn abort_subtransaction(&mut self, subxid: Xid) -> usize {
        // Spilled messages cannot be removed from the file: they are skipped on replay.
        if !self.aborted_subxids.contains(&subxid) {
            self.aborted_subxids.push(subxid);
        }
        let before = self.memory;
        self.entries.retain(|e| !(e.h.in_stream && e.h.xid == subxid));
        self.memory = self.entries.iter().map(entry_cost).sum();
        before - self.memory
    }

    /// Hands every buffered message to `f` in arrival order (spilled ones first),
    /// skipping those of rolled-back subtransactions.
    pub fn replay(
        &mut self,
        next_buffer_id: &mut u64,
        mut f: impl FnMut(EntryRef<'_>) -> Fallible<()>,
    ) -> Fallible<()> {
        self.aborted_subxids.sort_unstable();
        let skip = |h: &EntryHeader, aborted: &[Xid]| {
            h.in_stream && !aborted.is_empty() && aborted.binary_search(&h.xid).is_ok()
        };
        if let Some(spill) = self.spill.take() {
            let mut reader = spill.into_reader()?;
            while let Some(chunk) = reader.next_chunk()? {
                let buffer_id = *next_buffer_id;
                *next_buffer_id += 1;
                for &(h, start, len) in &chunk.entries {
                    if skip(&h, &self.aborted_subxids) {
                        continue;
                    }
                    // Values read back from disk are copied, so that each chunk is freed
                    // once decoded rather than kept alive by the output.
                    f(EntryRef {
                        h,
                        base: &chunk.buffer,
                        buffer_id,
                        message: &chunk.buffer.as_slice()[start..start + len],
                        zero_copy: false,
                    })?;
                }
            }
        }
        for e in &self.entries {
            if skip(&e.h, &self.aborted_subxids) {
                continue;
            }
            f(EntryRef {
                h: e.h,
                base: &e.base,
                buffer_id: e.buffer_id,
                message: &e.base.as_slice()[e.start..e.start + e.len],
                zero_copy: e.base.len() > e.len,
            })?;
        }
        Ok(())
    }
}
