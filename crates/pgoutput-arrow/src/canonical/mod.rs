//! The canonical rebuild of shuffled transactions, and the relation catalog it needs.
//!
//! A capture (the rows of `pg_logical_slot_get_binary_changes`: LSN, xid, message) can be
//! split by transaction and decoded in pieces (Spark's executors), each piece holding whole
//! transactions in any order. Each transaction is rebuilt into a self-contained stream:
//! its messages ordered by LSN and kind, its streamed chunks merged into one Stream Start …
//! Stop, and the Relation and Type messages it relies on but that the server sent in another
//! transaction injected from a [`RelationCatalog`] of the whole capture. Fed to one decoder,
//! the rebuilt transactions give that decoder's output for them whatever order they came in.
//!
//! A split by the SQL interface's xid column keeps a transaction whole but for the Stream
//! Abort of a subtransaction, whose xid column names the subtransaction: the catalog keeps
//! those and the rebuild of their transaction takes them from there.
//!
//! Which version of a relation a change needs: the server sends a Relation message the
//! first time a relation is used in a decoding session and after its definition changed,
//! in the transaction being *decoded* at that moment, and transactions are decoded in commit
//! order. So a Relation message's place is (the position of its transaction's commit, its
//! LSN), and a change takes the newest version at or before (its own transaction's commit,
//! its LSN). The LSN alone is not enough: a transaction that changed a table after a DDL but
//! committed after another one that sent the new Relation first holds changes whose LSN is
//! below that Relation's.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::builder::LargeBinaryBuilder;
use arrow_array::LargeBinaryArray;
use pgoutput_proto::encode::pgoutput as encode;
use pgoutput_proto::peek::change_relation_id;
use pgoutput_proto::{in_stream_block, parse_message, Message, Oid, RelationId};

use crate::error::DecodeError;

mod catalog;

pub use catalog::{message_relation_id, relation_schema, RelationCatalog};
use catalog::{in_stream, parse_error, plain};

/// The kinds of message a [`RelationCatalog`] is built from: Relation, Type, Stream Start,
/// Stream Abort and Rollback Prepared, and the ends of transactions (Commit, Stream Commit,
/// Prepare, Stream Prepare), which place a transaction's Relation messages.
pub const CATALOG_KINDS: &[u8] = b"RYSArCcPp";

/// The kinds an index of a capture holds besides [`CATALOG_KINDS`]: Begin, Origin, Begin
/// Prepare and Commit Prepared. With them, the catalog holds every message that frames a
/// transaction, so that a *piece* of a transaction (a range of its messages that another
/// piece of the capture continues) can be rebuilt with its real Begin and end: see
/// [`canonical_stream`]'s `fragments`.
pub const FRAMING_KINDS: &[u8] = b"BObK";

/// Whether a message of this kind frames its transaction (never a body message a piece of it
/// holds): Begin, Origin, the ends, the stream blocks' edges; a Stream Abort is framing for
/// its top-level transaction only (a subtransaction's comes from the catalog's sub-aborts).
fn is_framing(data: &[u8]) -> bool {
    match data.first() {
        Some(b'B' | b'O' | b'C' | b'b' | b'P' | b'K' | b'r' | b'S' | b'E' | b'c' | b'p') => true,
        Some(b'A') => matches!(parse_message(data, false), Ok(Message::StreamAbort(a)) if a.xid == a.subxid),
        _ => false,
    }
}

/// The kinds of row changes: Insert, Update, Delete, Truncate.
pub const CHANGE_KINDS: &[u8] = b"IUDT";

/// The kinds that end a transaction's decoding (see [`CATALOG_KINDS`]): the framing rule,
/// [`pgoutput_proto::TRANSACTION_END_KINDS`].
pub const END_KINDS: &[u8] = pgoutput_proto::TRANSACTION_END_KINDS;

/// Types with an oid below this are built in: pgoutput sends no Type message for them.
const FIRST_NORMAL_OID: Oid = 16384;

/// One row of a capture. `xid` is the SQL interface's xid column (the top-level
/// transaction; a subtransaction's Stream Abort has the subtransaction's; a
/// non-transactional message the xid of the transaction that emitted it, or 0). `tiebreak` orders messages that share an LSN and kind (a
/// capture-time row number when there is one, else 0; then the bytes decide).
#[derive(Debug, Clone, Copy)]
pub struct CaptureRow<'a> {
    pub lsn: u64,
    pub xid: u64,
    pub data: &'a [u8],
    pub tiebreak: i64,
}

/// Where each kind goes in a rebuilt transaction at one LSN: Begin, then Origin, Type,
/// Relation, then the changes, then the end of the transaction.
fn rank(kind: u8) -> u8 {
    match kind {
        b'B' | b'b' => 0,
        b'O' => 1,
        b'Y' => 2,
        b'R' => 3,
        b'C' | b'P' => 7,
        b'K' | b'r' => 8,
        _ => 4,
    }
}


/// What the decoder fed by the rebuilt stream currently knows, so that a Relation or Type
/// message is injected only when it is missing or stale.
#[derive(Default)]
struct DecoderState {
    relations: HashMap<RelationId, Arc<[u8]>>,
    types: HashMap<Oid, Arc<[u8]>>,
}

fn same(a: Option<&Arc<[u8]>>, b: &Arc<[u8]>) -> bool {
    a.is_some_and(|a| Arc::ptr_eq(a, b) || a[..] == b[..])
}

/// The rebuilt stream: an LSN and a message each.
pub struct CanonicalStream {
    pub lsns: Vec<u64>,
    pub messages: LargeBinaryArray,
}

struct Out {
    lsns: Vec<u64>,
    data: LargeBinaryBuilder,
}

/// Where a rebuilt stream goes, message by message, in order: a new array
/// ([`canonical_stream`]), or a decoder that references the messages where they already are
/// ([`Decoder::push_canonical`](crate::Decoder::push_canonical)). `data` is either a row's
/// own message (a slice of the rows' buffers) or one the rebuild made or took from the
/// catalog.
pub trait MessageSink {
    fn push(&mut self, lsn: u64, data: &[u8]) -> Result<(), DecodeError>;
}

impl MessageSink for Out {
    fn push(&mut self, lsn: u64, data: &[u8]) -> Result<(), DecodeError> {
        self.lsns.push(lsn);
        self.data.append_value(data);
        Ok(())
    }
}

impl Out {
    fn new(rows: &[CaptureRow<'_>]) -> Out {
        let bytes: usize = rows.iter().map(|r| r.data.len()).sum();
        Out { lsns: Vec::with_capacity(rows.len()), data: LargeBinaryBuilder::with_capacity(rows.len(), bytes) }
    }

    fn finish(mut self) -> CanonicalStream {
        CanonicalStream { lsns: self.lsns, messages: self.data.finish() }
    }
}

/// The transaction a row belongs to: its xid column, but a subtransaction's Stream Abort
/// names its top-level transaction in its body and the subtransaction in the xid column,
/// and a non-transactional logical message belongs to none (0).
fn transaction_of(i: usize, r: &CaptureRow<'_>) -> Result<u64, DecodeError> {
    Ok(match r.data.first() {
        None => return Err(DecodeError::Input(format!("row {i} (LSN {}) holds an empty message", pgoutput_proto::Lsn(r.lsn)))),
        Some(b'A') => match parse_message(r.data, false).map_err(|e| parse_error(i, r.lsn, e))? {
            Message::StreamAbort(a) => a.xid as u64,
            _ => r.xid,
        },
        Some(b'M') if non_transactional(r) => 0,
        Some(_) => r.xid,
    })
}

/// Whether `r` is a non-transactional logical message. The server sends one as it is
/// decoded, outside any transaction and stream block (no xid in it), but the SQL interface
/// gives it the xid of the transaction that emitted it (torture seed 3000: put in that
/// transaction's stream block, it was read as a streamed message, four bytes off). Read in
/// the plain layout, its own LSN is the row's: the streamed layout (a transactional message
/// of a streamed transaction) puts other bytes there.
fn non_transactional(r: &CaptureRow<'_>) -> bool {
    matches!(parse_message(r.data, false), Ok(Message::Message(m)) if !m.transactional && m.lsn.0 == r.lsn)
}

/// [`canonical_stream`] of rows among which the transactions `pieces` are only in part: a
/// range of each one's messages, the rest in other pieces of the capture (a Spark partition
/// of a capture split by position, not by transaction). Each such transaction is rebuilt
/// with the framing messages of the `catalog` (built from rows of [`FRAMING_KINDS`] too)
/// in place of whatever framing the rows hold, and with the Relation and Type messages it
/// sent itself, so that every piece decodes with the transaction's real Begin and end (its
/// commit LSN, time, outcome; its rolled-back subtransactions) and the definitions in force.
/// Its rows are the rows of the piece's changes, as a decoder of the whole transaction
/// gives them; numbering them across pieces is the caller's.
pub fn canonical_pieces(
    rows: &[CaptureRow<'_>],
    catalog: &RelationCatalog,
    history: bool,
    pieces: &HashSet<u64>,
) -> Result<CanonicalStream, DecodeError> {
    let mut out = Out::new(rows);
    rebuild(rows, catalog, history, pieces, &mut out)?;
    Ok(out.finish())
}

/// [`canonical_pieces`] into any [`MessageSink`].
pub fn rebuild<S: MessageSink + ?Sized>(
    rows: &[CaptureRow<'_>],
    catalog: &RelationCatalog,
    history: bool,
    pieces: &HashSet<u64>,
    sink: &mut S,
) -> Result<(), DecodeError> {
    if pieces.is_empty() {
        return rebuild_whole(rows, catalog, history, sink);
    }
    let mut present: Vec<u64> = Vec::new();
    let mut own: HashSet<(u64, &[u8])> = HashSet::new();
    let mut combined: Vec<CaptureRow<'_>> = Vec::with_capacity(rows.len() + 16);
    for (i, r) in rows.iter().enumerate() {
        let xid = transaction_of(i, r)?;
        if pieces.contains(&xid) {
            present.push(xid);
            if is_framing(r.data) {
                continue;
            }
            if matches!(r.data[0], b'R' | b'Y') {
                own.insert((r.lsn, r.data));
            }
        }
        combined.push(*r);
    }
    present.sort_unstable();
    present.dedup();
    for xid in present {
        for (lsn, data) in catalog.framing.get(&xid).into_iter().flatten() {
            combined.push(CaptureRow { lsn: *lsn, xid, data, tiebreak: 0 });
        }
        for (lsn, data) in catalog.own_definitions.get(&xid).into_iter().flatten() {
            if !own.contains(&(*lsn, &data[..])) {
                combined.push(CaptureRow { lsn: *lsn, xid, data, tiebreak: 0 });
            }
        }
    }
    rebuild_whole(&combined, catalog, history, sink)
}

/// The changes of one transaction in a part of a capture (see [`partition_summary`]): how
/// many, and the lowest and highest (LSN, tie-breaker) among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceSpan {
    pub xid: u64,
    pub changes: u64,
    pub first: (u64, i64),
    pub last: (u64, i64),
}

/// What a part of a capture (a Spark partition, decoded where it is) tells of its place among
/// the others, before it is decoded: for each transaction of `split` (those whose framing the
/// capture holds in more than one part) that it holds rows of, the span of its changes (one
/// without changes, only framing, is not listed); and the transactions it holds a part of
/// that are *not* in `split` and not whole: a Begin (or Stream Start) without an end, or
/// changes or an end without their Begin. A capture in its order, cut as `split` says, never
/// gives those (but one whose last transaction is still open): its parts were cut otherwise,
/// and decoding them where they are would lose rows.
pub struct PartitionSummary {
    pub pieces: Vec<PieceSpan>,
    pub incomplete: Vec<u64>,
}

pub fn partition_summary(rows: &[CaptureRow<'_>], split: &HashSet<u64>) -> Result<PartitionSummary, DecodeError> {
    // Per transaction, in order of first appearance: its span if it is in `split`, else
    // (has a start, has a body or an end).
    enum Seen {
        Piece(PieceSpan),
        /// Has a start, a body, an end.
        Whole(bool, bool, bool),
    }
    let mut seen: Vec<Seen> = Vec::new();
    let mut at: HashMap<u64, usize> = HashMap::new();
    // A transaction's rows mostly come one after another: one lookup per run of them.
    let mut last: Option<(u64, usize)> = None;
    for (i, r) in rows.iter().enumerate() {
        let xid = transaction_of(i, r)?;
        if xid == 0 {
            continue;
        }
        let k = match last {
            Some((x, k)) if x == xid => k,
            _ => *at.entry(xid).or_insert_with(|| {
                seen.push(if split.contains(&xid) {
                    Seen::Piece(PieceSpan { xid, changes: 0, first: (u64::MAX, i64::MAX), last: (0, i64::MIN) })
                } else {
                    Seen::Whole(false, false, false)
                });
                seen.len() - 1
            }),
        };
        last = Some((xid, k));
        let kind = r.data[0];
        match &mut seen[k] {
            Seen::Piece(span) => {
                if CHANGE_KINDS.contains(&kind) {
                    span.changes += 1;
                    span.first = span.first.min((r.lsn, r.tiebreak));
                    span.last = span.last.max((r.lsn, r.tiebreak));
                }
            }
            Seen::Whole(start, body, end) => match kind {
                b'B' | b'b' | b'S' => *start = true,
                // The second phase of a prepared transaction, a stream block's end, or a
                // subtransaction's Stream Abort: framing that stands alone.
                b'K' | b'r' | b'O' | b'E' => {}
                b'A' if !is_framing(r.data) => {}
                b'A' => *end = true,
                k if END_KINDS.contains(&k) => *end = true,
                _ => *body = true,
            },
        }
    }
    let mut pieces: Vec<PieceSpan> = Vec::new();
    let mut incomplete: Vec<u64> = Vec::new();
    for (xid, k) in at {
        match seen[k] {
            Seen::Piece(span) if span.changes > 0 => pieces.push(span),
            Seen::Whole(start, body, end) if (start || body || end) && !(start && end) => incomplete.push(xid),
            _ => {}
        }
    }
    pieces.sort_by_key(|s| s.xid);
    incomplete.sort_unstable();
    Ok(PartitionSummary { pieces, incomplete })
}

/// Rebuilds the whole transactions of `rows` (any order) into one self-contained pgoutput
/// stream (see the module documentation), transactions in commit order. With `history`,
/// the stream starts and ends with the catalog's [`history`](RelationCatalog::history) at
/// LSN 0, which a decoder of a piece of the capture needs to number and unify its tables as
/// a decoder of the whole capture does.
pub fn canonical_stream(
    rows: &[CaptureRow<'_>],
    catalog: &RelationCatalog,
    history: bool,
) -> Result<CanonicalStream, DecodeError> {
    let mut out = Out::new(rows);
    rebuild_whole(rows, catalog, history, &mut out)?;
    Ok(out.finish())
}

/// [`canonical_stream`] into any [`MessageSink`].
fn rebuild_whole<S: MessageSink + ?Sized>(
    rows: &[CaptureRow<'_>],
    catalog: &RelationCatalog,
    history: bool,
    out: &mut S,
) -> Result<(), DecodeError> {
    if history {
        for m in catalog.history() {
            out.push(0, &m)?;
        }
    }
    // The transaction of each row (see `transaction_of`): (transaction, row) pairs sorted as such: one contiguous sort, not a sort of row
    // numbers that looks each key up (the rows of a shuffled capture are in random order).
    let mut keyed: Vec<(u64, u32)> = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let key = transaction_of(i, r)?;
        let i = u32::try_from(i).map_err(|_| DecodeError::Input("more than 2^32 rows in one rebuild".into()))?;
        keyed.push((key, i));
    }
    keyed.sort_unstable();
    let order: Vec<usize> = keyed.iter().map(|&(_, i)| i as usize).collect();
    // Each transaction's rows, and where it ended. A non-transactional message is a group of
    // its own, placed where the server decoded it: after every transaction whose commit
    // record ends at or before its LSN (the next record starts where one ends), before the
    // others, as a capture in order has it.
    let mut txns: Vec<(u64, u64, &[usize])> = Vec::new();
    let mut start = 0;
    while start < keyed.len() {
        let key = keyed[start].0;
        let len = keyed[start..].partition_point(|&(k, _)| k == key);
        let group = &order[start..start + len];
        start += len;
        if key == 0 {
            for one in group.chunks(1) {
                txns.push((rows[one[0]].lsn.saturating_add(1), 0, one));
            }
            continue;
        }
        let mut end = u64::MAX;
        for &i in group {
            let r = &rows[i];
            if r.data.first().is_some_and(|k| END_KINDS.contains(k)) {
                let e = match parse_message(r.data, false).map_err(|e| parse_error(i, r.lsn, e))? {
                    Message::Commit(c) => c.end_lsn.0,
                    Message::StreamCommit(c) => c.end_lsn.0,
                    Message::Prepare(p) | Message::StreamPrepare(p) => p.end_lsn.0,
                    _ => continue,
                };
                end = end.min(e);
            }
        }
        txns.push((end, key, group));
    }
    txns.sort_by_key(|&(end, key, _)| (end, key));
    let mut state = DecoderState::default();
    let mut scratch: Vec<usize> = Vec::new();
    for (end, xid, group) in txns {
        let streamed = xid != 0 && (catalog.streamed.contains(&xid) || group.iter().any(|&i| rows[i].data[0] == b'S'));
        let order_key = |&i: &usize| {
            let r = &rows[i];
            (r.lsn, rank(r.data[0]), r.tiebreak, r.data)
        };
        scratch.clear();
        if !streamed {
            scratch.extend_from_slice(group);
            scratch.sort_by_key(order_key);
            with_catalog(&scratch, rows, xid, end, false, catalog, &mut state, out)?;
            continue;
        }
        scratch.extend(group.iter().copied().filter(|&i| in_stream_block(rows[i].data[0])));
        if scratch.is_empty() {
            // Nothing was streamed (an abort of a transaction whose changes never left the
            // server): there is nothing to decode.
            continue;
        }
        scratch.sort_by_key(order_key);
        let xid32 = xid as u32;
        let mut buf = Vec::new();
        encode::stream_start(xid32, true, &mut buf);
        out.push(rows[scratch[0]].lsn, &buf)?;
        with_catalog(&scratch, rows, xid, end, true, catalog, &mut state, out)?;
        buf.clear();
        encode::stream_stop(&mut buf);
        out.push(rows[*scratch.last().expect("not empty")].lsn, &buf)?;
        // The end: a subtransaction's Stream Abort first, then the transaction's own end.
        let mut tail: Vec<(u8, u64, i64, &[u8])> = Vec::new();
        for &i in group {
            let r = &rows[i];
            let rank = match r.data[0] {
                b'A' => match parse_message(r.data, false) {
                    Ok(Message::StreamAbort(a)) if a.xid != a.subxid => 0,
                    _ => 1,
                },
                b'c' | b'p' => 1,
                b'K' | b'r' => 2,
                _ => continue,
            };
            tail.push((rank, r.lsn, r.tiebreak, r.data));
        }
        // Subtransaction aborts that the split put in another piece.
        for (lsn, data) in catalog.sub_aborts.get(&xid).into_iter().flatten() {
            if !tail.iter().any(|t| t.0 == 0 && t.1 == *lsn && t.3 == &data[..]) {
                tail.push((0, *lsn, 0, data));
            }
        }
        tail.sort();
        for (_, lsn, _, data) in tail {
            out.push(lsn, data)?;
        }
    }
    if history {
        // Once more at the end: the rows' own transactions made the definitions they needed
        // the ones in force again, and a table is unified towards the definition in force
        // last (`RelationCatalog::newest`), which must be the whole capture's, whatever
        // changes this part holds. They are all known by now: nothing new is defined.
        for m in catalog.history() {
            out.push(0, &m)?;
        }
    }
    Ok(())
}

/// Appends the messages `body` (indices into `rows`) of transaction `xid` (which ended at
/// `txn_end`), with the Relation and Type messages the decoder lacks for them injected.
#[allow(clippy::too_many_arguments)]
fn with_catalog<S: MessageSink + ?Sized>(
    body: &[usize],
    rows: &[CaptureRow<'_>],
    xid: u64,
    txn_end: u64,
    stream: bool,
    catalog: &RelationCatalog,
    state: &mut DecoderState,
    out: &mut S,
) -> Result<(), DecodeError> {
    // Relations this transaction sent a Relation message for: the server sent it right
    // before the change that needed it, so it is right for the changes after it (even
    // when the catalog leaves it out, as it does for a transaction rolled back).
    let mut own: Vec<RelationId> = Vec::new();
    for &i in body {
        let CaptureRow { lsn, data, .. } = rows[i];
        let needs: Vec<RelationId> = match data[0] {
            b'I' | b'U' | b'D' => match change_relation_id(data, stream) {
                Some(relid) => {
                    // The common case: a change of a relation the decoder knows as it was then.
                    match catalog.relation_at(relid, txn_end, lsn) {
                        Some(wanted) if !own.contains(&relid) && !same(state.relations.get(&relid), &wanted.body) => {
                            vec![relid]
                        }
                        _ => {
                            out.push(lsn, data)?;
                            continue;
                        }
                    }
                }
                None => Vec::new(),
            },
            b'R' | b'Y' => {
                if let Some((id, body, _)) = parse_message(data, stream).ok().as_ref().and_then(plain) {
                    let table = if data[0] == b'R' {
                        own.push(id);
                        &mut state.relations
                    } else {
                        &mut state.types
                    };
                    table.insert(id, body);
                }
                Vec::new()
            }
            b'T' => match parse_message(data, stream) {
                Ok(Message::Truncate(t)) => t.relation_ids,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        for relid in needs {
            if own.contains(&relid) {
                continue;
            }
            let Some(wanted) = catalog.relation_at(relid, txn_end, lsn) else { continue };
            if same(state.relations.get(&relid), &wanted.body) {
                continue;
            }
            for &oid in &wanted.type_oids {
                if oid < FIRST_NORMAL_OID {
                    continue;
                }
                if let Some(ty) = catalog.type_at(oid, txn_end, lsn) {
                    if !same(state.types.get(&oid), &ty.body) {
                        if stream {
                            out.push(lsn, &in_stream(&ty.body, xid as u32))?;
                        } else {
                            out.push(lsn, &ty.body)?;
                        }
                        state.types.insert(oid, ty.body.clone());
                    }
                }
            }
            if stream {
                out.push(lsn, &in_stream(&wanted.body, xid as u32))?;
            } else {
                out.push(lsn, &wanted.body)?;
            }
            state.relations.insert(relid, wanted.body.clone());
        }
        out.push(lsn, data)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgoutput_proto::{Column, Relation};

    fn relation(columns: &[&str]) -> Vec<u8> {
        typed_relation(&columns.iter().map(|&n| (n, 23)).collect::<Vec<_>>())
    }

    /// Table `public.t` (relation 16384) with these columns (name, type oid).
    fn typed_relation(columns: &[(&str, u32)]) -> Vec<u8> {
        let rel = Relation {
            xid: None,
            id: 16384,
            namespace: "public",
            name: "t",
            replica_identity: pgoutput_proto::ReplicaIdentity::Default,
            columns: columns
                .iter()
                .map(|&(n, oid)| Column { is_key: n == "id", name: n, type_oid: oid, type_modifier: -1 })
                .collect(),
        };
        let mut buf = Vec::new();
        encode::relation(&rel, &mut buf);
        buf
    }

    fn begin(xid: u32, lsn: u64) -> Vec<u8> {
        [&[b'B'][..], &lsn.to_be_bytes(), &0i64.to_be_bytes(), &xid.to_be_bytes()].concat()
    }

    fn commit(end: u64) -> Vec<u8> {
        [&[b'C', 0][..], &end.to_be_bytes(), &(end + 1).to_be_bytes(), &0i64.to_be_bytes()].concat()
    }

    fn insert(values: &[&str]) -> Vec<u8> {
        let mut buf = vec![b'I'];
        buf.extend_from_slice(&16384u32.to_be_bytes());
        buf.push(b'N');
        buf.extend_from_slice(&(values.len() as i16).to_be_bytes());
        for v in values {
            buf.push(b't');
            buf.extend_from_slice(&(v.len() as i32).to_be_bytes());
            buf.extend_from_slice(v.as_bytes());
        }
        buf
    }

    /// A transaction cut in two pieces (as two Spark partitions of a capture in order): each
    /// piece is rebuilt with the transaction's real Begin and Commit, and the piece after the
    /// Relation message gets it as the transaction's own.
    /// Transaction 1: Begin, its Relation, two Inserts, Commit (LSN, xid, message each).
    fn one_transaction() -> Vec<(u64, u64, Vec<u8>)> {
        vec![
            (10, 1, begin(1, 40)),
            (11, 1, relation(&["id"])),
            (11, 1, insert(&["1"])),
            (12, 1, insert(&["2"])),
            (40, 1, commit(40)),
        ]
    }

    fn capture_rows(messages: &[(u64, u64, Vec<u8>)], tiebreak: i64) -> Vec<CaptureRow<'_>> {
        messages.iter().map(|(lsn, xid, data)| CaptureRow { lsn: *lsn, xid: *xid, data, tiebreak }).collect()
    }

    #[test]
    fn a_piece_of_a_transaction_takes_its_framing_and_definitions_from_the_catalog() {
        let v1 = relation(&["id"]);
        let messages = one_transaction();
        let rows = capture_rows(&messages, 0);
        let catalog = RelationCatalog::from_rows(rows.iter().copied()).unwrap();
        let pieces: HashSet<u64> = [1].into_iter().collect();
        let first = canonical_pieces(&rows[..3], &catalog, false, &pieces).unwrap();
        let got: Vec<&[u8]> = first.messages.iter().map(|m| m.unwrap()).collect();
        assert_eq!(got, [&begin(1, 40)[..], &v1, &insert(&["1"]), &commit(40)]);
        let second = canonical_pieces(&rows[3..], &catalog, false, &pieces).unwrap();
        let got: Vec<&[u8]> = second.messages.iter().map(|m| m.unwrap()).collect();
        assert_eq!(got, [&begin(1, 40)[..], &v1, &insert(&["2"]), &commit(40)]);
        // Not named a piece, the second part has no Begin: the rebuild keeps what it holds.
        let alone = canonical_stream(&rows[3..], &catalog, false).unwrap();
        assert_eq!(alone.lsns.len(), 3);
    }

    /// Torture seed 416 in miniature: after a DDL, A changes the table (LSN 50), B changes it
    /// (LSN 60) and commits first (70), so the new Relation message is in B, above A's
    /// change. A alone is rebuilt with the new definition.
    #[test]
    fn a_change_takes_the_relation_of_the_transactions_that_committed_before_it() {
        let (v1, v2) = (relation(&["id"]), relation(&["id", "w"]));
        let messages: Vec<(u64, u64, Vec<u8>)> = vec![
            (10, 1, begin(1, 11)),
            (10, 1, v1.clone()),
            (10, 1, insert(&["1"])),
            (11, 1, commit(11)),
            (60, 3, begin(3, 70)),
            (60, 3, v2.clone()),
            (60, 3, insert(&["3", "b"])),
            (70, 3, commit(70)),
            (50, 2, begin(2, 80)),
            (50, 2, insert(&["2", "a"])),
            (80, 2, commit(80)),
        ];
        let rows = capture_rows(&messages, 0);
        let catalog = RelationCatalog::from_rows(rows.iter().copied()).unwrap();
        let only_a: Vec<CaptureRow<'_>> = rows.iter().copied().filter(|r| r.xid == 2).collect();
        let stream = canonical_stream(&only_a, &catalog, false).unwrap();
        let got: Vec<&[u8]> = stream.messages.iter().map(|m| m.unwrap()).collect();
        assert_eq!(got, [&begin(2, 80)[..], &v2, &insert(&["2", "a"]), &commit(80)]);
        // Everything, shuffled: transactions in commit order, each with what it needs.
        let mut shuffled = rows.clone();
        shuffled.reverse();
        let stream = canonical_stream(&shuffled, &catalog, false).unwrap();
        let got: Vec<&[u8]> = stream.messages.iter().map(|m| m.unwrap()).collect();
        let want: Vec<&[u8]> = vec![
            &messages[0].2, &messages[1].2, &messages[2].2, &messages[3].2,
            &messages[4].2, &messages[5].2, &messages[6].2, &messages[7].2,
            &messages[8].2, &messages[9].2, &messages[10].2,
        ];
        assert_eq!(got, want);
    }

    /// A rebuild fed to a decoder in place (`Decoder::push_canonical`) decodes as the rebuilt
    /// stream does (`canonical_pieces`, then `push_array`): shuffled whole transactions with
    /// a definition injected, and each piece of a split transaction; the messages taken from
    /// the rows' array, the injected ones copied.
    #[test]
    fn a_rebuild_fed_in_place_decodes_as_the_rebuilt_stream() {
        use crate::{Decoder, DecoderOptions};
        use arrow_array::BinaryArray;

        let changes = |feed: &dyn Fn(&mut Decoder)| {
            let mut decoder = Decoder::new(DecoderOptions::default());
            feed(&mut decoder);
            let out = decoder.finish().unwrap();
            out.tables.into_iter().map(|(name, t)| (name, t.batches)).collect::<Vec<_>>()
        };
        let mut ddl = vec![
            (10, 1, begin(1, 11)),
            (10, 1, relation(&["id"])),
            (10, 1, insert(&["1"])),
            (11, 1, commit(11)),
            (60, 3, begin(3, 70)),
            (60, 3, relation(&["id", "w"])),
            (60, 3, insert(&["3", "4"])),
            (70, 3, commit(70)),
            (50, 2, begin(2, 80)),
            (50, 2, insert(&["2", "5"])),
            (80, 2, commit(80)),
        ];
        ddl.reverse();
        for (messages, parts, pieces) in [
            (ddl, vec![0..11, 7..11], vec![]),
            (one_transaction(), vec![0..3, 3..5], vec![1u64]),
        ] {
            let array = BinaryArray::from_iter_values(messages.iter().map(|(_, _, m)| m));
            let rows: Vec<CaptureRow<'_>> = messages
                .iter()
                .enumerate()
                .map(|(i, (lsn, xid, _))| CaptureRow { lsn: *lsn, xid: *xid, data: array.value(i), tiebreak: 0 })
                .collect();
            let catalog = RelationCatalog::from_rows(rows.iter().copied()).unwrap();
            let pieces: HashSet<u64> = pieces.into_iter().collect();
            for part in parts {
                let rows = &rows[part];
                let stream = canonical_pieces(rows, &catalog, true, &pieces).unwrap();
                let want = changes(&|d| d.push_array(&stream.lsns, &stream.messages).unwrap());
                let got = changes(&|d| d.push_canonical(rows, &[array.values().clone()], &catalog, true, &pieces).unwrap());
                assert!(!want.is_empty() && want.iter().all(|(_, b)| b.iter().map(|b| b.num_rows()).sum::<usize>() > 0));
                assert_eq!(got, want);
            }
        }
    }

    /// Torture seed 1981 in miniature: `c` (float4) dropped and another `c` (int4[]) added,
    /// then renamed `c_r`. A part of the capture whose changes all came before the rename
    /// re-announces the older definitions; it still unifies the table towards the definition
    /// in force last in the whole capture, as the whole capture's decoder and
    /// [`RelationCatalog::schemas`] do: two columns (`c_r` int4[], the dropped `c` float4), not
    /// one merged by the name `c` had before the rename.
    #[test]
    fn a_part_unifies_towards_the_definition_in_force_last_in_the_whole_capture() {
        use crate::{Decoder, DecoderOptions};
        use arrow_array::BinaryArray;
        use arrow_schema::DataType;

        let messages: Vec<(u64, u64, Vec<u8>)> = vec![
            (10, 1, begin(1, 11)),
            (10, 1, typed_relation(&[("id", 23), ("c", 700), ("z", 23)])),
            (10, 1, insert(&["1", "1.5", "1"])),
            (11, 1, commit(11)),
            (20, 2, begin(2, 21)),
            (20, 2, typed_relation(&[("id", 23), ("z", 23), ("c", 1007)])),
            (20, 2, insert(&["2", "2", "{2}"])),
            (21, 2, commit(21)),
            (30, 3, begin(3, 31)),
            (30, 3, typed_relation(&[("id", 23), ("z", 23), ("c_r", 1007)])),
            (30, 3, insert(&["3", "3", "{3}"])),
            (31, 3, commit(31)),
        ];
        let rows = capture_rows(&messages, 0);
        let catalog = RelationCatalog::from_rows(rows.iter().copied()).unwrap();
        let want = catalog.schemas(DecoderOptions::default()).unwrap()["public.t"].clone();
        let types: Vec<(&str, &DataType)> =
            want.fields().iter().take(4).map(|f| (f.name().as_str(), f.data_type())).collect();
        assert_eq!(types[2..].iter().map(|t| t.0).collect::<Vec<_>>(), ["c_r", "c"]);
        assert!(matches!(types[2].1, DataType::List(_)) && types[3].1 == &DataType::Float32);
        let schema_of = |feed: &dyn Fn(&mut Decoder)| {
            let mut decoder = Decoder::new(DecoderOptions::default());
            feed(&mut decoder);
            decoder.finish().unwrap().tables["public.t"].schema.clone()
        };
        let lsns: Vec<u64> = messages.iter().map(|m| m.0).collect();
        let whole = BinaryArray::from_iter_values(messages.iter().map(|m| &m.2));
        assert_eq!(schema_of(&|d| d.push_array(&lsns, &whole).unwrap()), want);
        for part in [0..4, 0..8, 4..8, 8..12, 0..12] {
            let stream = canonical_stream(&rows[part.clone()], &catalog, true).unwrap();
            assert_eq!(schema_of(&|d| d.push_array(&stream.lsns, &stream.messages).unwrap()), want, "rows {part:?}");
        }
    }

    /// A logical message, its bytes as pgoutput sends them (in a stream block: with `xid`).
    fn message(xid: Option<u32>, transactional: bool, lsn: u64, prefix: &str) -> Vec<u8> {
        let mut buf = vec![b'M'];
        if let Some(x) = xid {
            buf.extend_from_slice(&x.to_be_bytes());
        }
        buf.push(u8::from(transactional));
        buf.extend_from_slice(&lsn.to_be_bytes());
        buf.extend_from_slice(prefix.as_bytes());
        buf.push(0);
        buf.extend_from_slice(&2u32.to_be_bytes());
        buf.extend_from_slice(b"hi");
        buf
    }

    /// Torture seed 3000 in miniature: a streamed transaction (xid 7) emits a transactional
    /// message (in its stream block) and a non-transactional one (sent outside, without an
    /// xid, though its row has xid 7). Rebuilt from shuffled rows, both decode with their
    /// prefixes whole, the non-transactional one outside the transaction.
    #[test]
    fn a_non_transactional_message_of_a_streamed_transaction_is_rebuilt_outside_it() {
        let stream_commit = |xid: u32, end: u64| {
            [&[b'c'][..], &xid.to_be_bytes(), &[0], &end.to_be_bytes(), &(end + 1).to_be_bytes(), &0i64.to_be_bytes()]
                .concat()
        };
        let mut start = Vec::new();
        encode::stream_start(7, true, &mut start);
        let mut stop = Vec::new();
        encode::stream_stop(&mut stop);
        let mut messages: Vec<(u64, u64, Vec<u8>)> = vec![
            (20, 7, start),
            (21, 7, message(Some(7), true, 21, "inside")),
            (22, 7, stop),
            (23, 7, message(None, false, 23, "torture")),
            (40, 7, stream_commit(7, 40)),
        ];
        messages.reverse();
        let mut got = message_prefixes(&messages, false);
        got.sort_unstable();
        assert_eq!(got, ["inside", "torture"]);
    }

    /// The prefixes of the logical messages a decoder gives for the rebuild of `messages`
    /// (or, `in_order`, for `messages` as they are).
    fn message_prefixes(messages: &[(u64, u64, Vec<u8>)], in_order: bool) -> Vec<String> {
        use crate::{Decoder, DecoderOptions};
        use arrow_array::cast::AsArray;

        let mut decoder = Decoder::new(DecoderOptions::default());
        if in_order {
            let lsns: Vec<u64> = messages.iter().map(|m| m.0).collect();
            decoder.push_array(&lsns, &LargeBinaryArray::from_iter_values(messages.iter().map(|m| &m.2))).unwrap();
        } else {
            let rows = capture_rows(messages, 0);
            let catalog = RelationCatalog::from_rows(rows.iter().copied()).unwrap();
            let stream = canonical_stream(&rows, &catalog, false).unwrap();
            decoder.push_array(&stream.lsns, &stream.messages).unwrap();
        }
        let out = decoder.finish().unwrap();
        let prefixes = out.messages.column_by_name("prefix").unwrap().as_string::<i32>();
        prefixes.iter().map(|p| p.unwrap().to_string()).collect()
    }
    /// A non-transactional message is rebuilt where the server decoded it among the
    /// transactions (after those that committed before its LSN, before the others), not
    /// before them all: the messages of a shuffled capture come out in the order of the
    /// capture in order. Its xid column is the emitting transaction's (the SQL interface's).
    #[test]
    fn a_non_transactional_message_is_rebuilt_among_the_transactions_at_its_lsn() {
        let messages: Vec<(u64, u64, Vec<u8>)> = vec![
            (10, 1, begin(1, 20)),
            (12, 1, message(None, true, 12, "first")),
            (20, 1, commit(20)),
            // Right where the first commit record ends (its end LSN is 21).
            (21, 2, message(None, false, 21, "between")),
            (30, 2, begin(2, 60)),
            (35, 2, message(None, true, 35, "second")),
            (40, 3, message(None, false, 40, "during")),
            (60, 2, commit(60)),
            (70, 0, message(None, false, 70, "last")),
        ];
        let want = message_prefixes(&messages, true);
        assert_eq!(want, ["first", "between", "during", "second", "last"]);
        assert_eq!(message_prefixes(&messages, false), want);
        let mut shuffled = messages.clone();
        shuffled.reverse();
        shuffled.swap(1, 6);
        assert_eq!(message_prefixes(&shuffled, false), want);
    }

    /// A part of a capture tells the spans of its pieces of split transactions, and the
    /// transactions it holds a part of that the split does not name (cut otherwise).
    #[test]
    fn a_partition_summary_spans_its_pieces_and_names_transactions_cut_elsewhere() {
        let mut messages = one_transaction();
        messages.extend([(50, 2, begin(2, 60)), (51, 2, insert(&["3"])), (60, 2, commit(60))]);
        let rows = capture_rows(&messages, 7);
        let split: HashSet<u64> = [1].into_iter().collect();
        let first = partition_summary(&rows[..3], &split).unwrap();
        assert_eq!(first.pieces, [PieceSpan { xid: 1, changes: 1, first: (11, 7), last: (11, 7) }]);
        assert!(first.incomplete.is_empty());
        let second = partition_summary(&rows[3..], &split).unwrap();
        assert_eq!(second.pieces, [PieceSpan { xid: 1, changes: 1, first: (12, 7), last: (12, 7) }]);
        assert!(second.incomplete.is_empty());
        assert!(partition_summary(&rows[5..], &split).unwrap().incomplete.is_empty());
        // Transaction 2 cut in two though the split does not name it: its first part has no
        // end, its second a change and the Commit but no Begin.
        assert_eq!(partition_summary(&rows[5..7], &split).unwrap().incomplete, [2]);
        assert_eq!(partition_summary(&rows[6..], &split).unwrap().incomplete, [2]);
        // A Commit alone too (its changes went with the Begin).
        assert_eq!(partition_summary(&rows[7..], &split).unwrap().incomplete, [2]);
    }
}
