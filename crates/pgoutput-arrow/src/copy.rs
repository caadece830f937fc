//! The rows of an initial snapshot: `COPY ... TO STDOUT (FORMAT binary)` decoded into the
//! table's own RecordBatches, by the same per-type binary decoders as the stream's binary
//! mode (COPY's binary format carries each value in its type's send format, as pgoutput's
//! `binary 'true'` does).
//!
//! Follows the "Binary Format" part of the COPY reference page (PostgreSQL 18): an 11-byte
//! signature `PGCOPY\n\377\r\n\0`, an Int32 flags field (bit 16: OIDs included; bits 17–31
//! must be zero), an Int32 header extension length and that many bytes; then tuples, each an
//! Int16 field count and per field an Int32 length (-1: NULL) and that many bytes; then the
//! trailer, an Int16 -1.
//!
//! The bytes may be pushed in pieces cut anywhere (libpq hands one CopyData message per row,
//! but nothing here relies on it). Rows come out as [`Op::Snapshot`] rows of the relation's
//! schema (what the stream decoder gives a relation of that definition): `_op` `snapshot`,
//! `_lsn` and `_commit_lsn` the slot's consistent point, `_commit_ts` the snapshot's time,
//! `_xid` 0, `_seq` counting up from the caller's first (negative, so that ordering by
//! `_commit_lsn, _seq` puts every snapshot row before every change of the stream).

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_schema::SchemaRef;
use pgoutput_proto::{Cell, Relation, TypeInfo};

use crate::catalog::Catalog;
use crate::error::DecodeError;
use crate::options::DecoderOptions;
use crate::table::{MessageCtx, TableBuilder, TxnMeta};

/// The signature that starts every binary COPY stream.
pub const COPY_SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Where the snapshot's rows stand in the change stream.
#[derive(Clone, Copy, Debug)]
pub struct SnapshotPosition {
    /// The slot's consistent point: `_lsn` and `_commit_lsn` of every row.
    pub lsn: u64,
    /// PostgreSQL microseconds since 2000-01-01: `_commit_ts` of every row.
    pub commit_ts: i64,
    /// `_seq` of the first row; each next row has one more.
    pub first_seq: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Header,
    Rows,
    Done,
}

/// Buffers at least this large are referenced by view columns instead of copied.
const ZERO_COPY_MIN: usize = 64 << 10;

/// Decodes one `COPY (SELECT <the published columns>) TO STDOUT (FORMAT binary)` stream of
/// one relation into RecordBatches of its schema.
pub struct CopyDecoder {
    builder: TableBuilder,
    /// Per column: its values come as text (`col::text`), see [`CopyDecoder::text_columns`].
    text: Vec<bool>,
    state: State,
    /// Bytes of an incomplete header or tuple, kept until the rest is pushed.
    carry: Vec<u8>,
    /// Bytes of the COPY data before the first byte not yet parsed.
    consumed: u64,
    rows: u64,
    position: SnapshotPosition,
    meta: TxnMeta,
    batch_size: usize,
    ready: Vec<RecordBatch>,
    buffers: u64,
    /// An error stopped the decoder; later calls repeat it.
    failed: Option<String>,
}

impl CopyDecoder {
    /// A decoder for the rows of `relation` (its published columns, in order; `types`: the
    /// Type messages its non-built-in column types would come with), typed as `options`
    /// say (its `types` and `batch_size`; `types.binary` as the stream is started).
    pub fn new(
        relation: &Relation<'_>,
        types: &[TypeInfo<'_>],
        options: &DecoderOptions,
        position: SnapshotPosition,
    ) -> Result<Self, DecodeError> {
        let mut catalog = Catalog::default();
        for t in types {
            catalog.type_message(t.oid, t.namespace, t.name);
        }
        let id = catalog.relation(&Relation { xid: None, ..relation.clone() }, None);
        let rel = catalog.version(id).clone();
        let builder = TableBuilder::new(rel, &options.types, false);
        let text = builder.send_format_columns().into_iter().map(|b| !b).collect();
        Ok(CopyDecoder {
            builder,
            text,
            state: State::Header,
            carry: Vec::new(),
            consumed: 0,
            rows: 0,
            position,
            meta: TxnMeta { commit_lsn: Some(position.lsn), commit_ts: Some(position.commit_ts), xid: 0, status: None },
            batch_size: options.batch_size.max(1),
            ready: Vec::new(),
            buffers: 0,
            failed: None,
        })
    }

    /// Which columns must be selected as text (`col::text`) rather than as themselves: those
    /// whose send format this crate cannot turn into the value the stream's column holds
    /// (in a text-mode stream, types that are kept as PostgreSQL's text output).
    pub fn text_columns(&self) -> &[bool] {
        &self.text
    }

    /// The schema of the batches (it may change as [`TableBuilder`]'s does: a list column
    /// takes the depth of its first non-empty array).
    pub fn schema(&self) -> SchemaRef {
        self.builder.schema.clone()
    }

    /// Rows decoded so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Whether the trailer was read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes of COPY data taken so far.
    pub fn bytes(&self) -> u64 {
        self.consumed + self.carry.len() as u64
    }

    /// The next piece of the COPY data.
    pub fn push(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        self.push_buffer(Buffer::from(data))
    }

    /// The next piece of the COPY data, as a buffer that view columns may reference.
    pub fn push_buffer(&mut self, data: Buffer) -> Result<(), DecodeError> {
        if let Some(e) = &self.failed {
            return Err(DecodeError::Stopped(e.clone()));
        }
        let buffer = if self.carry.is_empty() {
            data
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(data.as_slice());
            Buffer::from_vec(joined)
        };
        let result = self.parse(&buffer);
        if let Err(e) = &result {
            self.failed = Some(e.to_string());
        }
        result
    }

    /// Batches completed so far.
    pub fn take_ready(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.ready)
    }

    /// The end of the COPY data: the last batch (none when no row is left). An error when
    /// the data stopped before its trailer.
    pub fn finish(&mut self) -> Result<Vec<RecordBatch>, DecodeError> {
        if let Some(e) = &self.failed {
            return Err(DecodeError::Stopped(e.clone()));
        }
        if self.state != State::Done {
            let what = match self.state {
                State::Header if self.consumed == 0 => "in its header".to_string(),
                _ if !self.carry.is_empty() => format!("inside row {}", self.rows + 1),
                _ => "before its trailer".to_string(),
            };
            let e = self.error(self.bytes(), None, format!("the COPY data ended {what} (truncated)"));
            self.failed = Some(e.to_string());
            return Err(e);
        }
        if self.builder.len() > 0 {
            self.cut()?;
        }
        Ok(self.take_ready())
    }

    fn error(&self, offset: u64, column: Option<usize>, message: String) -> DecodeError {
        DecodeError::Copy {
            table: self.builder.rel.table.to_string(),
            row: self.rows + 1,
            column: column.map(|i| self.builder.rel.columns[i].name.clone()),
            offset,
            message,
        }
    }

    fn cut(&mut self) -> Result<(), DecodeError> {
        let batch = self.builder.finish().map_err(|e| *e)?;
        self.ready.push(batch);
        Ok(())
    }

    fn parse(&mut self, buffer: &Buffer) -> Result<(), DecodeError> {
        let data = buffer.as_slice();
        let mut at = 0usize;
        if self.state == State::Header {
            match self.header(data)? {
                Some(n) => {
                    at = n;
                    self.state = State::Rows;
                }
                None => {
                    self.carry = data.to_vec();
                    return Ok(());
                }
            }
        }
        self.buffers += 1;
        let ctx = MessageCtx {
            base: buffer,
            buffer_id: self.buffers,
            message: data,
            lsn: self.position.lsn,
            seq: 0,
            subxid: None,
            zero_copy: data.len() >= ZERO_COPY_MIN,
        };
        let columns = self.text.len();
        while at < data.len() {
            let here = self.consumed + at as u64;
            if self.state == State::Done {
                return Err(self.error(
                    here,
                    None,
                    format!("{} bytes after the trailer", data.len() - at),
                ));
            }
            let Some(count) = data.get(at..at + 2) else { break };
            let count = i16::from_be_bytes([count[0], count[1]]);
            if count == -1 {
                self.state = State::Done;
                at += 2;
                continue;
            }
            if count as i64 != columns as i64 {
                return Err(self.error(
                    here,
                    None,
                    format!("a tuple of {count} fields, but the table has {columns} columns selected"),
                ));
            }
            // First pass: the whole tuple is here and every length is valid.
            let mut end = at + 2;
            let mut complete = true;
            for i in 0..columns {
                let Some(len) = data.get(end..end + 4) else {
                    complete = false;
                    break;
                };
                let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
                end += 4;
                if len == -1 {
                    continue;
                }
                if len < 0 {
                    return Err(self.error(
                        self.consumed + end as u64 - 4,
                        Some(i),
                        format!("a field length of {len} (expected -1 for NULL or a length of 0 or more)"),
                    ));
                }
                if data.len() - end < len as usize {
                    complete = false;
                    break;
                }
                end += len as usize;
            }
            if !complete {
                break;
            }
            let cells = Fields { data: &data[at + 2..end], text: &self.text, column: 0 };
            let ctx = MessageCtx { seq: self.position.first_seq.wrapping_add(self.rows as i64) as u64, ..ctx };
            if let Err(e) = self.builder.append_snapshot(cells, &ctx, &self.meta) {
                return Err(match *e {
                    DecodeError::Value { column, offset, message, .. } => {
                        let i = self.builder.rel.columns.iter().position(|c| c.name == column);
                        self.error(self.consumed + offset as u64, i, message)
                    }
                    other => other,
                });
            }
            self.rows += 1;
            at = end;
            if self.builder.full(self.batch_size) {
                self.cut()?;
            }
        }
        self.consumed += at as u64;
        if at < data.len() {
            self.carry = data[at..].to_vec();
        }
        Ok(())
    }

    /// The header's length, or None when it is not all here yet.
    fn header(&self, data: &[u8]) -> Result<Option<usize>, DecodeError> {
        let sig = &data[..data.len().min(COPY_SIGNATURE.len())];
        if sig != &COPY_SIGNATURE[..sig.len()] {
            return Err(self.error(0, None, format!("not binary COPY data: it starts with {:?}", sig.escape_ascii().to_string())));
        }
        let Some(fixed) = data.get(11..19) else { return Ok(None) };
        let flags = u32::from_be_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]);
        if flags & (1 << 16) != 0 {
            return Err(self.error(11, None, "the COPY data includes OIDs (WITH OIDS), which it never asks for".into()));
        }
        if flags >> 17 != 0 {
            return Err(self.error(11, None, format!("unknown critical flags 0x{flags:08x} in the COPY header")));
        }
        let ext = i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        if ext < 0 {
            return Err(self.error(15, None, format!("a header extension length of {ext}")));
        }
        let end = 19 + ext as usize;
        Ok((data.len() >= end).then_some(end))
    }
}

/// The cells of one tuple whose lengths were checked.
struct Fields<'a> {
    data: &'a [u8],
    text: &'a [bool],
    column: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Cell<'a>;

    #[inline]
    fn next(&mut self) -> Option<Cell<'a>> {
        let (len, rest) = self.data.split_first_chunk::<4>()?;
        let len = i32::from_be_bytes(*len);
        let text = self.text.get(self.column).copied().unwrap_or(false);
        self.column += 1;
        if len < 0 {
            self.data = rest;
            return Some(Cell::Null);
        }
        let (value, rest) = rest.split_at_checked(len as usize)?;
        self.data = rest;
        Some(if text { Cell::Text(value) } else { Cell::Binary(value) })
    }
}

#[cfg(test)]
mod tests;
