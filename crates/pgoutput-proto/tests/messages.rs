//! Every pgoutput message kind decoded from hand-built bytes, written from the
//! PostgreSQL 18 documentation (section 54.9, "Logical Replication Message
//! Formats") and PostgreSQL's proto.c, with every field checked.

mod common;

use common::{Msg, TestCell};
use pgoutput_proto::*;

fn parse(bytes: &[u8]) -> Message<'_> {
    parse_message(bytes, false).unwrap_or_else(|e| panic!("{e} in {bytes:?}"))
}

fn parse_in_stream(bytes: &[u8]) -> Message<'_> {
    parse_message(bytes, true).unwrap_or_else(|e| panic!("{e} in {bytes:?}"))
}

fn cells<'a>(t: &TupleData<'a>) -> Vec<Cell<'a>> {
    t.cells().collect()
}

#[test]
fn begin() {
    let b = Msg::kind(b'B').u64(0x16_B374_D848).i64(-1).u32(4_000_000_000).build();
    assert_eq!(
        parse(&b),
        Message::Begin(Begin { final_lsn: Lsn(0x16_B374_D848), commit_ts: -1, xid: 4_000_000_000 })
    );
    assert_eq!(parse(&b).kind_name(), "Begin");
    // Begin has no optional xid: the same bytes parse the same inside a stream.
    assert_eq!(parse_in_stream(&b), parse(&b));
}

#[test]
fn commit() {
    let b = Msg::kind(b'C').u8(0).u64(0x100).u64(0x1_0000_0000).i64(797_000_000_123_456).build();
    assert_eq!(
        parse(&b),
        Message::Commit(Commit { flags: 0, commit_lsn: Lsn(0x100), end_lsn: Lsn(0x1_0000_0000), commit_ts: 797_000_000_123_456 })
    );
}

#[test]
fn origin() {
    let b = Msg::kind(b'O').u64(0xDEAD_BEEF).cstr("node_ü").build();
    assert_eq!(parse(&b), Message::Origin(Origin { commit_lsn: Lsn(0xDEAD_BEEF), name: "node_ü" }));
    // The name borrows from the input.
    let Message::Origin(o) = parse(&b) else { unreachable!() };
    assert!(b.as_ptr_range().contains(&o.name.as_ptr()));
}

#[test]
fn logical_message_transactional_and_not() {
    let b = Msg::kind(b'M').u8(1).u64(0x55).cstr("pfx").i32(3).raw(&[0, 0xFF, 1]).build();
    assert_eq!(
        parse(&b),
        Message::Message(LogicalMessage { xid: None, transactional: true, lsn: Lsn(0x55), prefix: "pfx", content: &[0, 0xFF, 1] })
    );
    let b = Msg::kind(b'M').u8(0).u64(0x56).cstr("").i32(0).build();
    assert_eq!(
        parse(&b),
        Message::Message(LogicalMessage { xid: None, transactional: false, lsn: Lsn(0x56), prefix: "", content: &[] })
    );
    let b = Msg::kind(b'M').u32(991).u8(1).u64(0x57).cstr("s").i32(1).raw(b"x").build();
    assert_eq!(
        parse_in_stream(&b),
        Message::Message(LogicalMessage { xid: Some(991), transactional: true, lsn: Lsn(0x57), prefix: "s", content: b"x" })
    );
}

#[test]
fn logical_message_flags_other_than_0_or_1_are_rejected() {
    let b = Msg::kind(b'M').u8(2).u64(0x56).cstr("").i32(0).build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { offset: 1, field: "message flags", .. }), "{err:?}");
}

#[test]
fn relation_with_every_replica_identity() {
    for (byte, identity) in [
        (b'd', ReplicaIdentity::Default),
        (b'n', ReplicaIdentity::Nothing),
        (b'f', ReplicaIdentity::Full),
        (b'i', ReplicaIdentity::Index),
    ] {
        let b = Msg::kind(b'R')
            .u32(16385)
            .cstr("")
            .cstr("Tbl")
            .u8(byte)
            .i16(3)
            .u8(1)
            .cstr("id")
            .u32(20)
            .i32(-1)
            .u8(0)
            .cstr("name")
            .u32(1043)
            .i32(68)
            .u8(1)
            .cstr("k2")
            .u32(1700)
            .i32(655_366)
            .build();
        let Message::Relation(r) = parse(&b) else { panic!() };
        assert_eq!(r.xid, None);
        assert_eq!(r.id, 16385);
        assert_eq!(r.namespace, "", "pg_catalog is sent as an empty namespace");
        assert_eq!(r.name, "Tbl");
        assert_eq!(r.replica_identity, identity);
        assert_eq!(identity.as_char(), byte as char);
        assert_eq!(
            r.columns,
            vec![
                Column { is_key: true, name: "id", type_oid: 20, type_modifier: -1 },
                Column { is_key: false, name: "name", type_oid: 1043, type_modifier: 68 },
                Column { is_key: true, name: "k2", type_oid: 1700, type_modifier: 655_366 },
            ]
        );
    }
    assert_eq!(ReplicaIdentity::Full.name(), "full");
}

#[test]
fn relation_without_columns() {
    let b = Msg::kind(b'R').u32(1).cstr("s").cstr("t").u8(b'n').i16(0).build();
    let Message::Relation(r) = parse(&b) else { panic!() };
    assert!(r.columns.is_empty());
    assert_eq!(r.replica_identity, ReplicaIdentity::Nothing);
}

#[test]
fn relation_bad_identity_reports_its_offset() {
    let b = Msg::kind(b'R').u32(1).cstr("s").cstr("t").u8(b'x').i16(0).build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { field: "replica identity", .. }), "{err:?}");
    assert_eq!(err.offset(), 9);
}

#[test]
fn type_message() {
    let b = Msg::kind(b'Y').u32(16_999).cstr("public").cstr("mood").build();
    assert_eq!(parse(&b), Message::Type(TypeInfo { xid: None, oid: 16_999, namespace: "public", name: "mood" }));
    let b = Msg::kind(b'Y').u32(5).u32(16_999).cstr("public").cstr("mood").build();
    assert_eq!(parse_in_stream(&b), Message::Type(TypeInfo { xid: Some(5), oid: 16_999, namespace: "public", name: "mood" }));
}

#[test]
fn insert_with_every_cell_kind() {
    let b = Msg::kind(b'I')
        .u32(16384)
        .u8(b'N')
        .tuple(&[
            TestCell::Text(b"1"),
            TestCell::Null,
            TestCell::Toast,
            TestCell::Binary(&[0, 0, 0, 42]),
            TestCell::Text(b""),
            TestCell::Binary(&[]),
        ])
        .build();
    let Message::Insert(i) = parse(&b) else { panic!() };
    assert_eq!(i.xid, None);
    assert_eq!(i.relation_id, 16384);
    assert_eq!(i.new.len(), 6);
    assert!(!i.new.is_empty());
    assert_eq!(
        cells(&i.new),
        vec![Cell::Text(b"1"), Cell::Null, Cell::UnchangedToast, Cell::Binary(&[0, 0, 0, 42]), Cell::Text(b""), Cell::Binary(b"")]
    );
    assert_eq!(i.new.cells().len(), 6, "ExactSizeIterator");
    assert_eq!(format!("{:?}", i.new), format!("{:?}", cells(&i.new)));
}

#[test]
fn insert_with_zero_columns() {
    let b = Msg::kind(b'I').u32(1).u8(b'N').i16(0).build();
    let Message::Insert(i) = parse(&b) else { panic!() };
    assert!(i.new.is_empty());
    assert_eq!(i.new.cells().next(), None);
}

#[test]
fn insert_without_n_marker_is_rejected() {
    let b = Msg::kind(b'I').u32(1).u8(b'K').i16(0).build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { offset: 5, .. }), "{err:?}");
}

#[test]
fn update_without_old_tuple() {
    let b = Msg::kind(b'U').u32(7).u8(b'N').tuple(&[TestCell::Text(b"a"), TestCell::Toast]).build();
    let Message::Update(u) = parse(&b) else { panic!() };
    assert_eq!((u.xid, u.relation_id, u.old), (None, 7, None));
    assert_eq!(cells(&u.new), vec![Cell::Text(b"a"), Cell::UnchangedToast]);
}

#[test]
fn update_with_old_key() {
    let b = Msg::kind(b'U')
        .u32(7)
        .u8(b'K')
        .tuple(&[TestCell::Text(b"old"), TestCell::Null])
        .u8(b'N')
        .tuple(&[TestCell::Text(b"new"), TestCell::Text(b"v")])
        .build();
    let Message::Update(u) = parse(&b) else { panic!() };
    let Some(OldTuple::Key(old)) = u.old else { panic!("{:?}", u.old) };
    assert_eq!(cells(&old), vec![Cell::Text(b"old"), Cell::Null]);
    assert_eq!(cells(u.old.as_ref().unwrap().tuple()), cells(&old));
    assert_eq!(cells(&u.new), vec![Cell::Text(b"new"), Cell::Text(b"v")]);
}

#[test]
fn update_with_old_row() {
    let b = Msg::kind(b'U')
        .u32(7)
        .u8(b'O')
        .tuple(&[TestCell::Text(b"old"), TestCell::Binary(b"\x01")])
        .u8(b'N')
        .tuple(&[TestCell::Text(b"new"), TestCell::Toast])
        .build();
    let Message::Update(u) = parse(&b) else { panic!() };
    let Some(OldTuple::Full(old)) = u.old else { panic!("{:?}", u.old) };
    assert_eq!(cells(&old), vec![Cell::Text(b"old"), Cell::Binary(b"\x01")]);
    assert_eq!(cells(&u.new), vec![Cell::Text(b"new"), Cell::UnchangedToast]);
}

#[test]
fn update_old_tuple_must_be_followed_by_new() {
    // 'K' tuple then 'O' instead of 'N'.
    let b = Msg::kind(b'U').u32(7).u8(b'K').tuple(&[TestCell::Null]).u8(b'O').tuple(&[TestCell::Null]).build();
    assert!(matches!(parse_message(&b, false), Err(ParseError::InvalidValue { offset: 9, .. })));
    // A bad marker where 'K', 'O' or 'N' belongs.
    let b = Msg::kind(b'U').u32(7).u8(b'X').tuple(&[TestCell::Null]).build();
    assert!(matches!(parse_message(&b, false), Err(ParseError::InvalidValue { offset: 5, field: "update tuple marker", .. })));
}

#[test]
fn delete_with_key_and_with_row() {
    let b = Msg::kind(b'D').u32(9).u8(b'K').tuple(&[TestCell::Text(b"1"), TestCell::Null]).build();
    let Message::Delete(d) = parse(&b) else { panic!() };
    assert_eq!((d.xid, d.relation_id), (None, 9));
    assert!(matches!(d.old, OldTuple::Key(_)));
    assert_eq!(cells(d.old.tuple()), vec![Cell::Text(b"1"), Cell::Null]);

    let b = Msg::kind(b'D').u32(9).u8(b'O').tuple(&[TestCell::Text(b"1"), TestCell::Text(b"x")]).build();
    let Message::Delete(d) = parse(&b) else { panic!() };
    assert!(matches!(d.old, OldTuple::Full(_)));
    assert_eq!(cells(d.old.tuple()), vec![Cell::Text(b"1"), Cell::Text(b"x")]);

    // Delete always carries an old tuple: 'N' is not allowed.
    let b = Msg::kind(b'D').u32(9).u8(b'N').tuple(&[TestCell::Null]).build();
    assert!(matches!(parse_message(&b, false), Err(ParseError::InvalidValue { offset: 5, field: "delete tuple marker", .. })));
}

#[test]
fn truncate_with_each_option() {
    for (options, cascade, restart_identity) in [(0, false, false), (1, true, false), (2, false, true), (3, true, true)] {
        let b = Msg::kind(b'T').i32(3).u8(options).u32(10).u32(11).u32(12).build();
        assert_eq!(
            parse(&b),
            Message::Truncate(Truncate { xid: None, cascade, restart_identity, relation_ids: vec![10, 11, 12] })
        );
    }
    let b = Msg::kind(b'T').u32(44).i32(1).u8(0).u32(10).build();
    assert_eq!(
        parse_in_stream(&b),
        Message::Truncate(Truncate { xid: Some(44), cascade: false, restart_identity: false, relation_ids: vec![10] })
    );
    let b = Msg::kind(b'T').i32(1).u8(4).u32(10).build();
    assert!(matches!(parse_message(&b, false), Err(ParseError::InvalidValue { offset: 5, field: "truncate options", .. })));
}

#[test]
fn stream_start_stop_commit() {
    let b = Msg::kind(b'S').u32(1234).u8(1).build();
    assert_eq!(parse(&b), Message::StreamStart(StreamStart { xid: 1234, first_segment: true }));
    let b = Msg::kind(b'S').u32(1234).u8(0).build();
    assert_eq!(parse(&b), Message::StreamStart(StreamStart { xid: 1234, first_segment: false }));
    let b = Msg::kind(b'S').u32(1234).u8(2).build();
    assert!(matches!(parse_message(&b, false), Err(ParseError::InvalidValue { offset: 5, .. })));

    assert_eq!(parse_in_stream(b"E"), Message::StreamStop);
    assert_eq!(parse(b"E").kind_name(), "Stream Stop");

    let b = Msg::kind(b'c').u32(1234).u8(0).u64(0x2000).u64(0x2040).i64(799_999_999_999_999).build();
    assert_eq!(
        parse(&b),
        Message::StreamCommit(StreamCommit {
            xid: 1234,
            flags: 0,
            commit_lsn: Lsn(0x2000),
            end_lsn: Lsn(0x2040),
            commit_ts: 799_999_999_999_999
        })
    );
}

#[test]
fn stream_abort_short_and_with_abort_lsn_and_timestamp() {
    // Protocols 2 and 3, and 4 without streaming 'parallel': ends after the subxid.
    let b = Msg::kind(b'A').u32(1234).u32(1240).build();
    assert_eq!(
        parse(&b),
        Message::StreamAbort(StreamAbort { xid: 1234, subxid: 1240, abort_lsn: None, abort_ts: None })
    );
    // Protocol 4 with streaming 'parallel'.
    let b = Msg::kind(b'A').u32(1234).u32(1234).u64(0x3_0000_0010).i64(800_000_000_000_000).build();
    assert_eq!(
        parse(&b),
        Message::StreamAbort(StreamAbort {
            xid: 1234,
            subxid: 1234,
            abort_lsn: Some(Lsn(0x3_0000_0010)),
            abort_ts: Some(800_000_000_000_000)
        })
    );
    // Anything between the two forms is truncated, not silently accepted.
    for cut in 10..b.len() {
        let err = parse_message(&b[..cut], false).unwrap_err();
        assert!(matches!(err, ParseError::Truncated { .. }), "cut {cut}: {err:?}");
    }
    // ... and more than the long form is trailing bytes.
    let mut long = b.clone();
    long.push(0);
    assert_eq!(parse_message(&long, false), Err(ParseError::TrailingBytes { offset: 25, count: 1 }));
}

#[test]
fn two_phase_messages() {
    let b = Msg::kind(b'b').u64(0x10).u64(0x20).i64(5).u32(600).cstr("tx-ü").build();
    assert_eq!(
        parse(&b),
        Message::BeginPrepare(BeginPrepare { prepare_lsn: Lsn(0x10), end_lsn: Lsn(0x20), prepare_ts: 5, xid: 600, gid: "tx-ü" })
    );
    let prepare = Prepare { flags: 0, prepare_lsn: Lsn(0x10), end_lsn: Lsn(0x20), prepare_ts: 5, xid: 600, gid: "g" };
    let b = Msg::kind(b'P').u8(0).u64(0x10).u64(0x20).i64(5).u32(600).cstr("g").build();
    assert_eq!(parse(&b), Message::Prepare(prepare.clone()));
    let mut sb = b.clone();
    sb[0] = b'p';
    assert_eq!(parse(&sb), Message::StreamPrepare(prepare));
    assert_eq!(parse(&sb).kind_name(), "Stream Prepare");

    let b = Msg::kind(b'K').u8(0).u64(0x30).u64(0x40).i64(6).u32(600).cstr("g").build();
    assert_eq!(
        parse(&b),
        Message::CommitPrepared(CommitPrepared { flags: 0, commit_lsn: Lsn(0x30), end_lsn: Lsn(0x40), commit_ts: 6, xid: 600, gid: "g" })
    );
    let b = Msg::kind(b'r').u8(0).u64(0x20).u64(0x50).i64(5).i64(7).u32(600).cstr("g").build();
    assert_eq!(
        parse(&b),
        Message::RollbackPrepared(RollbackPrepared {
            flags: 0,
            prepare_end_lsn: Lsn(0x20),
            rollback_end_lsn: Lsn(0x50),
            prepare_ts: 5,
            rollback_ts: 7,
            xid: 600,
            gid: "g"
        })
    );
}

/// Inside Stream Start … Stream Stop the changes carry an xid right after the
/// kind byte; outside they do not. The same bytes therefore mean different
/// things, and the Parser must decide from the messages it has seen.
#[test]
fn parser_tracks_the_stream_block() {
    let insert_in_stream = Msg::kind(b'I').u32(501).u32(16384).u8(b'N').tuple(&[TestCell::Text(b"1")]).build();
    let mut p = Parser::new();
    assert!(!p.in_stream());

    // Outside a stream, the xid is read as the relation id and 'N' is not where
    // it belongs.
    assert!(p.parse(&insert_in_stream).is_err());
    assert!(!p.in_stream(), "an error leaves the state unchanged");

    let start = Msg::kind(b'S').u32(500).u8(1).build();
    assert!(matches!(p.parse(&start), Ok(Message::StreamStart(StreamStart { xid: 500, first_segment: true }))));
    assert!(p.in_stream());
    let Ok(Message::Insert(i)) = p.parse(&insert_in_stream) else { panic!() };
    assert_eq!((i.xid, i.relation_id), (Some(501), 16384));
    assert_eq!(p.parse(b"E"), Ok(Message::StreamStop));
    assert!(!p.in_stream());

    // A message that parses validly both ways: a Truncate whose xid looks like a
    // relation count of 0 followed by plausible bytes.
    //   in stream:   'T' xid=0 count=1 options=0 relid=0x00000005
    //   outside:     'T' count=0 options=0 then trailing bytes.
    let t = Msg::kind(b'T').u32(0).i32(1).u8(0).u32(5).build();
    assert!(matches!(p.parse(&t), Err(ParseError::TrailingBytes { .. })));
    p.parse(&start).unwrap();
    assert_eq!(
        p.parse(&t),
        Ok(Message::Truncate(Truncate { xid: Some(0), cascade: false, restart_identity: false, relation_ids: vec![5] }))
    );

    // An Insert with an xid is not an Insert without one.
    let outside = Msg::kind(b'I').u32(0x49).u8(b'N').i16(1).u8(b't').i32(4).raw(b"abcd").build();
    let Ok(Message::Insert(i)) = parse_message(&outside, false) else { panic!() };
    assert_eq!((i.xid, i.relation_id), (None, 0x49));
    assert!(parse_message(&outside, true).is_err());

    // Stream Stop, and a resumed parser.
    assert_eq!(p.parse(b"E"), Ok(Message::StreamStop));
    let mut resumed = Parser::with_in_stream(true);
    assert!(resumed.in_stream());
    assert_eq!(resumed.parse(&insert_in_stream).map(|m| m.kind_name()), Ok("Insert"));
}

/// Bytes that decode to a valid message in both states, with different fields:
/// a reader that guessed the state wrong would not even notice.
#[test]
fn same_bytes_two_valid_meanings() {
    // Inside a stream: xid 2, one relation (0x4000), no options.
    let t = Msg::kind(b'T').u32(2).i32(1).u8(0).u32(0x4000).build();
    assert_eq!(
        parse_message(&t, true),
        Ok(Message::Truncate(Truncate { xid: Some(2), cascade: false, restart_identity: false, relation_ids: vec![0x4000] }))
    );
    // Outside: two relations; the options byte is the high byte of the count
    // above, and the first relation id is made of its other bytes.
    assert_eq!(
        parse_message(&t, false),
        Ok(Message::Truncate(Truncate { xid: None, cascade: false, restart_identity: false, relation_ids: vec![0x100, 0x4000] }))
    );
    // The Parser picks the reading from the Stream Start / Stop it has seen.
    let mut p = Parser::new();
    assert!(matches!(p.parse(&t), Ok(Message::Truncate(Truncate { xid: None, .. }))));
    p.parse(&Msg::kind(b'S').u32(2).u8(0).build()).unwrap();
    assert!(matches!(p.parse(&t), Ok(Message::Truncate(Truncate { xid: Some(2), .. }))));
    p.parse(b"E").unwrap();
    assert!(matches!(p.parse(&t), Ok(Message::Truncate(Truncate { xid: None, .. }))));

    // Messages without the optional xid are read the same in both states.
    for (name, _, bytes) in common::hand_built_corpus() {
        if !b"MRYIUDT".contains(&bytes[0]) {
            assert_eq!(parse_message(&bytes, true), parse_message(&bytes, false), "{name}");
        }
    }
}

#[test]
fn unknown_and_empty() {
    assert_eq!(parse_message(b"", false), Err(ParseError::Empty));
    assert_eq!(Parser::new().parse(b""), Err(ParseError::Empty));
    for kind in [b'Z', b'x', 0, 0xFF, b'w', b'k', b'N'] {
        let err = parse_message(&[kind, 1, 2, 3], false).unwrap_err();
        assert!(matches!(err, ParseError::UnknownKind { offset: 0, byte, kind: k, .. } if byte == kind && k == kind as char));
        assert!(err.to_string().contains("expected one of 'B' (Begin)"), "{err}");
        assert_eq!(err.offset(), 0);
        assert!(err.to_string().contains(&format!("0x{kind:02x}")), "{err}");
    }
}

#[test]
fn trailing_bytes_are_an_error_for_every_kind() {
    for (name, in_stream, bytes) in common::hand_built_corpus() {
        parse_message(&bytes, in_stream).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut longer = bytes.clone();
        longer.push(b'n');
        let err = parse_message(&longer, in_stream).unwrap_err();
        // A Stream Abort (short) followed by one byte is a truncated long form.
        if name == "Stream Abort" {
            assert!(matches!(err, ParseError::Truncated { offset: 9, .. }), "{name}: {err:?}");
        } else {
            assert_eq!(err, ParseError::TrailingBytes { offset: bytes.len(), count: 1 }, "{name}");
        }
    }
}

#[test]
fn negative_lengths_and_counts_are_rejected() {
    // TupleData value length.
    let b = Msg::kind(b'I').u32(1).u8(b'N').i16(1).u8(b't').i32(-1).build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { offset: 9, field: "TupleData value length", .. }), "{err:?}");
    // TupleData column count.
    let b = Msg::kind(b'I').u32(1).u8(b'N').i16(-1).build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { offset: 6, field: "TupleData column count", .. }), "{err:?}");
    // Message content length.
    let b = Msg::kind(b'M').u8(0).u64(1).cstr("p").i32(i32::MIN).build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { offset: 12, field: "message content length", .. }), "{err:?}");
    // Relation column count.
    let b = Msg::kind(b'R').u32(1).cstr("").cstr("t").u8(b'd').i16(-3).build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { offset: 9, field: "column count", .. }), "{err:?}");
    // Truncate relation count.
    let b = Msg::kind(b'T').i32(-1).u8(0).build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { offset: 1, field: "relation count", .. }), "{err:?}");
}

#[test]
fn huge_counts_and_lengths_are_truncation_not_allocation() {
    let b = Msg::kind(b'I').u32(1).u8(b'N').i16(i16::MAX).build();
    assert!(matches!(parse_message(&b, false), Err(ParseError::Truncated { offset: 8, .. })));
    let b = Msg::kind(b'I').u32(1).u8(b'N').i16(1).u8(b'b').i32(i32::MAX).raw(b"abc").build();
    let err = parse_message(&b, false).unwrap_err();
    assert_eq!(
        err,
        ParseError::Truncated { offset: 13, expected: "TupleData value", needed: i32::MAX as usize, available: 3 }
    );
    let b = Msg::kind(b'T').i32(i32::MAX).u8(0).build();
    assert!(matches!(parse_message(&b, false), Err(ParseError::Truncated { offset: 6, .. })));
    let b = Msg::kind(b'R').u32(1).cstr("").cstr("t").u8(b'd').i16(i16::MAX).build();
    assert!(matches!(parse_message(&b, false), Err(ParseError::Truncated { offset: 11, .. })));
}

#[test]
fn strings_must_be_terminated_and_utf8() {
    let b = Msg::kind(b'O').u64(1).raw(b"no-nul").build();
    assert_eq!(parse_message(&b, false), Err(ParseError::UnterminatedString { offset: 9, expected: "origin name" }));
    let b = Msg::kind(b'O').u64(1).raw(b"\xC3\x28\0").build();
    assert_eq!(parse_message(&b, false), Err(ParseError::InvalidUtf8 { offset: 9, expected: "origin name" }));
}

#[test]
fn unknown_cell_kind_is_rejected_with_offset() {
    let b = Msg::kind(b'I').u32(1).u8(b'N').i16(2).u8(b'n').u8(b'x').build();
    let err = parse_message(&b, false).unwrap_err();
    assert!(matches!(err, ParseError::InvalidValue { offset: 9, field: "TupleData cell kind", .. }), "{err:?}");
    assert!(err.to_string().contains("offset 9"), "{err}");
}

#[test]
fn error_messages_say_what_where_and_what_was_found() {
    let b = Msg::kind(b'B').u64(1).build();
    let err = parse_message(&b, false).unwrap_err();
    assert_eq!(err, ParseError::Truncated { offset: 9, expected: "commit timestamp", needed: 8, available: 0 });
    assert_eq!(err.to_string(), "truncated message at offset 9: expected commit timestamp (8 bytes), 0 left");
    assert_eq!(ParseError::TrailingBytes { offset: 3, count: 2 }.to_string(), "2 trailing bytes at offset 3 after a complete message");
}

#[test]
fn lsn_display_and_from_str_round_trip() {
    for (value, text) in [
        (0u64, "0/0"),
        (0x16_B374_D848, "16/B374D848"),
        (0x1_0000_0000, "1/0"),
        (0xFFFF_FFFF, "0/FFFFFFFF"),
        (u64::MAX, "FFFFFFFF/FFFFFFFF"),
        (0x0000_00AB_0000_0C0D, "AB/C0D"),
    ] {
        assert_eq!(Lsn(value).to_string(), text);
        assert_eq!(text.parse::<Lsn>(), Ok(Lsn(value)));
        assert_eq!(Lsn(value).to_string().parse::<Lsn>(), Ok(Lsn(value)));
    }
    // Lower case, and the zero-padded low half that PostgreSQL 19 prints.
    assert_eq!("16/b374d848".parse::<Lsn>(), Ok(Lsn(0x16_B374_D848)));
    assert_eq!("0/0000ABCD".parse::<Lsn>(), Ok(Lsn(0xABCD)));
    for bad in ["", "/", "0/", "/0", "0", "0/0/0", "g/0", "0/+1", "+1/0", "123456789/0", "0/123456789", " 0/0", "0/0 ", "0x1/0", "-0/0"] {
        let err = bad.parse::<Lsn>().unwrap_err();
        assert_eq!(err, LsnParseError(bad.to_string()));
        assert!(err.to_string().contains("X/Y"));
    }
    assert!(Lsn(1) < Lsn(0x1_0000_0000));
    assert_eq!(format!("{:?}", Lsn(0x16_B374_D848)), "Lsn(16/B374D848)");
}

#[test]
fn pg_epoch_offset() {
    // 2000-01-01T00:00:00Z is 946684800 seconds after the Unix epoch.
    assert_eq!(PG_EPOCH_OFFSET_MICROS, 946_684_800 * 1_000_000);
}

#[test]
fn walsender_xlogdata() {
    let payload = Msg::kind(b'B').u64(0x10).i64(1).u32(2).build();
    let frame = Msg::kind(b'w').u64(0x1_0000_0000).u64(0x1_0000_0100).i64(-5).raw(&payload).build();
    let ReplicationMessage::XLogData(x) = parse_copy_data(&frame).unwrap() else { panic!() };
    assert_eq!(x.wal_start, Lsn(0x1_0000_0000));
    assert_eq!(x.wal_end, Lsn(0x1_0000_0100));
    assert_eq!(x.server_clock, -5);
    assert_eq!(x.data, &payload[..]);
    assert_eq!(parse(x.data), Message::Begin(Begin { final_lsn: Lsn(0x10), commit_ts: 1, xid: 2 }));
    // An empty payload is representable (the header alone).
    let ReplicationMessage::XLogData(x) = parse_copy_data(&frame[..25]).unwrap() else { panic!() };
    assert!(x.data.is_empty());
    for cut in 0..25 {
        assert!(parse_copy_data(&frame[..cut]).is_err(), "cut {cut}");
    }
}

#[test]
fn walsender_keepalive() {
    for (flag, reply) in [(0u8, false), (1, true)] {
        let frame = Msg::kind(b'k').u64(0xABCDEF).i64(812_345_678_901_234).u8(flag).build();
        assert_eq!(
            parse_copy_data(&frame),
            Ok(ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: Lsn(0xABCDEF),
                server_clock: 812_345_678_901_234,
                reply_requested: reply
            }))
        );
        for cut in 0..frame.len() {
            assert!(parse_copy_data(&frame[..cut]).is_err(), "cut {cut}");
        }
        let mut longer = frame.clone();
        longer.push(0);
        assert_eq!(parse_copy_data(&longer), Err(ParseError::TrailingBytes { offset: 18, count: 1 }));
    }
    let frame = Msg::kind(b'k').u64(1).i64(1).u8(2).build();
    assert!(matches!(parse_copy_data(&frame), Err(ParseError::InvalidValue { offset: 17, .. })));
    assert_eq!(parse_copy_data(b""), Err(ParseError::Empty));
    let err = parse_copy_data(b"r").unwrap_err();
    assert!(matches!(err, ParseError::UnknownKind { offset: 0, byte: b'r', kind: 'r', .. }));
    assert!(err.to_string().ends_with("expected 'w' (XLogData) or 'k' (primary keepalive)"), "{err}");
}

#[test]
fn standby_status_update_encoding() {
    let update = StandbyStatusUpdate {
        written: Lsn(0x0102_0304_0506_0708),
        flushed: Lsn(0x1112_1314_1516_1718),
        applied: Lsn(0x2122_2324_2526_2728),
        client_clock: -2,
        reply_requested: true,
    };
    let bytes = update.encode();
    let expected = Msg::kind(b'r')
        .u64(0x0102_0304_0506_0708)
        .u64(0x1112_1314_1516_1718)
        .u64(0x2122_2324_2526_2728)
        .i64(-2)
        .u8(1)
        .build();
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(StandbyStatusUpdate::ENCODED_LEN, 1 + 8 * 4 + 1);
    let no_reply = StandbyStatusUpdate { reply_requested: false, ..update }.encode();
    assert_eq!(no_reply[33], 0);
    assert_eq!(&no_reply[..33], &bytes[..33]);
}

#[test]
fn cells_debug_as_byte_strings() {
    let cells = [Cell::Text(b"h\"i\n"), Cell::Binary(&[0, 0xFF]), Cell::Null, Cell::UnchangedToast];
    assert_eq!(format!("{cells:?}"), r#"[Text(b"h\"i\n"), Binary(b"\x00\xff"), Null, UnchangedToast]"#);
}

/// pgoutput_stream_start sends the Origin of a transaction replayed from
/// elsewhere right after its first Stream Start, inside the block and with
/// commit LSN 0; Origin never carries the in-stream xid.
#[test]
fn origin_inside_a_stream_block() {
    let mut p = Parser::new();
    p.parse(&Msg::kind(b'S').u32(900).u8(1).build()).unwrap();
    assert_eq!(
        p.parse(&Msg::kind(b'O').u64(0).cstr("pg_16390").build()),
        Ok(Message::Origin(Origin { commit_lsn: Lsn(0), name: "pg_16390" }))
    );
    assert!(p.in_stream());
    let insert = Msg::kind(b'I').u32(900).u32(16384).u8(b'N').tuple(&[TestCell::Text(b"1")]).build();
    assert!(matches!(p.parse(&insert), Ok(Message::Insert(Insert { xid: Some(900), relation_id: 16384, .. }))));
    assert_eq!(p.parse(b"E"), Ok(Message::StreamStop));
}
