//! Arbitrary bytes as the binary COPY data of a snapshot: the first byte picks the options
//! and the columns' types, the second where the data is cut into two pushes. Any error is
//! fine; a panic is not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgoutput_arrow::{CopyDecoder, DecoderOptions, SnapshotPosition, TypeOptions};
use pgoutput_proto::{Column, Relation, ReplicaIdentity};

/// int4, text, int8, int4[], timestamptz, numeric(10,2), uuid, jsonb, interval, an unknown type.
const TYPES: [(u32, i32); 10] =
    [(23, -1), (25, -1), (20, -1), (1007, -1), (1184, -1), (1700, 655366), (2950, -1), (3802, -1), (1186, -1), (70000, -1)];

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let Some((&cut, rest)) = rest.split_first() else { return };
    let n = (flags & 7) as usize + 1;
    let columns: Vec<Column<'_>> = (0..n)
        .map(|i| {
            let (oid, typmod) = TYPES[(i + (flags >> 3) as usize) % TYPES.len()];
            Column { is_key: i == 0, name: "c", type_oid: oid, type_modifier: typmod }
        })
        .collect();
    let relation = Relation { xid: None, id: 1, namespace: "public", name: "t", replica_identity: ReplicaIdentity::Default, columns };
    let options = DecoderOptions {
        types: TypeOptions { binary: flags & 0x80 != 0, ..Default::default() },
        batch_size: 3,
        ..Default::default()
    };
    let position = SnapshotPosition { lsn: 1, commit_ts: 0, first_seq: -10 };
    let Ok(mut decoder) = CopyDecoder::new(&relation, &[], &options, position) else { return };
    let at = (cut as usize).min(rest.len());
    let _ = decoder.push(&rest[..at]);
    let _ = decoder.push(&rest[at..]);
    let _ = decoder.take_ready();
    let _ = decoder.finish();
});
