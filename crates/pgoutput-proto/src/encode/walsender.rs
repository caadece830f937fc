//! What a client of the walsender writes inside its CopyBoth stream (PostgreSQL 18,
//! section 54.4, "Streaming Replication Protocol"): the standby status update 'r', the only
//! CopyData a logical replication client sends.

use crate::types::{Lsn, PgTimestamp};

/// Appends a standby status update ('r', 34 bytes): `written`, `flushed` and `applied` are
/// each "last byte + 1" of the WAL so handled; the server may discard WAL up to `flushed`
/// (the slot's `confirmed_flush_lsn`), so it must be only what is durable. `client_clock`
/// is microseconds since 2000-01-01 UTC; `reply_requested` asks the server to answer at once.
pub fn standby_status_update(
    written: Lsn,
    flushed: Lsn,
    applied: Lsn,
    client_clock: PgTimestamp,
    reply_requested: bool,
    buf: &mut Vec<u8>,
) {
    buf.reserve(STANDBY_STATUS_UPDATE_LEN);
    buf.push(b'r');
    buf.extend_from_slice(&written.0.to_be_bytes());
    buf.extend_from_slice(&flushed.0.to_be_bytes());
    buf.extend_from_slice(&applied.0.to_be_bytes());
    buf.extend_from_slice(&client_clock.to_be_bytes());
    buf.push(reply_requested as u8);
}

/// The length of a standby status update.
pub const STANDBY_STATUS_UPDATE_LEN: usize = 34;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standby_status_update_layout() {
        let mut buf = vec![0xAA];
        standby_status_update(Lsn(0x1_0000_0010), Lsn(0x20), Lsn(0x30), -1, true, &mut buf);
        assert_eq!(buf.len(), 1 + STANDBY_STATUS_UPDATE_LEN);
        assert_eq!(&buf[1..2], b"r");
        assert_eq!(&buf[2..10], &0x1_0000_0010u64.to_be_bytes());
        assert_eq!(&buf[10..18], &0x20u64.to_be_bytes());
        assert_eq!(&buf[18..26], &0x30u64.to_be_bytes());
        assert_eq!(&buf[26..34], &[0xFF; 8]);
        assert_eq!(buf[34], 1);
    }
}
