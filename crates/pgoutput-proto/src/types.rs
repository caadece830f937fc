//! Borrowed, zero-copy Rust types for every pgoutput message.

use std::fmt;
use std::str::FromStr;

/// A WAL position. Written by PostgreSQL as `X/Y` (high and low 32 bits in hex).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl fmt::Debug for Lsn {
    /// `Lsn(16/B374D848)`: PostgreSQL's notation, as logs and `pg_lsn` show it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid LSN {0:?}: expected X/Y with X and Y hexadecimal 32-bit numbers")]
pub struct LsnParseError(pub String);

impl FromStr for Lsn {
    type Err = LsnParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Lsn::from_ascii(s.as_bytes()).ok_or_else(|| LsnParseError(s.to_string()))
    }
}

impl Lsn {
    /// `X/Y` as bytes (what `FromStr` parses), None if it is not an LSN. By hand rather
    /// than split_once + from_str_radix: a capture's lsn column is parsed once per
    /// message, and that was 8% of decoding a capture from Python.
    pub fn from_ascii(b: &[u8]) -> Option<Lsn> {
        let slash = b.iter().position(|&c| c == b'/')?;
        Some(Lsn(hex_half(&b[..slash])? << 32 | hex_half(&b[slash + 1..])?))
    }
}

/// [`HEX_DIGITS`] of a byte that is not a hexadecimal digit.
const NOT_HEX: u8 = 0x10;

/// Each byte's value as a hexadecimal digit, or [`NOT_HEX`]: a digit is a lookup, without
/// a branch (a `match` on the byte's ranges cost about 20 instructions an LSN more).
static HEX_DIGITS: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// One half of an LSN's text: 1 to 8 hexadecimal digits.
#[inline]
fn hex_half(p: &[u8]) -> Option<u64> {
    if p.is_empty() || p.len() > 8 {
        return None;
    }
    let (value, seen) = p.iter().fold((0u64, 0u8), |(value, seen), &c| {
        let d = HEX_DIGITS[usize::from(c)];
        (value << 4 | u64::from(d & 0xF), seen | d)
    });
    (seen & NOT_HEX == 0).then_some(value)
}

pub type Xid = u32;
pub type Oid = u32;
pub type RelationId = u32;
/// Microseconds since 2000-01-01 00:00:00 UTC, PostgreSQL's epoch.
pub type PgTimestamp = i64;

/// Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01).
pub const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplicaIdentity {
    /// 'd': the primary key.
    Default,
    /// 'n': no old values at all.
    Nothing,
    /// 'f': the whole old row.
    Full,
    /// 'i': the columns of a chosen unique index.
    Index,
}

impl ReplicaIdentity {
    pub fn as_char(self) -> char {
        match self {
            ReplicaIdentity::Default => 'd',
            ReplicaIdentity::Nothing => 'n',
            ReplicaIdentity::Full => 'f',
            ReplicaIdentity::Index => 'i',
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ReplicaIdentity::Default => "default",
            ReplicaIdentity::Nothing => "nothing",
            ReplicaIdentity::Full => "full",
            ReplicaIdentity::Index => "index",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    pub final_lsn: Lsn,
    pub commit_ts: PgTimestamp,
    pub xid: Xid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_ts: PgTimestamp,
}

/// The replication origin of the transaction being sent. It follows Begin,
/// Begin Prepare, or the first Stream Start of a transaction (inside the stream
/// block, and then with `commit_lsn` 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin<'a> {
    /// The commit LSN on the origin server; 0 after a Stream Start.
    pub commit_lsn: Lsn,
    pub name: &'a str,
}

/// A logical decoding message (`pg_logical_emit_message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalMessage<'a> {
    /// Present only inside Stream Start … Stream Stop: the xid of the
    /// (sub)transaction that made the change, which is a subtransaction's own
    /// xid after a SAVEPOINT, not necessarily the Stream Start's xid.
    pub xid: Option<Xid>,
    pub transactional: bool,
    pub lsn: Lsn,
    pub prefix: &'a str,
    pub content: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column<'a> {
    /// Part of the replica identity key (flag bit 1).
    pub is_key: bool,
    pub name: &'a str,
    pub type_oid: Oid,
    pub type_modifier: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation<'a> {
    /// Present only inside Stream Start … Stream Stop: the xid of the
    /// (sub)transaction that made the change, which is a subtransaction's own
    /// xid after a SAVEPOINT, not necessarily the Stream Start's xid.
    pub xid: Option<Xid>,
    pub id: RelationId,
    /// Empty for pg_catalog.
    pub namespace: &'a str,
    pub name: &'a str,
    pub replica_identity: ReplicaIdentity,
    pub columns: Vec<Column<'a>>,
}

/// A Type message ('Y'): a non-built-in type announced before a Relation uses it.
///
/// For a domain, PostgreSQL sends the domain's OID (the one the Relation's
/// column carries) with the name and namespace of its base type (for example
/// `""` and `"int4"`; see proto.c's `logicalrep_write_typ`): its values come in
/// the base type's format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo<'a> {
    /// Present only inside Stream Start … Stream Stop: the xid of the
    /// (sub)transaction that made the change, which is a subtransaction's own
    /// xid after a SAVEPOINT, not necessarily the Stream Start's xid.
    pub xid: Option<Xid>,
    pub oid: Oid,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// One column value of a TupleData.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Cell<'a> {
    Null,
    /// 'u': an out-of-line value the update did not change; it is not sent.
    UnchangedToast,
    /// 't': the type's text output.
    Text(&'a [u8]),
    /// 'b': the type's binary send format.
    Binary(&'a [u8]),
}

impl fmt::Debug for Cell<'_> {
    /// Values print as escaped byte strings (`Text(b"42")`), not as lists of numbers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cell::Null => f.write_str("Null"),
            Cell::UnchangedToast => f.write_str("UnchangedToast"),
            Cell::Text(v) => write!(f, "Text(b\"{}\")", v.escape_ascii()),
            Cell::Binary(v) => write!(f, "Binary(b\"{}\")", v.escape_ascii()),
        }
    }
}

/// A validated TupleData; iterate with [`TupleData::cells`] (no further checks needed).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TupleData<'a> {
    pub(crate) column_count: u16,
    /// The column parts, after the Int16 count; already validated.
    pub(crate) raw: &'a [u8],
}

impl<'a> TupleData<'a> {
    pub fn len(&self) -> usize {
        self.column_count as usize
    }
    pub fn is_empty(&self) -> bool {
        self.column_count == 0
    }
    pub fn cells(&self) -> Cells<'a> {
        Cells { raw: self.raw, left: self.column_count }
    }
    /// The same tuple, as [`UncheckedTuple`] holds one (a well-formed tuple checks).
    pub fn unchecked(&self) -> UncheckedTuple<'a> {
        UncheckedTuple { column_count: self.column_count, raw: self.raw }
    }
}

impl fmt::Debug for TupleData<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.cells()).finish()
    }
}

/// The last TupleData of a row change, not walked yet: its column count and every byte of
/// the message after it. [`parse_row_change`](crate::parse_row_change) hands the new tuple
/// over so, and the caller's one walk of its cells ([`UncheckedTuple::cells`], then
/// [`UncheckedCells::is_whole`]) is the check: a cell kind outside 'n', 'u', 't', 'b', a
/// length past the end, fewer cells than counted or bytes after the last cell make it
/// malformed, and [`parse_message`](crate::parse_message) then says where and what.
/// [`UncheckedTuple::check`] validates it whole into a [`TupleData`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UncheckedTuple<'a> {
    pub(crate) column_count: u16,
    /// The message's bytes after the Int16 count, the cells first.
    pub(crate) raw: &'a [u8],
}

impl<'a> UncheckedTuple<'a> {
    /// The column count the tuple announces.
    pub fn len(&self) -> usize {
        self.column_count as usize
    }
    pub fn is_empty(&self) -> bool {
        self.column_count == 0
    }
    /// The cells, up to the first malformed one; [`UncheckedCells::is_whole`] after them
    /// tells whether the tuple was well formed and the message ended with it.
    pub fn cells(&self) -> UncheckedCells<'a> {
        UncheckedCells(Cells { raw: self.raw, left: self.column_count })
    }
}

impl fmt::Debug for UncheckedTuple<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UncheckedTuple({} columns, b\"{}\")", self.column_count, self.raw.escape_ascii())
    }
}

/// A TupleData cell kind with a value: 't', 'b' ([`CELL_KIND`]).
pub(crate) const CELL_VALUE: u8 = 2;
/// A TupleData cell kind without one: 'n', 'u' ([`CELL_KIND`]).
pub(crate) const CELL_NO_VALUE: u8 = 1;

/// What each byte is as a TupleData cell kind: [`CELL_VALUE`], [`CELL_NO_VALUE`], or 0, not
/// a kind.
pub(crate) const CELL_KIND: [u8; 256] = {
    let mut kinds = [0u8; 256];
    kinds[b't' as usize] = CELL_VALUE;
    kinds[b'b' as usize] = CELL_VALUE;
    kinds[b'n' as usize] = CELL_NO_VALUE;
    kinds[b'u' as usize] = CELL_NO_VALUE;
    kinds
};

/// Iterator over the cells of a validated TupleData.
#[derive(Clone)]
pub struct Cells<'a> {
    raw: &'a [u8],
    left: u16,
}

/// Iterator over the cells of an [`UncheckedTuple`], up to the first that is not well formed.
#[derive(Clone)]
pub struct UncheckedCells<'a>(Cells<'a>);

impl UncheckedCells<'_> {
    /// Every cell was read and no byte follows the last: the tuple was well formed.
    #[inline]
    pub fn is_whole(&self) -> bool {
        self.0.left == 0 && self.0.raw.is_empty()
    }

    /// How many of the cells the tuple announces were not read (yet, or for good: the
    /// first malformed one and those after it).
    pub fn unread(&self) -> usize {
        self.0.left as usize
    }
}

impl<'a> Iterator for UncheckedCells<'a> {
    type Item = Cell<'a>;
    #[inline]
    fn next(&mut self) -> Option<Cell<'a>> {
        self.0.next()
    }
}

impl<'a> Iterator for Cells<'a> {
    type Item = Cell<'a>;
    #[inline]
    fn next(&mut self) -> Option<Cell<'a>> {
        if self.left == 0 {
            return None;
        }
        // Every read is checked: this is the check of an unchecked tuple (`UncheckedCells`),
        // and keeps the walk of a validated one panic-free. The kind is looked up in
        // [`CELL_KIND`], not matched: a `match` on four bytes compiled to a jump table.
        let (&kind, rest) = self.raw.split_first()?;
        let class = CELL_KIND[usize::from(kind)];
        let cell = if class == CELL_VALUE {
            let (len, rest) = rest.split_first_chunk::<4>()?;
            let len = usize::try_from(i32::from_be_bytes(*len)).ok()?;
            if len > rest.len() {
                return None;
            }
            let (value, rest) = rest.split_at(len);
            self.raw = rest;
            if kind == b'b' {
                Cell::Binary(value)
            } else {
                Cell::Text(value)
            }
        } else if class == CELL_NO_VALUE {
            self.raw = rest;
            if kind == b'n' {
                Cell::Null
            } else {
                Cell::UnchangedToast
            }
        } else {
            return None;
        };
        self.left -= 1;
        Some(cell)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Cells<'_> {}

/// The old values an Update or Delete carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldTuple<'a> {
    /// 'K': the replica identity key columns (others are null).
    Key(TupleData<'a>),
    /// 'O': the whole old row (REPLICA IDENTITY FULL).
    Full(TupleData<'a>),
}

impl<'a> OldTuple<'a> {
    pub fn tuple(&self) -> &TupleData<'a> {
        match self {
            OldTuple::Key(t) | OldTuple::Full(t) => t,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert<'a> {
    /// Present only inside Stream Start … Stream Stop: the xid of the
    /// (sub)transaction that made the change, which is a subtransaction's own
    /// xid after a SAVEPOINT, not necessarily the Stream Start's xid.
    pub xid: Option<Xid>,
    pub relation_id: RelationId,
    pub new: TupleData<'a>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update<'a> {
    /// Present only inside Stream Start … Stream Stop: the xid of the
    /// (sub)transaction that made the change, which is a subtransaction's own
    /// xid after a SAVEPOINT, not necessarily the Stream Start's xid.
    pub xid: Option<Xid>,
    pub relation_id: RelationId,
    pub old: Option<OldTuple<'a>>,
    pub new: TupleData<'a>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete<'a> {
    /// Present only inside Stream Start … Stream Stop: the xid of the
    /// (sub)transaction that made the change, which is a subtransaction's own
    /// xid after a SAVEPOINT, not necessarily the Stream Start's xid.
    pub xid: Option<Xid>,
    pub relation_id: RelationId,
    pub old: OldTuple<'a>,
}

/// Which row change a [`RowChange`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
}

/// An Insert, Update or Delete outside a stream block, as
/// [`parse_row_change`](crate::parse_row_change) reads it: the fields of [`Insert`],
/// [`Update`] and [`Delete`] (which carry no xid there) in one shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowChange<'a> {
    pub kind: ChangeKind,
    pub relation_id: RelationId,
    /// Update (when sent) and Delete (always).
    pub old: Option<OldTuple<'a>>,
    /// Insert and Update: the message's last tuple, not walked yet.
    pub new: Option<UncheckedTuple<'a>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// Present only inside Stream Start … Stream Stop: the xid of the
    /// (sub)transaction that made the change, which is a subtransaction's own
    /// xid after a SAVEPOINT, not necessarily the Stream Start's xid.
    pub xid: Option<Xid>,
    pub cascade: bool,
    pub restart_identity: bool,
    pub relation_ids: Vec<RelationId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStart {
    pub xid: Xid,
    pub first_segment: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCommit {
    pub xid: Xid,
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_ts: PgTimestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamAbort {
    pub xid: Xid,
    /// Equal to `xid` when the whole transaction aborted; otherwise the
    /// subtransaction rolled back (ROLLBACK TO SAVEPOINT).
    pub subxid: Xid,
    /// Protocol 4 with `streaming 'parallel'` only. The parser tells the two
    /// forms apart by the message's length, so it reads whichever a server sends.
    pub abort_lsn: Option<Lsn>,
    pub abort_ts: Option<PgTimestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginPrepare<'a> {
    pub prepare_lsn: Lsn,
    pub end_lsn: Lsn,
    pub prepare_ts: PgTimestamp,
    pub xid: Xid,
    pub gid: &'a str,
}

/// Prepare ('P') and Stream Prepare ('p') share this layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepare<'a> {
    pub flags: u8,
    pub prepare_lsn: Lsn,
    pub end_lsn: Lsn,
    pub prepare_ts: PgTimestamp,
    pub xid: Xid,
    pub gid: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPrepared<'a> {
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_ts: PgTimestamp,
    pub xid: Xid,
    pub gid: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackPrepared<'a> {
    pub flags: u8,
    pub prepare_end_lsn: Lsn,
    pub rollback_end_lsn: Lsn,
    pub prepare_ts: PgTimestamp,
    pub rollback_ts: PgTimestamp,
    pub xid: Xid,
    pub gid: &'a str,
}

/// One pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    Begin(Begin),
    Message(LogicalMessage<'a>),
    Commit(Commit),
    Origin(Origin<'a>),
    Relation(Relation<'a>),
    Type(TypeInfo<'a>),
    Insert(Insert<'a>),
    Update(Update<'a>),
    Delete(Delete<'a>),
    Truncate(Truncate),
    StreamStart(StreamStart),
    StreamStop,
    StreamCommit(StreamCommit),
    StreamAbort(StreamAbort),
    BeginPrepare(BeginPrepare<'a>),
    Prepare(Prepare<'a>),
    CommitPrepared(CommitPrepared<'a>),
    RollbackPrepared(RollbackPrepared<'a>),
    StreamPrepare(Prepare<'a>),
}

impl Message<'_> {
    /// The message's name as the PostgreSQL documentation writes it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Message::Begin(_) => "Begin",
            Message::Message(_) => "Message",
            Message::Commit(_) => "Commit",
            Message::Origin(_) => "Origin",
            Message::Relation(_) => "Relation",
            Message::Type(_) => "Type",
            Message::Insert(_) => "Insert",
            Message::Update(_) => "Update",
            Message::Delete(_) => "Delete",
            Message::Truncate(_) => "Truncate",
            Message::StreamStart(_) => "Stream Start",
            Message::StreamStop => "Stream Stop",
            Message::StreamCommit(_) => "Stream Commit",
            Message::StreamAbort(_) => "Stream Abort",
            Message::BeginPrepare(_) => "Begin Prepare",
            Message::Prepare(_) => "Prepare",
            Message::CommitPrepared(_) => "Commit Prepared",
            Message::RollbackPrepared(_) => "Rollback Prepared",
            Message::StreamPrepare(_) => "Stream Prepare",
        }
    }
}
