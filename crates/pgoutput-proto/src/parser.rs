//! pgoutput messages, protocol versions 1 to 4, following PostgreSQL 18's
//! "Logical Replication Message Formats" (section 54.9).

use crate::cursor::Cursor;
use crate::error::ParseError;
use crate::types::*;

/// Decodes pgoutput messages one at a time, tracking whether the stream is
/// inside a Stream Start … Stream Stop block: only there do Relation, Type,
/// Insert, Update, Delete, Truncate and Message carry a transaction id.
#[derive(Debug, Clone, Default)]
pub struct Parser {
    in_stream: bool,
}

impl Parser {
    pub fn new() -> Self {
        Parser::default()
    }

    /// A parser that starts inside (or outside) a stream block, for callers that
    /// resume in the middle of a stream.
    pub fn with_in_stream(in_stream: bool) -> Self {
        Parser { in_stream }
    }

    /// Whether the next message is expected inside a Stream Start … Stop block.
    pub fn in_stream(&self) -> bool {
        self.in_stream
    }

    /// Decodes one message. On error the stream state is left unchanged.
    pub fn parse<'a>(&mut self, data: &'a [u8]) -> Result<Message<'a>, ParseError> {
        let message = parse_message(data, self.in_stream)?;
        match message {
            Message::StreamStart(_) => self.in_stream = true,
            Message::StreamStop => self.in_stream = false,
            _ => {}
        }
        Ok(message)
    }
}

/// The message kinds of protocol versions 1 to 4, for the error on any other byte.
const MESSAGE_KINDS: &str = "one of 'B' (Begin), 'C' (Commit), 'O' (Origin), 'R' (Relation), 'Y' (Type), \
'I' (Insert), 'U' (Update), 'D' (Delete), 'T' (Truncate), 'M' (Message), 'S' (Stream Start), \
'E' (Stream Stop), 'c' (Stream Commit), 'A' (Stream Abort), 'b' (Begin Prepare), 'P' (Prepare), \
'K' (Commit Prepared), 'r' (Rollback Prepared), 'p' (Stream Prepare)";

/// Decodes one message given the stream state explicitly, without tracking it.
pub fn parse_message(data: &[u8], in_stream: bool) -> Result<Message<'_>, ParseError> {
    let mut c = Cursor::new(data);
    let kind = match c.u8("message kind") {
        Ok(kind) => kind,
        Err(_) => return Err(ParseError::Empty),
    };
    let stream_xid = |c: &mut Cursor<'_>| -> Result<Option<Xid>, ParseError> {
        if in_stream {
            Ok(Some(c.u32("xid of the streamed transaction")?))
        } else {
            Ok(None)
        }
    };
    let message = match kind {
        b'B' => Message::Begin(Begin {
            final_lsn: Lsn(c.u64("final LSN")?),
            commit_ts: c.i64("commit timestamp")?,
            xid: c.u32("xid")?,
        }),
        b'M' => {
            let xid = stream_xid(&mut c)?;
            let flags_at = c.offset();
            let flags = c.u8("message flags")?;
            if flags > 1 {
                return Err(invalid(flags_at, "message flags", "0 or 1", flags));
            }
            let lsn = Lsn(c.u64("message LSN")?);
            let prefix = c.cstr("message prefix")?;
            let len_at = c.offset();
            let len = c.i32("message content length")?;
            let len = usize::try_from(len)
                .map_err(|_| invalid(len_at, "message content length", "a length ≥ 0", len))?;
            let content = c.bytes(len, "message content")?;
            Message::Message(LogicalMessage { xid, transactional: flags == 1, lsn, prefix, content })
        }
        b'C' => Message::Commit(Commit {
            flags: c.u8("commit flags")?,
            commit_lsn: Lsn(c.u64("commit LSN")?),
            end_lsn: Lsn(c.u64("end LSN")?),
            commit_ts: c.i64("commit timestamp")?,
        }),
        b'O' => Message::Origin(Origin {
            commit_lsn: Lsn(c.u64("origin commit LSN")?),
            name: c.cstr("origin name")?,
        }),
        b'R' => {
            let xid = stream_xid(&mut c)?;
            let id = c.u32("relation id")?;
            let namespace = c.cstr("relation namespace")?;
            let name = c.cstr("relation name")?;
            let ident_at = c.offset();
            let replica_identity = match c.u8("replica identity")? {
                b'd' => ReplicaIdentity::Default,
                b'n' => ReplicaIdentity::Nothing,
                b'f' => ReplicaIdentity::Full,
                b'i' => ReplicaIdentity::Index,
                other => {
                    return Err(invalid(ident_at, "replica identity", "one of 'd', 'n', 'f', 'i'", other as char))
                }
            };
            let count_at = c.offset();
            let count = c.i16("column count")?;
            let count = usize::try_from(count)
                .map_err(|_| invalid(count_at, "column count", "a count ≥ 0", count))?;
            // Each column takes at least 10 bytes; cap the allocation by what is there.
            let mut columns = Vec::with_capacity(count.min(c.remaining() / 10));
            for _ in 0..count {
                let flags = c.u8("column flags")?;
                columns.push(Column {
                    is_key: flags & 1 == 1,
                    name: c.cstr("column name")?,
                    type_oid: c.u32("column type OID")?,
                    type_modifier: c.i32("column type modifier")?,
                });
            }
            Message::Relation(Relation { xid, id, namespace, name, replica_identity, columns })
        }
        b'Y' => Message::Type(TypeInfo {
            xid: stream_xid(&mut c)?,
            oid: c.u32("type OID")?,
            namespace: c.cstr("type namespace")?,
            name: c.cstr("type name")?,
        }),
        b'I' => {
            let xid = stream_xid(&mut c)?;
            let relation_id = c.u32("relation id")?;
            expect_byte(&mut c, b'N', "'N' before the new tuple")?;
            Message::Insert(Insert { xid, relation_id, new: tuple_data(&mut c)? })
        }
        b'U' => {
            let xid = stream_xid(&mut c)?;
            let relation_id = c.u32("relation id")?;
            let part_at = c.offset();
            let (old, new) = match c.u8("'K', 'O' or 'N'")? {
                b'K' => {
                    let old = OldTuple::Key(tuple_data(&mut c)?);
                    expect_byte(&mut c, b'N', "'N' before the new tuple")?;
                    (Some(old), tuple_data(&mut c)?)
                }
                b'O' => {
                    let old = OldTuple::Full(tuple_data(&mut c)?);
                    expect_byte(&mut c, b'N', "'N' before the new tuple")?;
                    (Some(old), tuple_data(&mut c)?)
                }
                b'N' => (None, tuple_data(&mut c)?),
                other => return Err(invalid(part_at, "update tuple marker", "'K', 'O' or 'N'", other as char)),
            };
            Message::Update(Update { xid, relation_id, old, new })
        }
        b'D' => {
            let xid = stream_xid(&mut c)?;
            let relation_id = c.u32("relation id")?;
            let part_at = c.offset();
            let old = match c.u8("'K' or 'O'")? {
                b'K' => OldTuple::Key(tuple_data(&mut c)?),
                b'O' => OldTuple::Full(tuple_data(&mut c)?),
                other => return Err(invalid(part_at, "delete tuple marker", "'K' or 'O'", other as char)),
            };
            Message::Delete(Delete { xid, relation_id, old })
        }
        b'T' => {
            let xid = stream_xid(&mut c)?;
            let count_at = c.offset();
            let count = c.i32("relation count")?;
            let count = usize::try_from(count)
                .map_err(|_| invalid(count_at, "relation count", "a count ≥ 0", count))?;
            let options_at = c.offset();
            let options = c.u8("truncate options")?;
            if options & !3 != 0 {
                return Err(invalid(options_at, "truncate options", "bits 1 (cascade) and 2 (restart identity)", options));
            }
            let mut relation_ids = Vec::with_capacity(count.min(c.remaining() / 4));
            for _ in 0..count {
                relation_ids.push(c.u32("truncated relation id")?);
            }
            Message::Truncate(Truncate {
                xid,
                cascade: options & 1 != 0,
                restart_identity: options & 2 != 0,
                relation_ids,
            })
        }
        b'S' => {
            let xid = c.u32("xid")?;
            let first_at = c.offset();
            let first = c.u8("first segment flag")?;
            if first > 1 {
                return Err(invalid(first_at, "first segment flag", "0 or 1", first));
            }
            Message::StreamStart(StreamStart { xid, first_segment: first == 1 })
        }
        b'E' => Message::StreamStop,
        b'c' => Message::StreamCommit(StreamCommit {
            xid: c.u32("xid")?,
            flags: c.u8("commit flags")?,
            commit_lsn: Lsn(c.u64("commit LSN")?),
            end_lsn: Lsn(c.u64("end LSN")?),
            commit_ts: c.i64("commit timestamp")?,
        }),
        b'A' => {
            let xid = c.u32("xid")?;
            let subxid = c.u32("subtransaction xid")?;
            // Protocol 4 with streaming 'parallel' appends the abort LSN and
            // timestamp; the message length tells which form arrived, so a
            // server that sends either form is read correctly.
            let (abort_lsn, abort_ts) = if c.remaining() == 0 {
                (None, None)
            } else {
                (Some(Lsn(c.u64("abort LSN")?)), Some(c.i64("abort timestamp")?))
            };
            Message::StreamAbort(StreamAbort { xid, subxid, abort_lsn, abort_ts })
        }
        b'b' => Message::BeginPrepare(BeginPrepare {
            prepare_lsn: Lsn(c.u64("prepare LSN")?),
            end_lsn: Lsn(c.u64("end LSN")?),
            prepare_ts: c.i64("prepare timestamp")?,
            xid: c.u32("xid")?,
            gid: c.cstr("gid")?,
        }),
        b'P' => Message::Prepare(prepare(&mut c)?),
        b'p' => Message::StreamPrepare(prepare(&mut c)?),
        b'K' => Message::CommitPrepared(CommitPrepared {
            flags: c.u8("flags")?,
            commit_lsn: Lsn(c.u64("commit LSN")?),
            end_lsn: Lsn(c.u64("end LSN")?),
            commit_ts: c.i64("commit timestamp")?,
            xid: c.u32("xid")?,
            gid: c.cstr("gid")?,
        }),
        b'r' => Message::RollbackPrepared(RollbackPrepared {
            flags: c.u8("flags")?,
            prepare_end_lsn: Lsn(c.u64("prepare end LSN")?),
            rollback_end_lsn: Lsn(c.u64("rollback end LSN")?),
            prepare_ts: c.i64("prepare timestamp")?,
            rollback_ts: c.i64("rollback timestamp")?,
            xid: c.u32("xid")?,
            gid: c.cstr("gid")?,
        }),
        other => return Err(ParseError::UnknownKind { offset: 0, byte: other, kind: other as char, expected: MESSAGE_KINDS }),
    };
    c.finish()?;
    Ok(message)
}

/// An Insert, Update or Delete sent outside a stream block, read without building a
/// [`Message`]: a decoder's hot path, since changes are most of a stream. The new tuple,
/// always the message's last part, is handed over unwalked ([`UncheckedTuple`]): the
/// decoder's walk of its cells is its check, one walk instead of two. None for any other
/// message and for one whose other parts are not well formed, which [`parse_message`] then
/// reads and reports. When it is Some and its new tuple [checks](UncheckedTuple::check),
/// `parse_message(data, false)` gives the same change; when the new tuple does not check,
/// `parse_message` reports the error.
#[inline]
pub fn parse_row_change(data: &[u8]) -> Option<RowChange<'_>> {
    let (&kind, rest) = data.split_first()?;
    let kind = match kind {
        b'I' => ChangeKind::Insert,
        b'U' => ChangeKind::Update,
        b'D' => ChangeKind::Delete,
        _ => return None,
    };
    let (id, mut rest) = rest.split_first_chunk::<4>()?;
    let relation_id = u32::from_be_bytes(*id);
    let (&marker, after) = rest.split_first()?;
    rest = after;
    let old = match (kind, marker) {
        (ChangeKind::Insert | ChangeKind::Update, b'N') => None,
        (ChangeKind::Update | ChangeKind::Delete, b'K') => Some(OldTuple::Key(next_tuple(&mut rest)?)),
        (ChangeKind::Update | ChangeKind::Delete, b'O') => Some(OldTuple::Full(next_tuple(&mut rest)?)),
        _ => return None,
    };
    if kind == ChangeKind::Delete {
        // As `Cursor::finish`: nothing may follow the last tuple.
        return rest.is_empty().then_some(RowChange { kind, relation_id, old, new: None });
    }
    if old.is_some() {
        let (&n, after) = rest.split_first()?;
        if n != b'N' {
            return None;
        }
        rest = after;
    }
    // The trailing bytes of the message are the tuple's: its walk rejects them.
    let (count, raw) = rest.split_first_chunk::<2>()?;
    let column_count = u16::try_from(i16::from_be_bytes(*count)).ok()?;
    Some(RowChange { kind, relation_id, old, new: Some(UncheckedTuple { column_count, raw }) })
}

impl<'a> UncheckedTuple<'a> {
    /// The tuple validated whole ([`parse_message`]'s walk), None if it is not well formed
    /// or bytes follow it.
    pub fn check(&self) -> Option<TupleData<'a>> {
        (tuple_len(self.raw, self.column_count)? == self.raw.len())
            .then_some(TupleData { column_count: self.column_count, raw: self.raw })
    }
}

/// A TupleData at the start of `rest`, which moves past it; None if it is not well formed.
/// Always inlined: returned from a call, the TupleData went through the stack and its
/// reload missed store forwarding (perf: a tenth of the decoder's cycles on one load).
#[inline(always)]
fn next_tuple<'a>(rest: &mut &'a [u8]) -> Option<TupleData<'a>> {
    let (count, body) = rest.split_first_chunk::<2>()?;
    let column_count = u16::try_from(i16::from_be_bytes(*count)).ok()?;
    let len = tuple_len(body, column_count)?;
    let (raw, after) = body.split_at(len);
    *rest = after;
    Some(TupleData { column_count, raw })
}

fn prepare<'a>(c: &mut Cursor<'a>) -> Result<Prepare<'a>, ParseError> {
    Ok(Prepare {
        flags: c.u8("flags")?,
        prepare_lsn: Lsn(c.u64("prepare LSN")?),
        end_lsn: Lsn(c.u64("end LSN")?),
        prepare_ts: c.i64("prepare timestamp")?,
        xid: c.u32("xid")?,
        gid: c.cstr("gid")?,
    })
}

fn expect_byte(c: &mut Cursor<'_>, want: u8, what: &'static str) -> Result<(), ParseError> {
    let at = c.offset();
    let got = c.u8(what)?;
    if got != want {
        return Err(invalid(at, "tuple marker", what, got as char));
    }
    Ok(())
}

fn tuple_data<'a>(c: &mut Cursor<'a>) -> Result<TupleData<'a>, ParseError> {
    let count_at = c.offset();
    let count = c.i16("TupleData column count")?;
    let column_count =
        u16::try_from(count).map_err(|_| invalid(count_at, "TupleData column count", "a count ≥ 0", count))?;
    let start = c.offset();
    // A tight walk first (this runs for every change); on any problem, the walk below
    // finds it again and says where and what.
    if let Some(len) = tuple_len(c.rest(), column_count) {
        c.skip(len);
        return Ok(TupleData { column_count, raw: c.slice_from(start) });
    }
    for _ in 0..column_count {
        let kind_at = c.offset();
        match c.u8("TupleData cell kind ('n', 'u', 't' or 'b')")? {
            b'n' | b'u' => {}
            b't' | b'b' => {
                let len_at = c.offset();
                let len = c.i32("TupleData value length")?;
                let len = usize::try_from(len)
                    .map_err(|_| invalid(len_at, "TupleData value length", "a length ≥ 0", len))?;
                c.bytes(len, "TupleData value")?;
            }
            other => return Err(invalid(kind_at, "TupleData cell kind", "'n', 'u', 't' or 'b'", other as char)),
        }
    }
    let raw = c.slice_from(start);
    Ok(TupleData { column_count, raw })
}

/// Bytes taken by `count` well-formed cells at the start of `buf`; None if they are not.
/// The kind is looked up in [`CELL_KIND`], not matched: a `match` on four bytes compiled
/// to a jump table, an indirect branch per cell.
#[inline]
fn tuple_len(buf: &[u8], count: u16) -> Option<usize> {
    let mut pos = 0usize;
    for _ in 0..count {
        match CELL_KIND[usize::from(*buf.get(pos)?)] {
            CELL_VALUE => {
                let len: [u8; 4] = buf.get(pos + 1..pos + 5)?.try_into().ok()?;
                let len = usize::try_from(i32::from_be_bytes(len)).ok()?;
                pos = (pos + 5).checked_add(len)?;
                if pos > buf.len() {
                    return None;
                }
            }
            CELL_NO_VALUE => pos += 1,
            _ => return None,
        }
    }
    Some(pos)
}

fn invalid(offset: usize, field: &'static str, expected: &'static str, found: impl std::fmt::Debug) -> ParseError {
    ParseError::InvalidValue { offset, field, expected, found: format!("{found:?}") }
}
