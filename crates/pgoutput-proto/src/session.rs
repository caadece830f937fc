//! Where a replication session stands: what arrived from the server, what was handed out to
//! the consumer, what the consumer acknowledged, what was confirmed to the server, and where
//! a new connection resumes ([`SessionPositions`]). With [`crate::TxnFraming`] (which knows
//! the open transactions and the unresolved prepared ones) it is the whole state of a
//! session that outlives its connections; the connection itself is the caller's.
//!
//! The rules, each in one place:
//! - a position is handed out once every change committed at or below it was: the decoder's
//!   safe position, held back to the lowest unresolved PREPARE (the server would not send a
//!   prepared transaction's changes again once confirmed past it);
//! - an acknowledgement moves forward only, and never beyond what was handed out;
//! - the server is told what was acknowledged, held back to that PREPARE too, and never less
//!   than it was told before;
//! - a connection resumes after everything handed out (the server starts at the next
//!   transaction), but not past that PREPARE; transactions committed below the highest
//!   position handed out before a reconnection are dropped if sent again (the floor);
//! - a session with nothing in flight, nothing waiting and everything acknowledged follows
//!   the server's WAL end, so that an idle publication does not hold WAL.

/// The settings every session that reads pgoutput's text carries (as startup parameters), so
/// that PostgreSQL's output functions print each value the way the decoder reads it exactly.
/// A walsender, and a session calling `pg_logical_slot_*_changes`, print text-mode values
/// under their own settings, which come from postgresql.conf, `ALTER DATABASE/ROLE ... SET`,
/// the client's environment (PGOPTIONS, PGCLIENTENCODING) and its DSN; PostgreSQL's own
/// subscriber pins the date, interval and float ones on its replication connection
/// (libpqwalreceiver.c) for the same reason.
///
/// - `DateStyle`, `IntervalStyle`: date, timestamp, timestamptz, interval and their arrays
///   and ranges in the one form the renderers print;
/// - `extra_float_digits` 3: float4/float8 (and the geometric types) printed exactly; 0 or
///   less rounds them, and a rounded value cannot be told from an exact one;
/// - `TimeZone` UTC: timestamptz keeps its instant under any zone, but tstzrange and
///   tstzmultirange stay text, printed with the zone's offsets;
/// - `bytea_output` hex, `lc_monetary` C (money's symbol and separators),
///   `quote_all_identifiers` off (the text of regclass and the other reg* types);
/// - `client_encoding` UTF8: text is sent in the client's encoding, converted from the
///   database's (LATIN1, WIN1252, EUC_JP, ...), and Arrow's strings are UTF-8. A database in
///   SQL_ASCII is not converted but checked: text stored there in another encoding is refused
///   by the server.
pub const OUTPUT_SETTINGS: &[(&str, &str)] = &[
    ("datestyle", "ISO"),
    ("intervalstyle", "postgres"),
    ("extra_float_digits", "3"),
    ("timezone", "UTC"),
    ("bytea_output", "hex"),
    ("lc_monetary", "C"),
    ("quote_all_identifiers", "off"),
    ("client_encoding", "UTF8"),
];

/// The positions of one replication session (LSNs as `u64`). See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPositions {
    start: u64,
    floor: u64,
    received: u64,
    wal_end: u64,
    emitted: u64,
    acked: u64,
    yielded: u64,
    /// The highest position handed out with changes for the consumer.
    owed: u64,
    confirmed: u64,
    dirty: bool,
}

/// An acknowledgement beyond what was handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckBeyond {
    /// The position asked to be acknowledged.
    pub lsn: u64,
    /// The highest position that may be.
    pub handed_out: u64,
}

impl std::fmt::Display for AckBeyond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot acknowledge {}: only up to {} has been handed out",
               crate::Lsn(self.lsn), crate::Lsn(self.handed_out))
    }
}

impl std::error::Error for AckBeyond {}

fn held_back(lsn: u64, prepared_floor: Option<u64>) -> u64 {
    prepared_floor.map_or(lsn, |floor| lsn.min(floor))
}

impl SessionPositions {
    /// A session that starts at `start`: everything before it counts as handled and
    /// acknowledged (for the CLI it is the checkpoint of its output).
    pub fn new(start: u64) -> Self {
        SessionPositions { start, floor: start, received: 0, wal_end: 0, emitted: start,
                           acked: start, yielded: start, owed: start, confirmed: 0,
                           dirty: false }
    }

    /// The server confirmed this position already (the slot's `confirmed_flush_lsn`).
    pub fn server_confirmed(&mut self, lsn: u64) {
        self.confirmed = self.confirmed.max(lsn);
    }

    /// The server's WAL end as a frame or keepalive reported it (also what was received).
    pub fn server_end(&mut self, end: u64) {
        self.wal_end = self.wal_end.max(end);
        self.received = self.received.max(end);
    }

    /// Where a new connection asks the server to start.
    pub fn resume_lsn(&self, prepared_floor: Option<u64>) -> u64 {
        held_back(self.emitted.max(self.acked).max(self.start), prepared_floor)
    }

    /// A reconnection: what was handed out is dropped if the server sends it again.
    pub fn reconnecting(&mut self) {
        self.floor = self.floor.max(self.emitted);
    }

    /// A decoder flush whose changes are complete up to `safe`: returns `(previous,
    /// group_ack)`, the position handed out before it and the one it hands out. A flush with
    /// nothing for the consumer (`empty`) is acknowledged as soon as everything handed out
    /// with changes is (at once, or with that acknowledgement).
    pub fn handed_out(&mut self, safe: u64, prepared_floor: Option<u64>, empty: bool) -> (u64, u64) {
        let previous = self.emitted;
        let group_ack = held_back(safe, prepared_floor).max(previous);
        self.emitted = group_ack;
        if empty {
            self.settle();
        } else {
            self.owed = group_ack;
        }
        (previous, group_ack)
    }

    /// Everything handed out with changes is acknowledged: so is what was handed out
    /// without.
    fn settle(&mut self) {
        if self.acked >= self.owed && self.yielded <= self.acked && self.emitted > self.acked {
            self.acked = self.emitted;
            self.yielded = self.acked;
            self.dirty = true;
        }
    }

    /// The initial snapshot was read: its consistent point `lsn` is handed out (and
    /// acknowledged at once when `empty`, nothing of it reached the consumer, and
    /// everything before is), and the stream starts there.
    pub fn snapshot_done(&mut self, lsn: u64, empty: bool) {
        if empty && self.acked >= self.emitted && self.yielded <= self.acked {
            self.acked = self.acked.max(lsn);
            self.yielded = self.acked;
        } else if !empty {
            self.owed = self.owed.max(lsn);
        }
        self.emitted = self.emitted.max(lsn);
        self.start = self.start.max(lsn);
        self.floor = self.floor.max(lsn);
    }

    /// The consumer was given an item handled once `ack_lsn` is acknowledged.
    pub fn yielded(&mut self, ack_lsn: u64) {
        self.yielded = ack_lsn;
    }

    /// The consumer acknowledges `lsn` (None: the last item given to it).
    pub fn ack(&mut self, lsn: Option<u64>) -> Result<(), AckBeyond> {
        let value = lsn.unwrap_or(self.yielded);
        let handed_out = self.emitted.max(self.acked);
        if value > handed_out {
            return Err(AckBeyond { lsn: value, handed_out });
        }
        if value > self.acked {
            self.acked = value;
            self.dirty = true;
            self.settle();
        }
        Ok(())
    }

    /// Nothing in flight or waiting (`idle`) and everything handed out acknowledged: the
    /// server's WAL end is handed out and acknowledged.
    pub fn idle_advance(&mut self, idle: bool) {
        if idle && self.acked >= self.emitted && self.yielded <= self.acked && self.wal_end > self.acked {
            self.acked = self.wal_end;
            self.emitted = self.emitted.max(self.wal_end);
            self.yielded = self.acked;
            self.dirty = true;
        }
    }

    /// The standby status update to send now: `(written, flushed)` (the applied position is
    /// the flushed one). Records it as confirmed.
    pub fn status(&mut self, prepared_floor: Option<u64>) -> (u64, u64) {
        let flush = held_back(self.acked, prepared_floor).max(self.confirmed);
        self.confirmed = flush;
        self.dirty = false;
        (self.received.max(flush), flush)
    }

    /// Transactions committing below this were handled already.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Everything at or below this was handed out.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// What the consumer acknowledged (and idle positions).
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// The acknowledgement position of the last item given to the consumer.
    pub fn last_yielded(&self) -> u64 {
        self.yielded
    }

    /// The flushed position last confirmed to the server.
    pub fn confirmed(&self) -> u64 {
        self.confirmed
    }

    /// The highest WAL position received.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The server's WAL end as last reported.
    pub fn wal_end(&self) -> u64 {
        self.wal_end
    }

    /// An acknowledgement not yet told to the server.
    pub fn dirty(&self) -> bool {
        self.dirty
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_move_forward_only_and_never_past_what_was_handed_out() {
        let mut p = SessionPositions::new(100);
        assert_eq!(p.handed_out(200, None, false), (100, 200));
        assert!(p.ack(Some(150)).is_ok());
        assert!(p.dirty());
        assert!(p.ack(Some(120)).is_ok());
        assert_eq!(p.acked(), 150);
        let err = p.ack(Some(201)).unwrap_err();
        assert_eq!(err, AckBeyond { lsn: 201, handed_out: 200 });
        assert_eq!(err.to_string(), "cannot acknowledge 0/C9: only up to 0/C8 has been handed out");
        p.yielded(200);
        assert!(p.ack(None).is_ok());
        assert_eq!(p.acked(), 200);
    }

    #[test]
    fn an_unresolved_prepare_holds_back_what_is_handed_out_confirmed_and_resumed() {
        let mut p = SessionPositions::new(0);
        assert_eq!(p.handed_out(500, Some(300), false), (0, 300));
        p.yielded(300);
        p.ack(None).unwrap();
        p.server_end(600);
        assert_eq!(p.status(Some(250)), (600, 250));
        assert_eq!(p.resume_lsn(Some(250)), 250);
        assert_eq!(p.resume_lsn(None), 300);
        // Never less than what the server was told.
        assert_eq!(p.status(Some(200)), (600, 250));
        assert_eq!(p.status(None), (600, 300));
        assert!(!p.dirty());
    }

    #[test]
    fn an_empty_flush_is_acknowledged_only_when_everything_before_it_is() {
        let mut p = SessionPositions::new(10);
        assert_eq!(p.handed_out(15, None, true), (10, 15));
        assert_eq!((p.acked(), p.last_yielded()), (15, 15));
        p.handed_out(20, None, false);
        p.yielded(20);
        assert_eq!(p.handed_out(30, None, true), (20, 30));
        assert_eq!(p.acked(), 15, "the batch at 20 is not acknowledged yet");
        p.ack(None).unwrap();
        assert_eq!(p.acked(), 30, "acknowledging the batch acknowledges the empty flush after it");
        p.handed_out(40, None, true);
        assert_eq!((p.acked(), p.last_yielded()), (40, 40));
    }

    #[test]
    fn idle_follows_the_wal_end_and_a_reconnection_raises_the_floor() {
        let mut p = SessionPositions::new(5);
        p.server_end(90);
        p.idle_advance(false);
        assert_eq!(p.acked(), 5);
        p.idle_advance(true);
        assert_eq!((p.acked(), p.emitted()), (90, 90));
        assert_eq!(p.floor(), 5);
        p.reconnecting();
        assert_eq!(p.floor(), 90);
        assert_eq!(p.resume_lsn(None), 90);
    }

    #[test]
    fn a_snapshot_hands_out_its_consistent_point() {
        let mut p = SessionPositions::new(0);
        p.snapshot_done(70, true);
        assert_eq!((p.acked(), p.emitted(), p.floor(), p.resume_lsn(None)), (70, 70, 70, 70));
        let mut q = SessionPositions::new(0);
        q.yielded(0);
        q.handed_out(0, None, false);
        q.yielded(5);
        q.snapshot_done(70, true);
        assert_eq!((q.acked(), q.emitted()), (0, 70), "a snapshot row is not acknowledged yet");
    }
}
