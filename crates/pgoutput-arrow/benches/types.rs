//! Column decoding throughput alone (no message parsing, no transactions): pgbench rows in
//! binary and text form, and a mix of wider types, in bytes of cell values per second.
//! Values sit in one input buffer and are appended with a `Source`, as the decoder does.

use std::hint::black_box;

use arrow_buffer::Buffer;
use criterion::{Criterion, Throughput};
use pgoutput_arrow::types::{ColumnBuilder, PgColumnType, Source, TypeOptions};

/// Rows of cells: (column index, byte range in the buffer).
struct Rows {
    buffer: Buffer,
    cells: Vec<(usize, usize, usize)>,
    types: Vec<(u32, i32)>,
    binary: bool,
}

fn build(types: &[(u32, i32)], rows: usize, binary: bool, cell: impl Fn(usize, usize) -> Vec<u8>) -> Rows {
    let mut bytes = Vec::new();
    let mut cells = Vec::new();
    for r in 0..rows {
        for c in 0..types.len() {
            let v = cell(r, c);
            // As in TupleData: a kind byte and a length before each value.
            bytes.push(if binary { b'b' } else { b't' });
            bytes.extend_from_slice(&(v.len() as u32).to_be_bytes());
            cells.push((c, bytes.len(), v.len()));
            bytes.extend_from_slice(&v);
        }
    }
    Rows { buffer: Buffer::from_vec(bytes), cells, types: types.to_vec(), binary }
}

fn decode(rows: &Rows) -> usize {
    let opts = TypeOptions { binary: rows.binary, ..Default::default() };
    let mut cols: Vec<ColumnBuilder> = rows
        .types
        .iter()
        .map(|&(oid, typmod)| ColumnBuilder::new(&PgColumnType { oid, typmod, type_name: None }, &opts))
        .collect();
    let buf = rows.buffer.as_slice();
    for &(c, off, len) in &rows.cells {
        let src = Some(Source { buffer: &rows.buffer, buffer_id: 1, offset: off });
        let v = &buf[off..off + len];
        let r = if rows.binary { cols[c].append_binary(v, src) } else { cols[c].append_text(v, src) };
        r.expect("valid value");
    }
    cols.iter_mut().map(|c| black_box(c.finish()).len()).sum()
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    // pgbench_accounts: aid int4, bid int4, abalance int4, filler char(84).
    let accounts = [(23, -1), (23, -1), (23, -1), (1042, 88)];
    let acc_bin = |r: usize, c: usize| match c {
        0 => (r as i32).to_be_bytes().to_vec(),
        1 => ((r / 100_000) as i32).to_be_bytes().to_vec(),
        2 => ((r % 5000) as i32 - 2500).to_be_bytes().to_vec(),
        _ => vec![b' '; 84],
    };
    let acc_text = |r: usize, c: usize| match c {
        0 => r.to_string().into_bytes(),
        1 => (r / 100_000).to_string().into_bytes(),
        2 => ((r % 5000) as i32 - 2500).to_string().into_bytes(),
        _ => vec![b' '; 84],
    };
    // numeric(12,2), timestamptz, text, float8, uuid, int8.
    let mixed = [(1700, (12 << 16 | 2) + 4), (1184, -1), (25, -1), (701, -1), (2950, -1), (20, -1)];
    let mixed_bin = |r: usize, c: usize| match c {
        0 => {
            // 1234.56 + r: ndigits 2, weight 0, sign 0, dscale 2
            let v = 123_456 + r as u64 * 100;
            let (i, f) = (v / 100, v % 100);
            let mut d = vec![0, 3, 0, 1, 0, 0, 0, 2];
            d.extend_from_slice(&((i / 10_000) as u16).to_be_bytes());
            d.extend_from_slice(&((i % 10_000) as u16).to_be_bytes());
            d.extend_from_slice(&((f * 100) as u16).to_be_bytes());
            d
        }
        1 => (757_382_400_000_000i64 + r as i64 * 1_000_123).to_be_bytes().to_vec(),
        2 => format!("customer note number {r}").into_bytes(),
        3 => (r as f64 * 0.25).to_be_bytes().to_vec(),
        4 => (r as u128 * 0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec(),
        _ => (r as i64 * 7).to_be_bytes().to_vec(),
    };
    let mixed_text = |r: usize, c: usize| match c {
        0 => format!("{}.{:02}", 1234 + r, 56).into_bytes(),
        1 => format!("2024-01-01 {:02}:{:02}:{:02}.{:06}+00", r / 3600 % 24, r / 60 % 60, r % 60, r % 1_000_000).into_bytes(),
        2 => format!("customer note number {r}").into_bytes(),
        3 => format!("{}", r as f64 * 0.25).into_bytes(),
        4 => {
            let h = format!("{:032x}", r as u128 * 0x9E37_79B9_7F4A_7C15);
            format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]).into_bytes()
        }
        _ => (r as i64 * 7).to_string().into_bytes(),
    };
    let sets = [
        ("pgbench_accounts/binary", build(&accounts, 100_000, true, acc_bin)),
        ("pgbench_accounts/text", build(&accounts, 100_000, false, acc_text)),
        ("mixed/binary", build(&mixed, 50_000, true, mixed_bin)),
        ("mixed/text", build(&mixed, 50_000, false, mixed_text)),
    ];
    for (name, rows) in &sets {
        let mut group = c.benchmark_group(format!("types/{name}"));
        group.throughput(Throughput::Bytes(rows.buffer.len() as u64));
        group.sample_size(10);
        group.bench_function("columns", |b| b.iter(|| black_box(decode(rows))));
        group.finish();
    }
    c.final_summary();
}
