//! Parser throughput on captures of real workloads (`benches/gen_captures.py`), in bytes of
//! pgoutput payload per second, beside two references on the same bytes: a memory copy (the
//! physical limit) and the pgoutput parser of the `pg_walstream` crate (a peer).
//!
//! `PGOUTPUT_BENCH_DATA` names the capture directory (default `bench-data/`);
//! without captures the benchmark prints a message and does nothing.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use pgoutput_proto::{Cell, Message, Parser};

#[path = "../../../benches/capture.rs"]
mod capture;

/// Sum of the value lengths of every cell, so that the lazy cell iterator does its work.
fn walk_cells<'a>(cells: impl Iterator<Item = Cell<'a>>) -> usize {
    cells
        .map(|c| match c {
            Cell::Text(v) | Cell::Binary(v) => v.len(),
            Cell::Null | Cell::UnchangedToast => 1,
        })
        .sum()
}

fn parse_all(capture: &capture::Capture) -> usize {
    let mut parser = Parser::new();
    let mut acc = 0usize;
    for data in capture.messages() {
        acc += match parser.parse(data).expect("a capture from a real server parses") {
            Message::Insert(i) => walk_cells(i.new.cells()),
            Message::Update(u) => {
                u.old.map_or(0, |o| walk_cells(o.tuple().cells())) + walk_cells(u.new.cells())
            }
            Message::Delete(d) => walk_cells(d.old.tuple().cells()),
            _ => 1,
        };
    }
    acc
}

fn walstream_all(capture: &capture::Capture) -> usize {
    let mut parser = pg_walstream::LogicalReplicationParser::with_protocol_version(1);
    let mut acc = 0usize;
    for data in capture.messages() {
        let msg = parser.parse_wal_message(data).expect("pg_walstream parses the capture");
        acc += std::mem::size_of_val(&msg);
        black_box(msg);
    }
    acc
}

fn main() {
    let captures = capture::load_all();
    if captures.is_empty() {
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    for cap in &captures {
        let mut group = c.benchmark_group(format!("parse/{}", cap.name));
        group.throughput(Throughput::Bytes(cap.payload_bytes()));
        group.sample_size(10);
        group.bench_function("memcpy", |b| {
            let mut out = vec![0u8; cap.bytes.len()];
            b.iter(|| {
                out.copy_from_slice(black_box(&cap.bytes));
                black_box(&out);
            })
        });
        group.bench_function("memcpy_per_message", |b| {
            let mut out: Vec<u8> = Vec::with_capacity(cap.bytes.len());
            b.iter(|| {
                out.clear();
                for m in cap.messages() {
                    out.extend_from_slice(black_box(m));
                }
                black_box(&out);
            })
        });
        group.bench_function("pgoutput_proto", |b| b.iter(|| black_box(parse_all(cap))));
        group.bench_function("pg_walstream", |b| b.iter(|| black_box(walstream_all(cap))));
        group.finish();
    }
    c.final_summary();
}
