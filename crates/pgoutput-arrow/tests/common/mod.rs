//! Hand-built pgoutput streams for the decoder's tests, encoded as PostgreSQL 18
//! sends them (section 54.9 of the documentation).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use arrow_array::{Array, BinaryArray, RecordBatch};
use arrow_buffer::Buffer;
use pgoutput_arrow::{Changes, Decoder, DecoderOptions};

/// One TupleData cell.
#[derive(Clone, Debug)]
pub enum C {
    /// 'n'
    N,
    /// 'u': unchanged TOAST value
    U,
    /// 't'
    T(Vec<u8>),
    /// 'b'
    B(Vec<u8>),
}

pub fn t(s: &str) -> C {
    C::T(s.as_bytes().to_vec())
}

pub fn b(v: &[u8]) -> C {
    C::B(v.to_vec())
}

pub const INT4: u32 = 23;
pub const INT8: u32 = 20;
pub const TEXT: u32 = 25;
pub const BPCHAR: u32 = 1042;

/// A stream of (lsn, message) under construction. LSNs grow by 0x10 per message
/// unless given.
#[derive(Default)]
pub struct Stream {
    pub messages: Vec<(u64, Vec<u8>)>,
    pub next_lsn: u64,
    /// The top-level xid of the open stream block, if any (changes then carry an xid).
    pub in_stream: Option<u32>,
}

struct W(Vec<u8>);

impl W {
    fn k(kind: u8) -> Self {
        W(vec![kind])
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn s(mut self, v: &str) -> Self {
        self.0.extend_from_slice(v.as_bytes());
        self.0.push(0);
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    fn xid(self, xid: Option<u32>) -> Self {
        match xid {
            Some(x) => self.u32(x),
            None => self,
        }
    }
    fn tuple(mut self, cells: &[C]) -> Self {
        self.0.extend_from_slice(&(cells.len() as i16).to_be_bytes());
        for c in cells {
            match c {
                C::N => self.0.push(b'n'),
                C::U => self.0.push(b'u'),
                C::T(v) | C::B(v) => {
                    self.0.push(if matches!(c, C::T(_)) { b't' } else { b'b' });
                    self.0.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    self.0.extend_from_slice(v);
                }
            }
        }
        self
    }
}

/// Encodes one TupleData, for callers that build messages by hand.
pub fn tuple_bytes(cells: &[C]) -> Vec<u8> {
    W(Vec::new()).tuple(cells).0
}

/// Column of a Relation message: (name, type oid, typmod, key).
pub type Col<'a> = (&'a str, u32, i32, bool);

impl Stream {
    pub fn new() -> Self {
        Stream { next_lsn: 0x1000, ..Default::default() }
    }

    fn put(&mut self, w: W) -> u64 {
        let lsn = self.next_lsn;
        self.next_lsn += 0x10;
        self.messages.push((lsn, w.0));
        lsn
    }

    /// The xid that changes carry: the given subtransaction xid inside a stream
    /// block, else none.
    fn carried(&self, sub: Option<u32>) -> Option<u32> {
        self.in_stream.map(|top| sub.unwrap_or(top))
    }

    pub fn begin(&mut self, xid: u32, final_lsn: u64, ts: i64) -> u64 {
        self.put(W::k(b'B').u64(final_lsn).i64(ts).u32(xid))
    }

    pub fn commit(&mut self, commit_lsn: u64, end_lsn: u64, ts: i64) -> u64 {
        self.put(W::k(b'C').u8(0).u64(commit_lsn).u64(end_lsn).i64(ts))
    }

    pub fn origin(&mut self, name: &str, lsn: u64) -> u64 {
        self.put(W::k(b'O').u64(lsn).s(name))
    }

    pub fn relation(&mut self, id: u32, ns: &str, name: &str, ri: u8, cols: &[Col<'_>]) -> u64 {
        let mut w = W::k(b'R').xid(self.in_stream).u32(id).s(ns).s(name).u8(ri).i16(cols.len() as i16);
        for &(n, oid, typmod, key) in cols {
            w = w.u8(key as u8).s(n).u32(oid).i32(typmod);
        }
        self.put(w)
    }

    pub fn type_msg(&mut self, oid: u32, ns: &str, name: &str) -> u64 {
        self.put(W::k(b'Y').xid(self.in_stream).u32(oid).s(ns).s(name))
    }

    pub fn insert(&mut self, rel: u32, cells: &[C]) -> u64 {
        self.insert_sub(None, rel, cells)
    }

    /// An insert made by subtransaction `sub` inside a stream block.
    pub fn insert_sub(&mut self, sub: Option<u32>, rel: u32, cells: &[C]) -> u64 {
        let x = self.carried(sub);
        self.put(W::k(b'I').xid(x).u32(rel).u8(b'N').tuple(cells))
    }

    /// `old`: (b'K' or b'O', cells).
    pub fn update(&mut self, rel: u32, old: Option<(u8, &[C])>, new: &[C]) -> u64 {
        let x = self.carried(None);
        let mut w = W::k(b'U').xid(x).u32(rel);
        if let Some((kind, cells)) = old {
            w = w.u8(kind).tuple(cells);
        }
        self.put(w.u8(b'N').tuple(new))
    }

    pub fn delete(&mut self, rel: u32, kind: u8, old: &[C]) -> u64 {
        let x = self.carried(None);
        self.put(W::k(b'D').xid(x).u32(rel).u8(kind).tuple(old))
    }

    pub fn truncate(&mut self, rels: &[u32], cascade: bool, restart: bool) -> u64 {
        let x = self.carried(None);
        let mut w = W::k(b'T').xid(x).i32(rels.len() as i32).u8(cascade as u8 | (restart as u8) << 1);
        for &r in rels {
            w = w.u32(r);
        }
        self.put(w)
    }

    pub fn message(&mut self, transactional: bool, lsn: u64, prefix: &str, content: &[u8]) -> u64 {
        let x = if transactional { self.carried(None) } else { None };
        self.put(W::k(b'M').xid(x).u8(transactional as u8).u64(lsn).s(prefix).i32(content.len() as i32).raw(content))
    }

    pub fn stream_start(&mut self, xid: u32, first: bool) -> u64 {
        self.in_stream = Some(xid);
        self.put(W::k(b'S').u32(xid).u8(first as u8))
    }

    pub fn stream_stop(&mut self) -> u64 {
        self.in_stream = None;
        self.put(W::k(b'E'))
    }

    pub fn stream_commit(&mut self, xid: u32, commit_lsn: u64, end_lsn: u64, ts: i64) -> u64 {
        self.put(W::k(b'c').u32(xid).u8(0).u64(commit_lsn).u64(end_lsn).i64(ts))
    }

    pub fn stream_abort(&mut self, xid: u32, subxid: u32) -> u64 {
        self.put(W::k(b'A').u32(xid).u32(subxid))
    }

    pub fn stream_abort_parallel(&mut self, xid: u32, subxid: u32, lsn: u64, ts: i64) -> u64 {
        self.put(W::k(b'A').u32(xid).u32(subxid).u64(lsn).i64(ts))
    }

    pub fn begin_prepare(&mut self, xid: u32, gid: &str, prepare_lsn: u64, end_lsn: u64, ts: i64) -> u64 {
        self.put(W::k(b'b').u64(prepare_lsn).u64(end_lsn).i64(ts).u32(xid).s(gid))
    }

    pub fn prepare(&mut self, xid: u32, gid: &str, prepare_lsn: u64, end_lsn: u64, ts: i64) -> u64 {
        self.put(W::k(b'P').u8(0).u64(prepare_lsn).u64(end_lsn).i64(ts).u32(xid).s(gid))
    }

    pub fn stream_prepare(&mut self, xid: u32, gid: &str, prepare_lsn: u64, end_lsn: u64, ts: i64) -> u64 {
        self.put(W::k(b'p').u8(0).u64(prepare_lsn).u64(end_lsn).i64(ts).u32(xid).s(gid))
    }

    pub fn commit_prepared(&mut self, xid: u32, gid: &str, commit_lsn: u64, end_lsn: u64, ts: i64) -> u64 {
        self.put(W::k(b'K').u8(0).u64(commit_lsn).u64(end_lsn).i64(ts).u32(xid).s(gid))
    }

    pub fn rollback_prepared(&mut self, xid: u32, gid: &str, prepare_end: u64, rollback_end: u64, ts: i64) -> u64 {
        self.put(W::k(b'r').u8(0).u64(prepare_end).u64(rollback_end).i64(ts).i64(ts + 1).u32(xid).s(gid))
    }

    /// A message given as raw bytes.
    pub fn raw(&mut self, bytes: &[u8]) -> u64 {
        self.put(W(bytes.to_vec()))
    }

    /// The stream as the `data` column of a capture.
    pub fn as_array(&self) -> (Vec<u64>, BinaryArray) {
        let lsns = self.messages.iter().map(|m| m.0).collect();
        let data = BinaryArray::from_iter_values(self.messages.iter().map(|m| m.1.as_slice()));
        (lsns, data)
    }
}

/// Pushes every message one by one (each in its own buffer); panics on error.
pub fn push_all(decoder: &mut Decoder, s: &Stream) {
    for (lsn, m) in &s.messages {
        decoder.push(*lsn, &Buffer::from(m.clone())).unwrap_or_else(|e| panic!("{e}"));
    }
}

pub fn decode_with(s: &Stream, options: DecoderOptions) -> Changes {
    let mut d = Decoder::new(options);
    push_all(&mut d, s);
    d.finish().unwrap_or_else(|e| panic!("{e}"))
}

pub fn decode(s: &Stream) -> Changes {
    decode_with(s, DecoderOptions::default())
}

/// The rows of a table as strings, one per row, of the named columns (via Arrow's
/// display of each value); "∅" for null.
pub fn rows(batches: &[RecordBatch], columns: &[&str]) -> Vec<String> {
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    let opts = FormatOptions::default().with_null("∅");
    let mut out = Vec::new();
    for b in batches {
        let arrays: Vec<arrow_array::ArrayRef> = columns
            .iter()
            .map(|c| {
                let col = b.column_by_name(c).unwrap_or_else(|| panic!("no column {c} in {:?}", b.schema()));
                // Showing a named time zone needs chrono-tz: show the microseconds.
                match col.data_type() {
                    arrow_schema::DataType::Timestamp(_, Some(_)) => {
                        arrow_cast::cast(col, &arrow_schema::DataType::Int64).unwrap()
                    }
                    _ => col.clone(),
                }
            })
            .collect();
        let formatters: Vec<_> =
            arrays.iter().map(|a| ArrayFormatter::try_new(a.as_ref(), &opts).unwrap()).collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = formatters.iter().map(|f| f.value(r).to_string()).collect();
            out.push(cells.join("|"));
        }
    }
    out
}

pub fn table_rows(changes: &Changes, table: &str, columns: &[&str]) -> Vec<String> {
    let t = changes.tables.get(table).unwrap_or_else(|| panic!("no table {table}: {:?}", changes.tables.keys()));
    rows(&t.batches, columns)
}

pub fn col_i64(batch: &RecordBatch, name: &str) -> Vec<Option<i64>> {
    let a = batch.column_by_name(name).unwrap();
    let a = a.as_any().downcast_ref::<arrow_array::Int64Array>().unwrap();
    (0..a.len()).map(|i| if a.is_null(i) { None } else { Some(a.value(i)) }).collect()
}

/// (LSN, message) as the server sent them.
pub type Messages = Vec<(u64, Vec<u8>)>;

/// The golden captures of real PostgreSQL 15 and 18 streams (tests/golden/captures, made by
/// tests/golden/capture.py), by name (the file stem), in name order. Each `.bin` is
/// `(lsn u64, xid u32, length u32, message)*`, big-endian. A missing or empty directory is a
/// failure, not a vacuous pass.
pub fn golden_captures() -> Vec<(String, PathBuf, Messages)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/captures");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("golden captures {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    assert!(!paths.is_empty(), "no golden captures (*.bin) in {}", dir.display());
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let raw = std::fs::read(&p).unwrap();
            let mut messages = Vec::new();
            let mut at = 0;
            while at + 16 <= raw.len() {
                let lsn = u64::from_be_bytes(raw[at..at + 8].try_into().unwrap());
                let len = u32::from_be_bytes(raw[at + 12..at + 16].try_into().unwrap()) as usize;
                messages.push((lsn, raw[at + 16..at + 16 + len].to_vec()));
                at += 16 + len;
            }
            (p.file_stem().unwrap().to_string_lossy().into_owned(), p, messages)
        })
        .collect()
}
