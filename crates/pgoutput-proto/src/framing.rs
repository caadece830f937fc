//! Transaction framing: which transaction each pgoutput message belongs to, and when a
//! transaction is open, streamed, prepared or decided. The one home of these rules; the
//! Arrow decoder, the walsender reader and any rebuild of a stream follow them through
//! [`TxnFraming`].
//!
//! PostgreSQL 18, "Logical Streaming Replication Protocol" (section 54.5.x) and
//! src/backend/replication/pgoutput/pgoutput.c:
//! * a transaction sent whole is Begin … Commit;
//! * a two-phase one (protocol 3+) is Begin Prepare … Prepare, then later, by its gid,
//!   Commit Prepared or Rollback Prepared;
//! * a streamed one (protocol 2+) comes in blocks Stream Start … Stream Stop, interleaved
//!   with other transactions, until Stream Commit, Stream Abort (of the whole transaction
//!   or of one subtransaction) or Stream Prepare (protocol 3+: then it is prepared).
//!
//! Relation, Type, Insert, Update, Delete, Truncate, Origin and transactional Messages
//! belong to the transaction open at that point: the stream block's if there is one, else
//! the one between Begin and its end. Relation, Type and non-transactional Messages may
//! also come outside any transaction.

use std::collections::HashMap;
use std::fmt;

use crate::types::{Lsn, Message, Xid};

/// The kinds (first bytes) of the messages that end a transaction's decoding: Commit,
/// Stream Commit, Prepare and Stream Prepare (a two-phase transaction is decoded at its
/// Prepare; Commit Prepared and Rollback Prepared only decide it).
pub const TRANSACTION_END_KINDS: &[u8] = b"CcPp";

/// Whether a message of this kind belongs inside a Stream Start … Stop block when its
/// transaction is streamed: Relation, Type, the row changes, Truncate and Message (see the
/// module documentation).
pub fn in_stream_block(kind: u8) -> bool {
    matches!(kind, b'Y' | b'R' | b'I' | b'U' | b'D' | b'T' | b'M')
}

/// A message that is well formed but does not fit the transactions seen so far (a Commit
/// without Begin, a Stream Commit for an unknown xid). The framing is left as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramingError {
    /// The message's name as the PostgreSQL documentation writes it ([`Message::kind_name`]).
    pub kind: &'static str,
    pub message: String,
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FramingError {}

fn error(kind: &'static str, message: String) -> FramingError {
    FramingError { kind, message }
}

/// The transaction between Begin (or Begin Prepare) and Commit (or Prepare).
#[derive(Debug)]
struct Open<T> {
    xid: Xid,
    /// Begin Prepare's prepare LSN: a two-phase transaction.
    prepare_lsn: Option<Lsn>,
    payload: T,
}

/// A prepared transaction waiting for Commit Prepared or Rollback Prepared.
#[derive(Debug)]
struct Waiting<T> {
    prepare_lsn: Lsn,
    payload: T,
}

/// What Stream Abort did.
#[derive(Debug)]
pub enum StreamAborted<'a, T> {
    /// The whole streamed transaction is rolled back; None when no Stream Start of it was
    /// seen (PostgreSQL 18 also reports aborts of transactions it never streamed).
    Transaction(Option<T>),
    /// One subtransaction rolled back (ROLLBACK TO SAVEPOINT): the streamed transaction it
    /// belongs to stays open; None when no Stream Start of it was seen.
    Subtransaction(Option<&'a mut T>),
}

/// The transactions of a pgoutput stream and their state, each carrying a `T` of the
/// caller's (the decoder keeps its buffered messages there; `()` when only the boundaries
/// matter).
///
/// Each transition method checks the message against the state first: on error nothing
/// changes, and the caller may go on with the next message. The payload of a new
/// transaction is made by the caller's closure only once the message is accepted.
#[derive(Debug)]
pub struct TxnFraming<T> {
    current: Option<Open<T>>,
    /// Inside a Stream Start … Stop block: the top-level xid it streams.
    block: Option<Xid>,
    /// The block's transaction, kept out of `streams` while its block lasts (every change
    /// of the block reaches it without a lookup). None while `block` is None, or when the
    /// transaction was aborted inside its own block.
    block_txn: Option<T>,
    /// Streamed transactions not decided yet, by top-level xid (except the block's).
    streams: HashMap<Xid, T>,
    /// Prepared transactions waiting for their outcome, by gid.
    prepared: HashMap<String, Waiting<T>>,
}

impl<T> Default for TxnFraming<T> {
    fn default() -> Self {
        TxnFraming { current: None, block: None, block_txn: None, streams: HashMap::new(), prepared: HashMap::new() }
    }
}

impl<T> TxnFraming<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The top-level xid of the Stream Start … Stop block the stream is in. Inside a block,
    /// Relation, Type, Insert, Update, Delete, Truncate and Message carry an xid
    /// (see [`parse_message`](crate::parse_message)'s `in_stream`).
    pub fn stream_block(&self) -> Option<Xid> {
        self.block
    }

    /// The transaction that a change, Truncate, transactional Message or Origin arriving
    /// now belongs to: the stream block's, else the one opened by Begin or Begin Prepare.
    pub fn open_mut(&mut self) -> Option<&mut T> {
        match self.block {
            Some(_) => self.block_txn.as_mut(),
            None => self.current.as_mut().map(|o| &mut o.payload),
        }
    }

    /// The transaction opened by Begin or Begin Prepare and not ended yet, and whether it
    /// is a two-phase one.
    pub fn current(&self) -> Option<(&T, bool)> {
        self.current.as_ref().map(|o| (&o.payload, o.prepare_lsn.is_some()))
    }

    pub fn current_mut(&mut self) -> Option<&mut T> {
        self.current.as_mut().map(|o| &mut o.payload)
    }

    /// The open transaction's xid, for messages to say which transaction is in the way.
    #[inline]
    fn check_none_open(&self, kind: &'static str) -> Result<(), FramingError> {
        if self.current.is_some() || self.block.is_some() {
            return Err(self.open_error(kind));
        }
        Ok(())
    }

    /// What is open where `kind` needs nothing open. Out of line: a Begin (one in four of
    /// pgbench's messages) inlines the check alone.
    #[cold]
    #[inline(never)]
    fn open_error(&self, kind: &'static str) -> FramingError {
        match (&self.current, self.block) {
            (Some(o), _) => error(kind, format!("{kind} while transaction {} is open", o.xid)),
            (None, x) => {
                let x = x.unwrap_or_default();
                error(kind, format!("{kind} while the stream block of transaction {x} is open"))
            }
        }
    }

    /// Begin: a transaction sent whole opens.
    #[inline]
    pub fn begin(&mut self, xid: Xid, make: impl FnOnce() -> T) -> Result<&mut T, FramingError> {
        self.check_none_open("Begin")?;
        Ok(&mut self.current.insert(Open { xid, prepare_lsn: None, payload: make() }).payload)
    }

    /// Begin Prepare: a two-phase transaction opens; it ends at Prepare.
    pub fn begin_prepare(
        &mut self,
        xid: Xid,
        prepare_lsn: Lsn,
        make: impl FnOnce() -> T,
    ) -> Result<&mut T, FramingError> {
        self.check_none_open("Begin Prepare")?;
        Ok(&mut self.current.insert(Open { xid, prepare_lsn: Some(prepare_lsn), payload: make() }).payload)
    }

    /// Commit: the transaction opened by Begin is committed and handed back.
    pub fn commit(&mut self) -> Result<T, FramingError> {
        match self.current.take() {
            Some(o) if o.prepare_lsn.is_none() => Ok(o.payload),
            other => {
                self.current = other;
                Err(error("Commit", "Commit without a Begin before it".into()))
            }
        }
    }

    /// Prepare: the transaction opened by Begin Prepare waits for its outcome under `gid`.
    /// Returns it, and the transaction prepared earlier under the same gid that it replaces
    /// (the prepare sent anew after a reconnection).
    pub fn prepare(&mut self, gid: &str, prepare_lsn: Lsn) -> Result<(&mut T, Option<T>), FramingError> {
        match self.current.take() {
            Some(o) if o.prepare_lsn.is_some() => Ok(self.wait(gid, prepare_lsn, o.payload)),
            other => {
                self.current = other;
                Err(error("Prepare", "Prepare without a Begin Prepare before it".into()))
            }
        }
    }

    fn wait(&mut self, gid: &str, prepare_lsn: Lsn, payload: T) -> (&mut T, Option<T>) {
        let old = self.prepared.insert(gid.to_string(), Waiting { prepare_lsn, payload }).map(|w| w.payload);
        let waiting = self.prepared.get_mut(gid).expect("inserted above");
        (&mut waiting.payload, old)
    }

    /// Stream Start: a block of streamed transaction `xid` opens; its transaction is made
    /// at its first block. Returns it, and, when a first segment comes for a transaction
    /// already streaming (the stream started again after a reconnection), what that one
    /// had, which the server sends anew.
    pub fn stream_start(
        &mut self,
        xid: Xid,
        first_segment: bool,
        make: impl FnOnce() -> T,
    ) -> Result<(&mut T, Option<T>), FramingError> {
        let kind = "Stream Start";
        if let Some(x) = self.block {
            return Err(error(kind, format!("{kind} while the stream block of transaction {x} is open")));
        }
        if let Some(o) = &self.current {
            return Err(error(kind, format!("{kind} while transaction {} is open", o.xid)));
        }
        let mut restarted = None;
        let txn = match self.streams.remove(&xid) {
            Some(old) if first_segment => {
                restarted = Some(old);
                make()
            }
            Some(txn) => txn,
            None => make(),
        };
        self.block = Some(xid);
        Ok((self.block_txn.insert(txn), restarted))
    }

    /// Stream Stop: the block ends; its transaction stays open. Returns its xid.
    pub fn stream_stop(&mut self) -> Result<Xid, FramingError> {
        let Some(xid) = self.block.take() else {
            return Err(error("Stream Stop", "Stream Stop outside a stream block".into()));
        };
        if let Some(txn) = self.block_txn.take() {
            self.streams.insert(xid, txn);
        }
        Ok(xid)
    }

    /// Takes the streamed transaction `xid` out, closing its block if the stream is in it.
    fn take_stream(&mut self, xid: Xid) -> Option<T> {
        if self.block == Some(xid) {
            if let Some(txn) = self.block_txn.take() {
                self.block = None;
                return Some(txn);
            }
        }
        self.streams.remove(&xid)
    }

    /// Stream Commit: the streamed transaction `xid` is committed and handed back.
    pub fn stream_commit(&mut self, xid: Xid) -> Result<T, FramingError> {
        self.take_stream(xid).ok_or_else(|| {
            error("Stream Commit", format!("Stream Commit for transaction {xid}, which no Stream Start opened"))
        })
    }

    /// Stream Prepare: the streamed transaction `xid` waits for its outcome under `gid`
    /// (see [`prepare`](Self::prepare)).
    pub fn stream_prepare(&mut self, xid: Xid, gid: &str, prepare_lsn: Lsn) -> Result<(&mut T, Option<T>), FramingError> {
        let Some(txn) = self.take_stream(xid) else {
            return Err(error(
                "Stream Prepare",
                format!("Stream Prepare for transaction {xid}, which no Stream Start opened"),
            ));
        };
        Ok(self.wait(gid, prepare_lsn, txn))
    }

    /// Stream Abort of `subxid` within streamed transaction `xid` (the same xid: the whole
    /// transaction). Never an error: the server reports aborts of transactions it did not
    /// stream.
    pub fn stream_abort(&mut self, xid: Xid, subxid: Xid) -> StreamAborted<'_, T> {
        if xid == subxid {
            // Aborted inside its own block, the block goes on to its Stop with nothing open.
            if self.block == Some(xid) {
                return StreamAborted::Transaction(self.block_txn.take());
            }
            return StreamAborted::Transaction(self.streams.remove(&xid));
        }
        if self.block == Some(xid) {
            return StreamAborted::Subtransaction(self.block_txn.as_mut());
        }
        StreamAborted::Subtransaction(self.streams.get_mut(&xid))
    }

    /// Commit Prepared: the transaction prepared under `gid` is committed and handed back.
    /// `xid` only names it in the error.
    pub fn commit_prepared(&mut self, gid: &str, xid: Xid) -> Result<T, FramingError> {
        match self.prepared.remove(gid) {
            Some(w) => Ok(w.payload),
            None => Err(error(
                "Commit Prepared",
                format!("Commit Prepared of gid {gid:?} (xid {xid}), whose Prepare this decoder did not see"),
            )),
        }
    }

    /// Rollback Prepared: the transaction prepared under `gid` is rolled back; None when it
    /// was prepared before this stream began (nothing of it was seen).
    pub fn rollback_prepared(&mut self, gid: &str) -> Option<T> {
        self.prepared.remove(gid).map(|w| w.payload)
    }

    /// The lowest prepare LSN of the prepared transactions awaiting their outcome: once a
    /// PREPARE is confirmed, the server does not send it again, so a consumer may not
    /// confirm past it.
    pub fn prepared_floor(&self) -> Option<u64> {
        self.prepared.values().map(|w| w.prepare_lsn.0).min()
    }

    /// [`prepared_floor`](Self::prepared_floor), counting also the two-phase transaction
    /// open between Begin Prepare and Prepare.
    pub fn prepare_floor_with_open(&self) -> Option<u64> {
        let open = self.current.as_ref().and_then(|o| o.prepare_lsn).map(|l| l.0);
        match (self.prepared_floor(), open) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// No transaction open, streaming or awaiting its two-phase outcome (a stream block
    /// whose transaction was aborted inside it holds nothing).
    pub fn is_idle(&self) -> bool {
        self.current.is_none() && self.block_txn.is_none() && self.streams.is_empty() && self.prepared.is_empty()
    }

    /// Transactions begun whose outcome is not known yet (open, streamed, prepared).
    pub fn pending(&self) -> usize {
        self.current.iter().count() + self.block_txn.iter().count() + self.streams.len() + self.prepared.len()
    }

    /// Every transaction whose outcome is not known yet.
    pub fn pending_iter(&self) -> impl Iterator<Item = &T> {
        self.current
            .iter()
            .map(|o| &o.payload)
            .chain(self.block_txn.iter())
            .chain(self.streams.values())
            .chain(self.prepared.values().map(|w| &w.payload))
    }

    pub fn pending_iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.current
            .iter_mut()
            .map(|o| &mut o.payload)
            .chain(self.block_txn.iter_mut())
            .chain(self.streams.values_mut())
            .chain(self.prepared.values_mut().map(|w| &mut w.payload))
    }
}

/// What a message did to the transactions (see [`TxnFraming::frame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framed {
    /// Relation, Type or a non-transactional Message outside any transaction.
    Outside,
    /// A message of the open transaction `xid` (streamed: of the stream block).
    Within { xid: Xid, streamed: bool },
    /// Begin, Begin Prepare, or Stream Start (`streamed`) of `xid`.
    Opened { xid: Xid, streamed: bool },
    /// Stream Stop of a block of `xid`: the transaction stays open.
    BlockEnded { xid: Xid },
    /// Prepare or Stream Prepare: `xid` waits for Commit Prepared or Rollback Prepared.
    Prepared { xid: Xid },
    /// The transaction's outcome is decided.
    Decided { xid: Xid, outcome: Outcome },
    /// Stream Abort of one subtransaction of the streamed `xid`.
    SubtransactionAborted { xid: Xid, subxid: Xid },
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    Aborted,
    PreparedCommitted,
    PreparedRolledBack,
}

impl<T: Default> TxnFraming<T> {
    /// Applies any message with default payloads, for callers that only follow the
    /// boundaries (the walsender reader) or group messages by transaction. The decoder
    /// calls the transition methods itself, as it needs each message's fields.
    pub fn frame(&mut self, message: &Message<'_>) -> Result<Framed, FramingError> {
        let kind = message.kind_name();
        let within = |f: &Self| match (f.block, &f.current) {
            (Some(xid), _) => Ok(Framed::Within { xid, streamed: true }),
            (None, Some(o)) => Ok(Framed::Within { xid: o.xid, streamed: false }),
            (None, None) => Err(error(kind, format!("{kind} outside a transaction"))),
        };
        Ok(match message {
            Message::Begin(b) => {
                self.begin(b.xid, T::default)?;
                Framed::Opened { xid: b.xid, streamed: false }
            }
            Message::BeginPrepare(b) => {
                self.begin_prepare(b.xid, b.prepare_lsn, T::default)?;
                Framed::Opened { xid: b.xid, streamed: false }
            }
            Message::Commit(_) => {
                let xid = self.current.as_ref().map_or(0, |o| o.xid);
                self.commit()?;
                Framed::Decided { xid, outcome: Outcome::Committed }
            }
            Message::Prepare(p) => {
                self.prepare(p.gid, p.prepare_lsn)?;
                Framed::Prepared { xid: p.xid }
            }
            Message::StreamStart(s) => {
                self.stream_start(s.xid, s.first_segment, T::default)?;
                Framed::Opened { xid: s.xid, streamed: true }
            }
            Message::StreamStop => Framed::BlockEnded { xid: self.stream_stop()? },
            Message::StreamCommit(c) => {
                self.stream_commit(c.xid)?;
                Framed::Decided { xid: c.xid, outcome: Outcome::Committed }
            }
            Message::StreamAbort(a) => {
                self.stream_abort(a.xid, a.subxid);
                if a.xid == a.subxid {
                    Framed::Decided { xid: a.xid, outcome: Outcome::Aborted }
                } else {
                    Framed::SubtransactionAborted { xid: a.xid, subxid: a.subxid }
                }
            }
            Message::StreamPrepare(p) => {
                self.stream_prepare(p.xid, p.gid, p.prepare_lsn)?;
                Framed::Prepared { xid: p.xid }
            }
            Message::CommitPrepared(c) => {
                self.commit_prepared(c.gid, c.xid)?;
                Framed::Decided { xid: c.xid, outcome: Outcome::PreparedCommitted }
            }
            Message::RollbackPrepared(r) => {
                self.rollback_prepared(r.gid);
                Framed::Decided { xid: r.xid, outcome: Outcome::PreparedRolledBack }
            }
            Message::Relation(_) | Message::Type(_) => within(self).unwrap_or(Framed::Outside),
            Message::Message(m) if !m.transactional => Framed::Outside,
            Message::Message(_)
            | Message::Insert(_)
            | Message::Update(_)
            | Message::Delete(_)
            | Message::Truncate(_)
            | Message::Origin(_) => within(self)?,
        })
    }
}
