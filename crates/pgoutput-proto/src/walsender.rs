//! The walsender's CopyData frames of the streaming replication protocol
//! (PostgreSQL 18, section 54.4): XLogData 'w' and primary keepalive 'k' from
//! the server, parsed here; the standby status update 'r' from the client, encoded by
//! [`crate::encode::walsender`].

use crate::cursor::Cursor;
use crate::error::ParseError;
use crate::types::{Lsn, PgTimestamp};

/// One CopyData payload sent by the walsender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicationMessage<'a> {
    XLogData(XLogData<'a>),
    PrimaryKeepalive(PrimaryKeepalive),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XLogData<'a> {
    pub wal_start: Lsn,
    pub wal_end: Lsn,
    pub server_clock: PgTimestamp,
    /// One pgoutput message.
    pub data: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryKeepalive {
    pub wal_end: Lsn,
    pub server_clock: PgTimestamp,
    /// The server disconnects after `wal_sender_timeout` unless answered.
    pub reply_requested: bool,
}

/// Decodes the payload of one CopyData message from the walsender.
pub fn parse_copy_data(data: &[u8]) -> Result<ReplicationMessage<'_>, ParseError> {
    let mut c = Cursor::new(data);
    let kind = c.u8("CopyData kind").map_err(|_| ParseError::Empty)?;
    match kind {
        b'w' => {
            let wal_start = Lsn(c.u64("XLogData WAL start")?);
            let wal_end = Lsn(c.u64("XLogData WAL end")?);
            let server_clock = c.i64("XLogData server clock")?;
            let rest = c.remaining();
            let data = c.bytes(rest, "XLogData payload")?;
            Ok(ReplicationMessage::XLogData(XLogData { wal_start, wal_end, server_clock, data }))
        }
        b'k' => {
            let wal_end = Lsn(c.u64("keepalive WAL end")?);
            let server_clock = c.i64("keepalive server clock")?;
            let at = c.offset();
            let reply = c.u8("keepalive reply flag")?;
            if reply > 1 {
                return Err(ParseError::InvalidValue {
                    offset: at,
                    field: "keepalive reply flag",
                    expected: "0 or 1",
                    found: reply.to_string(),
                });
            }
            c.finish()?;
            Ok(ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end,
                server_clock,
                reply_requested: reply == 1,
            }))
        }
        other => Err(ParseError::UnknownKind {
            offset: 0,
            byte: other,
            kind: other as char,
            expected: "'w' (XLogData) or 'k' (primary keepalive)",
        }),
    }
}

/// A standby status update ('r'). Positions are each "last byte + 1"; the
/// server may discard WAL up to `flushed`, so report only what is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandbyStatusUpdate {
    pub written: Lsn,
    pub flushed: Lsn,
    pub applied: Lsn,
    pub client_clock: PgTimestamp,
    pub reply_requested: bool,
}

impl StandbyStatusUpdate {
    pub const ENCODED_LEN: usize = crate::encode::walsender::STANDBY_STATUS_UPDATE_LEN;

    /// Appends the CopyData payload (see [`encode::walsender::standby_status_update`](crate::encode::walsender::standby_status_update)).
    pub fn encode_into(&self, buf: &mut Vec<u8>) {
        crate::encode::walsender::standby_status_update(
            self.written,
            self.flushed,
            self.applied,
            self.client_clock,
            self.reply_requested,
            buf,
        );
    }

    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut buf = Vec::with_capacity(Self::ENCODED_LEN);
        self.encode_into(&mut buf);
        buf.try_into().expect("a standby status update is 34 bytes")
    }
}
