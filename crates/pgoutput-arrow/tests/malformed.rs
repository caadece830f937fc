//! The short path of a change walks its new tuple once, into the columns: a tuple found
//! malformed after some of its cells were appended is taken back. Every cell of random
//! rows is cut or corrupted in turn; the decoder must report the error the parser reports
//! (as in Arrived mode, which never takes the short path) and decode everything else
//! exactly as a decoder that never saw the bad message.

mod common;

use arrow_array::RecordBatch;
use common::*;
use pgoutput_arrow::{Changes, Decoder, DecoderOptions, EmitMode};
use pgoutput_proto::parse_message;

const NUMERIC: u32 = 1700;
const TIMESTAMP: u32 = 1114;
const UUID: u32 = 2950;
const BYTEA: u32 = 17;
const FLOAT8: u32 = 701;
const DATE: u32 = 1082;
const BOOL: u32 = 16;
const INT4_ARRAY: u32 = 1007;
/// A commit time, microseconds since 2000-01-01.
const TS: i64 = 757_479_845_000_000;

/// numeric(10,2): a Decimal128 column, NaN kept in `_special`.
const TYPMOD_10_2: i32 = ((10 << 16) | 2) + 4;

/// The columns of the table whose builders take values back.
const COLS: &[Col<'static>] = &[
    ("id", INT4, -1, true),
    ("v", TEXT, -1, false),
    ("n", INT8, -1, false),
    ("d", NUMERIC, TYPMOD_10_2, false),
    ("free", NUMERIC, -1, false),
    ("ts", TIMESTAMP, -1, false),
    ("u", UUID, -1, false),
    ("by", BYTEA, -1, false),
    ("f", FLOAT8, -1, false),
    ("dt", DATE, -1, false),
    ("ok", BOOL, -1, false),
];

/// A table with a list column, whose new tuples are checked before they are appended.
const LIST_COLS: &[Col<'static>] = &[("id", INT4, -1, true), ("a", INT4_ARRAY, -1, false), ("v", TEXT, -1, false)];

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A numeric's binary send format: base-10000 digits, weight, sign, display scale.
fn numeric_bin(digits: &[i16], weight: i16, sign: u16, dscale: i16) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(digits.len() as i16).to_be_bytes());
    v.extend_from_slice(&weight.to_be_bytes());
    v.extend_from_slice(&sign.to_be_bytes());
    v.extend_from_slice(&dscale.to_be_bytes());
    for d in digits {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v
}

/// A one-dimensional int4[]'s binary send format.
fn int4_array_bin(values: &[i32]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&1i32.to_be_bytes());
    v.extend_from_slice(&0i32.to_be_bytes());
    v.extend_from_slice(&INT4.to_be_bytes());
    v.extend_from_slice(&(values.len() as i32).to_be_bytes());
    v.extend_from_slice(&1i32.to_be_bytes());
    for x in values {
        v.extend_from_slice(&4i32.to_be_bytes());
        v.extend_from_slice(&x.to_be_bytes());
    }
    v
}

/// One random value of column `col` of `cols` (None: a null), as text or binary. Among
/// them special values (kept in `_special`) and, in text, values a column refuses.
fn value(rng: &mut Lcg, cols: &[Col<'_>], col: usize, binary: bool, id: i32) -> C {
    let oid = cols[col].1;
    let pick = rng.below(8);
    let long = "a text value longer than twelve bytes, so a view of the message";
    match (oid, binary) {
        (INT4, false) if col == 0 => t(&id.to_string()),
        (INT4, true) if col == 0 => b(&id.to_be_bytes()),
        (TEXT, false) => t(if pick < 4 { long } else { "short" }),
        (TEXT, true) => b(if pick < 4 { long } else { "short" }.as_bytes()),
        (INT8, false) => t(&(pick as i64 * 1_000_000_007).to_string()),
        (INT8, true) => b(&(pick as i64 * 1_000_000_007).to_be_bytes()),
        (NUMERIC, false) => t(["12.34", "NaN", "-0.5", "99999999.99", "Infinity", "0"][pick % 6]),
        (NUMERIC, true) => b(&match pick % 4 {
            0 => numeric_bin(&[12, 3400], 0, 0, 2),
            1 => numeric_bin(&[], 0, 0xC000, 0),
            2 => numeric_bin(&[5000], -1, 0x4000, 1),
            _ => numeric_bin(&[], 0, 0, 0),
        }),
        (TIMESTAMP, false) => t(["2024-01-02 03:04:05", "infinity", "2024-01-02 23:59:59.5"][pick % 3]),
        (TIMESTAMP, true) => b(&[i64::MAX, 757_479_845_000_000, 0][pick % 3].to_be_bytes()),
        (UUID, false) => t("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (UUID, true) => b(&[0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11]),
        (BYTEA, false) => t(if pick < 4 { "\\x0102ff" } else { "\\x000102030405060708090a0b0c0d0e0f" }),
        (BYTEA, true) => b(if pick < 4 { &[1, 2, 255][..] } else { &[7; 20][..] }),
        (FLOAT8, false) => t(["1.5", "NaN", "-Infinity"][pick % 3]),
        (FLOAT8, true) => b(&[1.5f64, f64::NAN, -0.0][pick % 3].to_be_bytes()),
        (DATE, false) => t(["2024-01-02", "-infinity", "1999-12-31"][pick % 3]),
        (DATE, true) => b(&[0i32, i32::MAX, -1][pick % 3].to_be_bytes()),
        (BOOL, false) => t(["t", "f"][pick % 2]),
        (BOOL, true) => b(&[(pick % 2) as u8]),
        (INT4_ARRAY, false) => t(["{1,2,3}", "{}", "{{1,2},{3,4}}"][pick % 3]),
        (INT4_ARRAY, true) => b(&int4_array_bin(&[1, 2, pick as i32][..pick % 4])),
        (INT4, false) => t(&pick.to_string()),
        (INT4, true) => b(&(pick as i32).to_be_bytes()),
        _ => C::N,
    }
}

/// A random row of `cols`: values, nulls and (`unchanged`) unchanged TOAST cells, the
/// second column's always.
fn row(rng: &mut Lcg, cols: &[Col<'_>], binary: bool, id: i32, unchanged: bool) -> Vec<C> {
    (0..cols.len())
        .map(|col| match rng.below(10) {
            _ if col == 1 && unchanged => C::U,
            0 if col > 0 => C::N,
            1 if col > 0 && unchanged => C::U,
            _ => value(rng, cols, col, binary, id),
        })
        .collect()
}

/// Where each cell of an encoded tuple starts, and its value length (None: 'n' or 'u');
/// the tuple's bytes start at `at` in the message.
fn cell_starts(cells: &[C], at: usize) -> Vec<(usize, Option<usize>)> {
    let mut pos = at + 2;
    cells
        .iter()
        .map(|c| {
            let start = pos;
            match c {
                C::N | C::U => {
                    pos += 1;
                    (start, None)
                }
                C::T(v) | C::B(v) => {
                    pos += 5 + v.len();
                    (start, Some(v.len()))
                }
            }
        })
        .collect()
}

/// Every way to make the new tuple at `at` of `message` malformed at cell `cell`: cut there,
/// its kind not a kind, its length past the end, negative or one short, and the message one
/// byte too long.
fn corruptions(message: &[u8], cells: &[C], at: usize, cell: usize) -> Vec<(String, Vec<u8>)> {
    let starts = cell_starts(cells, at);
    let (start, len) = starts[cell];
    let mut out = vec![(format!("cut before cell {cell}"), message[..start].to_vec())];
    let mut with = |what: String, f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = message.to_vec();
        f(&mut m);
        out.push((what, m));
    };
    with(format!("cell {cell} of kind 'x'"), &|m| m[start] = b'x');
    with(format!("cell {cell} of kind 'N'"), &|m| m[start] = b'N');
    if let Some(len) = len {
        let set = |m: &mut Vec<u8>, v: i32| m[start + 1..start + 5].copy_from_slice(&v.to_be_bytes());
        with(format!("cell {cell} past the end"), &|m| set(m, len as i32 + 1000));
        with(format!("cell {cell} of length -1"), &|m| set(m, -1));
        with(format!("cell {cell} of length i32::MIN"), &|m| set(m, i32::MIN));
        if len > 0 {
            with(format!("cell {cell} one byte short"), &|m| set(m, len as i32 - 1));
            with(format!("cell {cell} cut in its value"), &|m| m.truncate(start + 5 + len / 2));
        }
        with(format!("cell {cell} cut in its length"), &|m| m.truncate(start + 3));
    }
    if cell + 1 == cells.len() {
        with("a byte after the last cell".to_string(), &|m| m.push(b'n'));
        with("a cell after the last".to_string(), &|m| m.extend_from_slice(&[b't', 0, 0, 0, 1, b'x']));
    }
    out
}

/// The messages of `s` pushed one at a time: each one's result, then the decoder's output.
fn run(s: &Stream, options: DecoderOptions) -> (Vec<String>, Result<Changes, String>) {
    let (lsns, data) = s.as_array();
    let mut d = Decoder::new(options);
    let results = (0..lsns.len())
        .map(|i| match d.push_array(&lsns[i..i + 1], &data.slice(i, 1)) {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string(),
        })
        .collect();
    (results, d.finish().map_err(|e| e.to_string()))
}

fn batches_equal(what: &str, a: &[RecordBatch], b: &[RecordBatch]) {
    assert_eq!(a.len(), b.len(), "{what}: batches");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.schema(), y.schema(), "{what}: schema");
        assert!(x == y, "{what}: {x:?}\nagainst\n{y:?}");
    }
}

/// Every table, version, truncate, message and transaction row the same.
fn changes_equal(what: &str, a: &Changes, b: &Changes) {
    assert_eq!(a.tables.keys().collect::<Vec<_>>(), b.tables.keys().collect::<Vec<_>>(), "{what}");
    for (name, t) in &a.tables {
        assert_eq!(t.schema, b.tables[name].schema, "{what}: {name}");
        batches_equal(&format!("{what}: {name}"), &t.batches, &b.tables[name].batches);
    }
    assert_eq!(a.table_versions.len(), b.table_versions.len(), "{what}");
    for (name, versions) in &a.table_versions {
        let other = &b.table_versions[name];
        assert_eq!(versions.len(), other.len(), "{what}: {name}");
        for (v, w) in versions.iter().zip(other) {
            assert_eq!((v.version, &v.schema), (w.version, &w.schema), "{what}: {name}");
            batches_equal(&format!("{what}: {name} v{}", v.version), &v.batches, &w.batches);
        }
    }
    batches_equal(&format!("{what}: truncates"), std::slice::from_ref(&a.truncates), std::slice::from_ref(&b.truncates));
    batches_equal(&format!("{what}: messages"), std::slice::from_ref(&a.messages), std::slice::from_ref(&b.messages));
    batches_equal(
        &format!("{what}: transactions"),
        std::slice::from_ref(&a.transactions),
        std::slice::from_ref(&b.transactions),
    );
}

/// A transaction of good rows of table `rel` around `bad` (a message given whole), then
/// one more transaction; `bad` None: an empty message in its place, which the parser
/// refuses without touching anything (so the message numbers stay the same).
fn stream(rel: u32, cols: &[Col<'_>], good: &[Vec<C>], bad: Option<&[u8]>, before: usize) -> Stream {
    let mut s = Stream::new();
    s.relation(1, "public", "t", b'f', COLS);
    s.relation(2, "public", "l", b'f', LIST_COLS);
    s.begin(7, 0x7000, TS);
    for (i, cells) in good.iter().enumerate() {
        if i == before {
            s.raw(bad.unwrap_or(&[]));
        }
        if i % 3 == 2 {
            s.update(rel, None, cells);
        } else {
            s.insert(rel, cells);
        }
    }
    s.commit(0x7000, 0x7010, TS);
    s.begin(8, 0x8000, TS);
    s.insert(rel, &good[0]);
    s.update(rel, Some((b'O', &good[1])), &good[2]);
    s.commit(0x8000, 0x8010, TS);
    assert_eq!(cols.len(), good[0].len());
    s
}

/// The bad messages of one row of `cols`: an Insert, an Update with its old row, and an
/// Update with unchanged TOAST cells, each corrupted at every cell of its new tuple.
fn bad_messages(rng: &mut Lcg, rel: u32, cols: &[Col<'_>], binary: bool) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let new = row(rng, cols, binary, 1000, false);
    let mut insert = Stream::new();
    insert.insert(rel, &new);
    let old = row(rng, cols, binary, 1001, false);
    let mut update = Stream::new();
    update.update(rel, Some((b'O', &old)), &new);
    let toasted = row(rng, cols, binary, 1002, true);
    let mut update_toast = Stream::new();
    update_toast.update(rel, None, &toasted);
    let forms: [(&str, &[u8], &[C]); 3] = [
        ("insert", &insert.messages[0].1, &new),
        ("update with its old row", &update.messages[0].1, &new),
        ("update with unchanged cells", &update_toast.messages[0].1, &toasted),
    ];
    for (form, message, cells) in forms {
        // The new tuple is the message's last part: its count is where its bytes begin.
        let at = message.len() - tuple_bytes(cells).len();
        for cell in 0..cells.len() {
            out.extend(corruptions(message, cells, at, cell).into_iter().map(|(what, m)| (format!("{form}, {what}"), m)));
        }
    }
    // A value the column refuses before the malformed cell: the parse error comes first.
    if !binary {
        let mut refused = new.clone();
        refused[2] = t("not a number");
        let mut s = Stream::new();
        s.insert(rel, &refused);
        let message = s.messages[0].1.clone();
        let at = message.len() - tuple_bytes(&refused).len();
        for cell in 3..refused.len() {
            for (what, m) in corruptions(&message, &refused, at, cell) {
                out.push((format!("a refused value, then {what}"), m));
            }
        }
    }
    out
}

#[test]
fn malformed_new_tuples_are_taken_back() {
    let mut rng = Lcg(23);
    let mut cases = 0;
    for binary in [false, true] {
        for (rel, cols) in [(1u32, COLS), (2, LIST_COLS)] {
            let good: Vec<Vec<C>> = (0..7).map(|i| row(&mut rng, cols, binary, i, i % 3 == 2)).collect();
            for (what, bad) in bad_messages(&mut rng, rel, cols, binary) {
                // A length one short can leave cells that read as another well-formed tuple.
                if parse_message(&bad, false).is_ok() {
                    continue;
                }
                // The bad message first in a batch, after one row of it, and amid batches.
                let before = cases % good.len();
                let bad_stream = stream(rel, cols, &good, Some(&bad), before);
                let reference = stream(rel, cols, &good, None, before);
                let index = bad_stream.messages.iter().position(|(_, m)| *m == bad).unwrap();
                for (batch_size, views) in [(3, false), (1000, true)] {
                    let options = || {
                        let mut o = DecoderOptions { batch_size, ..Default::default() };
                        o.types.views = views;
                        o
                    };
                    let what = format!("{what} (binary {binary}, table {rel}, batch_size {batch_size}, before {before})");
                    let (results, changes) = run(&bad_stream, options());
                    let (arrived, _) = run(&bad_stream, DecoderOptions { emit: EmitMode::Arrived, ..options() });
                    let (reference_results, reference_changes) = run(&reference, options());
                    assert!(results[index].contains("at offset"), "{what}: {}", results[index]);
                    assert_eq!(results, arrived, "{what}: the errors of the parser's path");
                    for (i, (r, e)) in results.iter().zip(&reference_results).enumerate() {
                        if i != index {
                            assert_eq!(r, e, "{what}: message {i}");
                        }
                    }
                    let changes = changes.unwrap_or_else(|e| panic!("{what}: {e}"));
                    let reference_changes = reference_changes.unwrap_or_else(|e| panic!("{what}: {e}"));
                    changes_equal(&what, &changes, &reference_changes);
                    cases += 1;
                }
            }
        }
    }
    assert!(cases > 500, "{cases} cases");
}
