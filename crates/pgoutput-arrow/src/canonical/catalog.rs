//! The relation catalog of a capture ([`RelationCatalog`]): every Relation and Type message by
//! id and by the place it takes effect (see the parent module), the transactions that were
//! streamed, and the framing messages a piece of a split transaction is rebuilt with.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_buffer::Buffer;
use arrow_schema::SchemaRef;
use pgoutput_proto::encode::pgoutput as encode;
use pgoutput_proto::peek::change_relation_id;
use pgoutput_proto::{parse_message, Message, Oid, Relation, RelationId, TypeInfo};

use super::{is_framing, CaptureRow, CATALOG_KINDS, FRAMING_KINDS};
use crate::decoder::Decoder;
use crate::error::DecodeError;
use crate::options::DecoderOptions;

/// Messages with the LSN each came with.
pub(super) type LsnMessages = Vec<(u64, Arc<[u8]>)>;

/// One version of a Relation or Type message, without the in-stream xid.
#[derive(Debug, Clone)]
pub(super) struct Version {
    /// Where the transaction that sent it ended (see the parent module); u64::MAX
    /// when the capture does not hold its end.
    pub(super) txn_end: u64,
    pub(super) lsn: u64,
    pub(super) body: Arc<[u8]>,
    /// A Relation's column types (empty for a Type).
    pub(super) type_oids: Vec<Oid>,
}

/// Every Relation and Type message of a capture by id and place, the transactions that were
/// streamed; small enough to broadcast. Versions sent in aborted transactions (and aborted
/// subtransactions) are left out.
#[derive(Debug, Clone, Default)]
pub struct RelationCatalog {
    pub(super) relations: HashMap<RelationId, Vec<Version>>,
    pub(super) types: HashMap<Oid, Vec<Version>>,
    pub(super) streamed: HashSet<u64>,
    /// The Stream Abort messages of subtransactions, by top-level xid: the xid column of
    /// such a row names the subtransaction, so a split by that column may put it apart from
    /// its transaction; the rebuild takes it from here.
    pub(super) sub_aborts: HashMap<u64, LsnMessages>,
    /// Every framing message the rows held (see [`FRAMING_KINDS`]), by transaction, as sent.
    pub(super) framing: HashMap<u64, LsnMessages>,
    /// Every Relation and Type message by the transaction that sent it, as sent (in-stream
    /// ones with their subtransaction's xid): a piece of a transaction takes those its
    /// transaction sent before it, as the transaction's own (see `with_catalog`).
    pub(super) own_definitions: HashMap<u64, LsnMessages>,
}

pub(super) fn parse_error(row: usize, lsn: u64, source: pgoutput_proto::ParseError) -> DecodeError {
    DecodeError::Parse { lsn, index: row as u64, source }
}

/// The plain (out-of-stream) encoding of a Relation or Type message.
pub(super) fn plain(message: &Message<'_>) -> Option<(u32, Arc<[u8]>, Vec<Oid>)> {
    let mut buf = Vec::new();
    match message {
        Message::Relation(r) => {
            encode::relation(&Relation { xid: None, ..r.clone() }, &mut buf);
            Some((r.id, buf.into(), r.columns.iter().map(|c| c.type_oid).collect()))
        }
        Message::Type(t) => {
            encode::type_info(&TypeInfo { xid: None, ..t.clone() }, &mut buf);
            Some((t.oid, buf.into(), Vec::new()))
        }
        _ => None,
    }
}

/// A plain Relation or Type body as sent inside Stream Start … Stop for `xid`.
pub(super) fn in_stream(body: &[u8], xid: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(body.len() + 4);
    match parse_message(body, false) {
        Ok(Message::Relation(r)) => encode::relation(&Relation { xid: Some(xid), ..r }, &mut buf),
        Ok(Message::Type(t)) => encode::type_info(&TypeInfo { xid: Some(xid), ..t }, &mut buf),
        // The catalog holds only bodies it encoded itself.
        _ => buf.extend_from_slice(body),
    }
    buf
}

impl RelationCatalog {
    /// The catalog of a capture, from its rows (any order; rows of kinds other than
    /// [`CATALOG_KINDS`] are skipped). `rows` are numbered from 0 in error messages.
    pub fn from_rows<'a>(rows: impl IntoIterator<Item = CaptureRow<'a>>) -> Result<Self, DecodeError> {
        let rows: Vec<(usize, CaptureRow<'a>)> = rows
            .into_iter()
            .enumerate()
            .filter(|(_, r)| r.data.first().is_some_and(|k| CATALOG_KINDS.contains(k) || FRAMING_KINDS.contains(k)))
            .collect();
        let mut streamed = HashSet::new();
        let mut aborted_top = HashSet::new();
        let mut aborted_sub = HashSet::new();
        let mut ends: HashMap<u64, u64> = HashMap::new();
        let mut sub_aborts: HashMap<u64, LsnMessages> = HashMap::new();
        let mut end = |xid: u64, lsn: u64| {
            let e = ends.entry(xid).or_insert(lsn);
            *e = (*e).min(lsn);
        };
        let mut framing: HashMap<u64, LsnMessages> = HashMap::new();
        let mut own_definitions: HashMap<u64, LsnMessages> = HashMap::new();
        for &(_, r) in &rows {
            if matches!(r.data[0], b'R' | b'Y') {
                own_definitions.entry(r.xid).or_default().push((r.lsn, Arc::from(r.data)));
            } else if is_framing(r.data) {
                let xid = match parse_message(r.data, false) {
                    Ok(Message::StreamAbort(a)) => a.xid as u64,
                    _ => r.xid,
                };
                framing.entry(xid).or_default().push((r.lsn, Arc::from(r.data)));
            }
        }
        for &(i, r) in &rows {
            let message = match r.data[0] {
                b'R' | b'Y' | b'B' | b'O' | b'b' | b'K' => continue,
                _ => parse_message(r.data, false).map_err(|e| parse_error(i, r.lsn, e))?,
            };
            match message {
                Message::StreamStart(s) => {
                    streamed.insert(s.xid as u64);
                }
                Message::StreamAbort(a) if a.xid == a.subxid => {
                    aborted_top.insert(a.xid as u64);
                }
                Message::StreamAbort(a) => {
                    aborted_sub.insert(a.subxid);
                    sub_aborts.entry(a.xid as u64).or_default().push((r.lsn, Arc::from(r.data)));
                }
                Message::RollbackPrepared(rp) => {
                    aborted_top.insert(rp.xid as u64);
                }
                Message::Commit(c) => end(r.xid, c.end_lsn.0),
                Message::StreamCommit(c) => end(c.xid as u64, c.end_lsn.0),
                Message::Prepare(p) | Message::StreamPrepare(p) => end(p.xid as u64, p.end_lsn.0),
                _ => {}
            }
        }
        for messages in sub_aborts.values_mut().chain(framing.values_mut()).chain(own_definitions.values_mut()) {
            messages.sort();
            messages.dedup();
        }
        let mut catalog = RelationCatalog { streamed, sub_aborts, framing, own_definitions, ..Default::default() };
        for &(i, r) in &rows {
            if !matches!(r.data[0], b'R' | b'Y') || aborted_top.contains(&r.xid) {
                continue;
            }
            let stream = catalog.streamed.contains(&r.xid);
            let message = parse_message(r.data, stream).map_err(|e| parse_error(i, r.lsn, e))?;
            let xid = match &message {
                Message::Relation(rel) => rel.xid,
                Message::Type(t) => t.xid,
                _ => None,
            };
            if xid.is_some_and(|x| aborted_sub.contains(&x)) {
                continue;
            }
            let Some((id, body, type_oids)) = plain(&message) else { continue };
            let txn_end = ends.get(&r.xid).copied().unwrap_or(u64::MAX);
            let table = if r.data[0] == b'R' { &mut catalog.relations } else { &mut catalog.types };
            table.entry(id).or_default().push(Version { txn_end, lsn: r.lsn, body, type_oids });
        }
        for versions in catalog.relations.values_mut().chain(catalog.types.values_mut()) {
            versions.sort_by(|a, b| (a.txn_end, a.lsn, &a.body).cmp(&(b.txn_end, b.lsn, &b.body)));
        }
        Ok(catalog)
    }

    /// The version in force for a change at `lsn` of a transaction that ended at
    /// `txn_end`: the newest at or before (txn_end, lsn), else the oldest.
    fn at(versions: &[Version], txn_end: u64, lsn: u64) -> Option<&Version> {
        let i = versions.partition_point(|v| (v.txn_end, v.lsn) <= (txn_end, lsn));
        versions.get(i.saturating_sub(1))
    }

    pub(super) fn relation_at(&self, relid: RelationId, txn_end: u64, lsn: u64) -> Option<&Version> {
        match self.relations.get(&relid)?.as_slice() {
            [only] => Some(only),
            versions => Self::at(versions, txn_end, lsn),
        }
    }

    pub(super) fn type_at(&self, oid: Oid, txn_end: u64, lsn: u64) -> Option<&Version> {
        Self::at(self.types.get(&oid)?, txn_end, lsn)
    }

    /// Number of Relation versions.
    pub fn relation_versions(&self) -> usize {
        self.relations.values().map(Vec::len).sum()
    }

    /// Every Type then every Relation version, in the order they took effect: what a
    /// decoder is fed first so that it numbers a table's versions and columns as a decoder
    /// of the whole capture does (a renamed column keeps its id whatever versions a piece
    /// of the capture holds).
    pub fn history(&self) -> Vec<Arc<[u8]>> {
        let sorted = |table: &HashMap<u32, Vec<Version>>| {
            let mut all: Vec<&Version> = table.values().flatten().collect();
            all.sort_by(|a, b| (a.txn_end, a.lsn, &a.body).cmp(&(b.txn_end, b.lsn, &b.body)));
            all.into_iter().map(|v| v.body.clone()).collect::<Vec<_>>()
        };
        let mut out = sorted(&self.types);
        out.extend(sorted(&self.relations));
        out
    }

    /// Each table's schema as a decoder of the whole capture makes it (every version of
    /// the table unified), before any change is decoded.
    pub fn schemas(&self, options: DecoderOptions) -> Result<BTreeMap<String, SchemaRef>, DecodeError> {
        schemas_of(self.history(), options)
    }
}

fn schemas_of(messages: Vec<Arc<[u8]>>, options: DecoderOptions) -> Result<BTreeMap<String, SchemaRef>, DecodeError> {
    let mut decoder = Decoder::new(options);
    for m in messages {
        decoder.push(0, &Buffer::from(m.to_vec()))?;
    }
    Ok(decoder.finish()?.tables.into_iter().map(|(name, t)| (name, t.schema)).collect())
}

/// The schema the decoder gives a relation of this definition (`types`: the Type messages
/// its non-built-in column types would come with), without any change decoded.
pub fn relation_schema(
    relation: &Relation<'_>,
    types: &[TypeInfo<'_>],
    options: DecoderOptions,
) -> Result<SchemaRef, DecodeError> {
    let mut messages: Vec<Arc<[u8]>> = Vec::new();
    for t in types {
        let mut buf = Vec::new();
        encode::type_info(&TypeInfo { xid: None, ..t.clone() }, &mut buf);
        messages.push(buf.into());
    }
    let mut buf = Vec::new();
    encode::relation(&Relation { xid: None, ..relation.clone() }, &mut buf);
    messages.push(buf.into());
    let name = crate::catalog::qualified_name(relation.namespace, relation.name);
    schemas_of(messages, options)?
        .remove(&name)
        .ok_or_else(|| DecodeError::Input(format!("no schema came out for {name}")))
}

/// The relation id of a Relation message (sent inside a stream block or not: its length
/// tells) or of an Insert, Update or Delete sent outside one; None for other messages.
pub fn message_relation_id(data: &[u8]) -> Option<RelationId> {
    if data.first() == Some(&b'R') {
        return [false, true].into_iter().find_map(|s| match parse_message(data, s) {
            Ok(Message::Relation(r)) => Some(r.id),
            _ => None,
        });
    }
    change_relation_id(data, false)
}
