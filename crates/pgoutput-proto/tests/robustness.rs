//! No input makes the parser panic: every prefix of every golden and hand-built
//! message is an error that says where the bytes ran out, and single-byte
//! corruptions at every position either decode or fail, never panic.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use pgoutput_proto::*;

/// Decodes and then touches everything the message borrows, as a consumer
/// would, so that a bad TupleData would show in `cells()` too.
fn decode_fully(bytes: &[u8], in_stream: bool) -> Result<usize, ParseError> {
    let message = parse_message(bytes, in_stream)?;
    let mut cells = 0;
    let mut visit = |t: &TupleData<'_>| {
        let all: Vec<Cell<'_>> = t.cells().collect();
        assert_eq!(all.len(), t.len(), "cells() yields exactly len() cells");
        for cell in all {
            if let Cell::Text(v) | Cell::Binary(v) = cell {
                assert!(bytes.as_ptr_range().contains(&v.as_ptr()) || v.is_empty(), "cells borrow from the input");
            }
        }
        cells += t.len();
    };
    match &message {
        Message::Insert(i) => visit(&i.new),
        Message::Update(u) => {
            if let Some(old) = &u.old {
                visit(old.tuple());
            }
            visit(&u.new);
        }
        Message::Delete(d) => visit(d.old.tuple()),
        _ => {}
    }
    assert!(!message.kind_name().is_empty());
    Ok(cells)
}

fn check_error(err: &ParseError, len: usize) {
    assert!(err.offset() <= len, "error offset {} beyond the {len} bytes: {err}", err.offset());
    assert!(!err.to_string().is_empty());
}

/// A prefix of a complete message ran out of bytes: the error must say so,
/// and say where.
fn check_prefix_error(err: &ParseError, cut: usize) {
    match *err {
        ParseError::Empty => assert_eq!(cut, 0),
        ParseError::Truncated { offset, available, needed, .. } => {
            assert_eq!(offset + available, cut, "{err}");
            assert!(needed > available, "{err}");
        }
        ParseError::UnterminatedString { offset, .. } => assert!(offset <= cut, "{err}"),
        _ => panic!("a prefix of {cut} bytes gave {err:?}, not a truncation"),
    }
}

#[test]
fn every_prefix_is_an_error() {
    let messages = common::all_messages();
    let mut checked = 0usize;
    for (name, in_stream, bytes) in &messages {
        decode_fully(bytes, *in_stream).unwrap_or_else(|e| panic!("{name}: {e}"));
        for cut in 0..bytes.len() {
            let prefix = &bytes[..cut];
            let result = catch_unwind(|| decode_fully(prefix, *in_stream))
                .unwrap_or_else(|_| panic!("{name}: panic on the prefix of {cut} bytes"));
            match result {
                Err(err) => check_prefix_error(&err, cut),
                // The one message whose prefix is itself complete: a protocol 4
                // Stream Abort with abort LSN and timestamp cut after the
                // subtransaction xid is the Stream Abort of the other protocols.
                // The parser reads the form from the length (see parser.rs).
                Ok(_) if bytes[0] == b'A' && bytes.len() == 25 && cut == 9 => {
                    let Ok(Message::StreamAbort(short)) = parse_message(prefix, *in_stream) else { unreachable!() };
                    assert_eq!((short.abort_lsn, short.abort_ts), (None, None));
                }
                Ok(_) => panic!("{name}: the prefix of {cut} of {} bytes decoded", bytes.len()),
            }
            checked += 1;
        }
    }
    assert!(checked > 500, "only {checked} prefixes");
    eprintln!("{} messages, {checked} prefixes", messages.len());
}

#[test]
fn single_byte_corruptions_never_panic() {
    let messages = common::all_messages();
    let (mut ok, mut err) = (0usize, 0usize);
    for (name, in_stream, bytes) in &messages {
        let mut corrupt = bytes.clone();
        for pos in 0..bytes.len() {
            let original = bytes[pos];
            for value in [original ^ 0xFF, 0, original ^ 0x01, original ^ 0x80, 0x7F, 0xFF] {
                corrupt[pos] = value;
                for state in [*in_stream, !*in_stream] {
                    let result = catch_unwind(AssertUnwindSafe(|| decode_fully(&corrupt, state))).unwrap_or_else(|_| {
                        panic!("{name}: panic with byte {pos} set to 0x{value:02x} (in stream: {state}): {corrupt:?}")
                    });
                    match result {
                        Ok(_) => ok += 1,
                        Err(e) => {
                            check_error(&e, corrupt.len());
                            err += 1;
                        }
                    }
                }
            }
            corrupt[pos] = original;
        }
    }
    assert!(ok > 0 && err > 0, "ok {ok}, err {err}");
    eprintln!("{} messages: {ok} corruptions decoded, {err} rejected", messages.len());
}

/// The Parser goes through whole captures with corruptions and keeps going:
/// an error leaves the stream state as it was.
#[test]
fn parser_state_survives_errors() {
    for (name, rows) in common::load_captures() {
        let mut clean = Parser::new();
        let mut noisy = Parser::new();
        for (i, row) in rows.iter().enumerate() {
            let mut bad = row.data.clone();
            bad.push(0);
            // A Stream Abort with one extra byte is a truncated long form;
            // every other message is complete, so the byte is trailing.
            assert!(noisy.parse(&bad).is_err(), "{name} row {i}");
            assert!(noisy.parse(&row.data[..row.data.len() - 1]).is_err(), "{name} row {i}");
            assert_eq!(noisy.parse(&row.data), clean.parse(&row.data), "{name} row {i}");
            assert_eq!(noisy.in_stream(), clean.in_stream());
        }
    }
}

#[test]
fn copy_data_prefixes_and_corruptions() {
    let mut frames = Vec::new();
    for (_, _, payload) in common::all_messages().into_iter().take(200) {
        let mut w = vec![b'w'];
        w.extend_from_slice(&0x1_0000_0000u64.to_be_bytes());
        w.extend_from_slice(&0x1_0000_0100u64.to_be_bytes());
        w.extend_from_slice(&812_345_678_901_234i64.to_be_bytes());
        w.extend_from_slice(&payload);
        frames.push(w);
    }
    let mut k = vec![b'k'];
    k.extend_from_slice(&0x1_0000_0100u64.to_be_bytes());
    k.extend_from_slice(&812_345_678_901_234i64.to_be_bytes());
    k.push(1);
    frames.push(k.clone());

    for frame in &frames {
        let header = if frame[0] == b'w' { 25 } else { frame.len() };
        for cut in 0..header {
            let err = parse_copy_data(&frame[..cut]).unwrap_err();
            check_prefix_error(&err, cut);
        }
        let mut corrupt = frame.clone();
        for pos in 0..frame.len() {
            for value in [frame[pos] ^ 0xFF, 0] {
                corrupt[pos] = value;
                let result = catch_unwind(|| parse_copy_data(&corrupt).map(|m| format!("{m:?}")))
                    .unwrap_or_else(|_| panic!("panic with byte {pos} set to 0x{value:02x}: {corrupt:?}"));
                if let Err(e) = result {
                    check_error(&e, corrupt.len());
                }
            }
            corrupt[pos] = frame[pos];
        }
    }
}

/// Every byte value in every position of the hand-built corpus (smaller than
/// the captures, so the full 256 values fit in a test run).
#[test]
fn hand_built_every_byte_value_everywhere() {
    for (name, in_stream, bytes) in common::hand_built_corpus() {
        let mut corrupt = bytes.clone();
        for pos in 0..bytes.len() {
            for value in 0..=255u8 {
                corrupt[pos] = value;
                let r = catch_unwind(|| decode_fully(&corrupt, in_stream))
                    .unwrap_or_else(|_| panic!("{name}: panic with byte {pos} set to 0x{value:02x}"));
                if let Err(e) = r {
                    check_error(&e, corrupt.len());
                }
            }
            corrupt[pos] = bytes[pos];
        }
    }
}
