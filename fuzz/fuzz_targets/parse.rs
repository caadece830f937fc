//! Arbitrary bytes into every entry point of the parser: a pgoutput message in
//! both stream states, a stateful Parser fed a sequence of messages, and a
//! walsender CopyData frame (whose XLogData payload is parsed in turn); and the
//! sequence through the transaction framing, which must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgoutput_proto::{parse_copy_data, parse_message, Message, Parser, ReplicationMessage, TupleData, TxnFraming};

fn touch(message: &Message<'_>) {
    let visit = |t: &TupleData<'_>| assert_eq!(t.cells().count(), t.len());
    match message {
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
}

fuzz_target!(|data: &[u8]| {
    for in_stream in [false, true] {
        if let Ok(m) = parse_message(data, in_stream) {
            touch(&m);
        }
    }
    // The same input as a sequence of messages split at each 0xFE, so the
    // Parser's stream state is driven by the input.
    let mut parser = Parser::new();
    let mut framing = TxnFraming::<u32>::new();
    for part in data.split(|&b| b == 0xFE).filter(|p| !p.is_empty()) {
        let before = parser.in_stream();
        match parser.parse(part) {
            Ok(m) => {
                touch(&m);
                let pending = framing.pending();
                if framing.frame(&m).is_err() {
                    assert_eq!(framing.pending(), pending, "a framing error leaves the state unchanged");
                }
                assert_eq!(parse_message(part, before).as_ref(), Ok(&m));
            }
            Err(e) => {
                assert_eq!(parser.in_stream(), before, "an error leaves the state unchanged");
                assert!(e.offset() <= part.len());
            }
        }
    }
    if let Ok(ReplicationMessage::XLogData(x)) = parse_copy_data(data) {
        if let Ok(m) = parser.parse(x.data) {
            touch(&m);
        }
    }
});
