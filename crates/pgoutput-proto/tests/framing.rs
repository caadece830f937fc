//! `TxnFraming`: the transaction each message belongs to, on the golden captures of a real
//! PostgreSQL and on hand-made orders that a server never sends.

mod common;

use pgoutput_proto::{
    parse_message, Begin, BeginPrepare, Commit, CommitPrepared, Framed, Insert, Lsn, Message, Outcome, Prepare,
    RollbackPrepared, StreamAbort, StreamAborted, StreamCommit, StreamStart, TxnFraming,
};

#[test]
fn golden_captures_frame_without_error_and_with_the_servers_xids() {
    for (name, rows) in common::load_captures() {
        let mut framing = TxnFraming::<()>::new();
        for (i, row) in rows.iter().enumerate() {
            let message = parse_message(&row.data, framing.stream_block().is_some())
                .unwrap_or_else(|e| panic!("{name} row {i}: {e}"));
            let framed = framing.frame(&message).unwrap_or_else(|e| panic!("{name} row {i}: {e}"));
            // pg_logical_slot_get_binary_changes gives each message its top-level xid
            // (captures of the walsender have 0 there).
            let xid = match framed {
                Framed::Within { xid, .. } | Framed::Opened { xid, .. } | Framed::BlockEnded { xid } => Some(xid),
                Framed::Prepared { xid } | Framed::Decided { xid, .. } => Some(xid),
                // There the row has the subtransaction's xid.
                Framed::SubtransactionAborted { subxid, .. } => Some(subxid),
                Framed::Outside => None,
            };
            if let Some(xid) = xid.filter(|_| row.xid != 0) {
                assert_eq!(xid, row.xid, "{name} row {i}: {framed:?}");
            }
        }
        assert_eq!(framing.stream_block(), None, "{name}");
        assert!(framing.current().is_none(), "{name}");
    }
}

fn insert() -> Message<'static> {
    // Relation 1, a tuple of no columns.
    let m = parse_message(b"I\x00\x00\x00\x01N\x00\x00", false).unwrap();
    assert!(matches!(m, Message::Insert(Insert { relation_id: 1, .. })));
    m
}

#[test]
fn transactions_interleave_with_stream_blocks() {
    let mut f = TxnFraming::<Vec<&str>>::new();
    f.stream_start(7, true, Vec::new).unwrap().0.push("s1");
    assert_eq!(f.stream_block(), Some(7));
    f.open_mut().unwrap().push("s2");
    assert_eq!(f.stream_stop().unwrap(), 7);
    assert!(f.open_mut().is_none(), "between blocks nothing is open");
    f.begin(8, Vec::new).unwrap().push("t1");
    assert_eq!(f.frame(&insert()).unwrap(), Framed::Within { xid: 8, streamed: false });
    assert_eq!(f.commit().unwrap(), vec!["t1"]);
    // A later block of the same transaction continues it; its Stream Commit may come inside.
    let (txn, restarted) = f.stream_start(7, false, Vec::new).unwrap();
    assert!(restarted.is_none());
    txn.push("s3");
    assert_eq!(f.pending(), 1);
    assert_eq!(f.stream_commit(7).unwrap(), vec!["s1", "s2", "s3"]);
    assert_eq!(f.stream_block(), None);
    assert!(f.is_idle());
}

#[test]
fn a_first_segment_again_restarts_the_stream() {
    let mut f = TxnFraming::<Vec<u8>>::new();
    f.stream_start(7, true, Vec::new).unwrap().0.push(1);
    f.stream_stop().unwrap();
    let (txn, restarted) = f.stream_start(7, true, Vec::new).unwrap();
    assert!(txn.is_empty());
    assert_eq!(restarted, Some(vec![1]));
}

#[test]
fn misplaced_messages_are_errors_that_change_nothing() {
    let mut f = TxnFraming::<()>::new();
    assert_eq!(f.commit().unwrap_err().to_string(), "Commit without a Begin before it");
    assert_eq!(f.stream_stop().unwrap_err().to_string(), "Stream Stop outside a stream block");
    assert_eq!(
        f.stream_commit(77).unwrap_err().to_string(),
        "Stream Commit for transaction 77, which no Stream Start opened"
    );
    assert_eq!(f.frame(&insert()).unwrap_err().to_string(), "Insert outside a transaction");
    f.begin(5, || ()).unwrap();
    let e = f.begin(6, || ()).unwrap_err();
    assert_eq!((e.kind, e.message.as_str()), ("Begin", "Begin while transaction 5 is open"));
    assert_eq!(f.stream_start(9, true, || ()).unwrap_err().to_string(), "Stream Start while transaction 5 is open");
    assert_eq!(f.prepare("g", Lsn(1)).unwrap_err().to_string(), "Prepare without a Begin Prepare before it");
    // Still the transaction of the first Begin.
    assert_eq!(f.frame(&insert()).unwrap(), Framed::Within { xid: 5, streamed: false });
    f.commit().unwrap();
    f.stream_start(9, true, || ()).unwrap();
    assert_eq!(
        f.begin(10, || ()).unwrap_err().to_string(),
        "Begin while the stream block of transaction 9 is open"
    );
}

#[test]
fn two_phase_transactions_wait_for_their_outcome_by_gid() {
    let mut f = TxnFraming::<u32>::new();
    f.begin_prepare(3, Lsn(0x300), || 0).unwrap();
    assert_eq!(f.prepare_floor_with_open(), Some(0x300));
    assert_eq!(f.prepared_floor(), None, "not prepared yet");
    let (_, replaced) = f.prepare("g1", Lsn(0x300)).unwrap();
    assert!(replaced.is_none());
    f.stream_start(4, true, || 40).unwrap();
    f.stream_stop().unwrap();
    f.stream_prepare(4, "g2", Lsn(0x200)).unwrap();
    assert_eq!(f.prepared_floor(), Some(0x200));
    assert_eq!(f.pending(), 2);
    assert_eq!(
        f.commit_prepared("nope", 9).unwrap_err().to_string(),
        "Commit Prepared of gid \"nope\" (xid 9), whose Prepare this decoder did not see"
    );
    assert_eq!(f.commit_prepared("g2", 4).unwrap(), 40);
    assert_eq!(f.rollback_prepared("g1"), Some(0));
    assert_eq!(f.rollback_prepared("g1"), None, "prepared before the stream began");
    assert!(f.is_idle());
}

#[test]
fn stream_aborts_of_the_whole_transaction_or_one_subtransaction() {
    let mut f = TxnFraming::<u32>::new();
    f.stream_start(7, true, || 1).unwrap();
    f.stream_stop().unwrap();
    match f.stream_abort(7, 8) {
        StreamAborted::Subtransaction(Some(t)) => *t += 1,
        other => panic!("{other:?}"),
    }
    assert!(matches!(f.stream_abort(7, 7), StreamAborted::Transaction(Some(2))));
    assert!(matches!(f.stream_abort(7, 7), StreamAborted::Transaction(None)), "never streamed");
    // Aborted inside its own block: the block goes on to its Stop with nothing open.
    f.stream_start(9, true, || 1).unwrap();
    assert!(matches!(f.stream_abort(9, 9), StreamAborted::Transaction(Some(1))));
    assert!(f.open_mut().is_none());
    assert!(f.is_idle(), "nothing is pending in the rest of the block");
    assert_eq!(f.stream_stop().unwrap(), 9);
    assert!(f.is_idle());
}

#[test]
fn frame_names_each_outcome() {
    let mut f = TxnFraming::<()>::new();
    let seq: Vec<Message<'static>> = vec![
        Message::Begin(Begin { final_lsn: Lsn(1), commit_ts: 0, xid: 1 }),
        Message::Commit(Commit { flags: 0, commit_lsn: Lsn(1), end_lsn: Lsn(2), commit_ts: 0 }),
        Message::BeginPrepare(BeginPrepare { prepare_lsn: Lsn(3), end_lsn: Lsn(4), prepare_ts: 0, xid: 2, gid: "g" }),
        Message::Prepare(Prepare { flags: 0, prepare_lsn: Lsn(3), end_lsn: Lsn(4), prepare_ts: 0, xid: 2, gid: "g" }),
        Message::RollbackPrepared(RollbackPrepared {
            flags: 0,
            prepare_end_lsn: Lsn(4),
            rollback_end_lsn: Lsn(5),
            prepare_ts: 0,
            rollback_ts: 0,
            xid: 2,
            gid: "g",
        }),
        Message::StreamStart(StreamStart { xid: 3, first_segment: true }),
        Message::StreamStop,
        Message::StreamAbort(StreamAbort { xid: 3, subxid: 4, abort_lsn: None, abort_ts: None }),
        Message::StreamCommit(StreamCommit { xid: 3, flags: 0, commit_lsn: Lsn(6), end_lsn: Lsn(7), commit_ts: 0 }),
        Message::CommitPrepared(CommitPrepared {
            flags: 0,
            commit_lsn: Lsn(8),
            end_lsn: Lsn(9),
            commit_ts: 0,
            xid: 5,
            gid: "unseen",
        }),
    ];
    let framed: Vec<_> = seq.iter().map(|m| f.frame(m)).collect();
    assert_eq!(framed[0], Ok(Framed::Opened { xid: 1, streamed: false }));
    assert_eq!(framed[1], Ok(Framed::Decided { xid: 1, outcome: Outcome::Committed }));
    assert_eq!(framed[3], Ok(Framed::Prepared { xid: 2 }));
    assert_eq!(framed[4], Ok(Framed::Decided { xid: 2, outcome: Outcome::PreparedRolledBack }));
    assert_eq!(framed[5], Ok(Framed::Opened { xid: 3, streamed: true }));
    assert_eq!(framed[6], Ok(Framed::BlockEnded { xid: 3 }));
    assert_eq!(framed[7], Ok(Framed::SubtransactionAborted { xid: 3, subxid: 4 }));
    assert_eq!(framed[8], Ok(Framed::Decided { xid: 3, outcome: Outcome::Committed }));
    assert!(framed[9].is_err(), "a Commit Prepared whose Prepare was not seen");
}
