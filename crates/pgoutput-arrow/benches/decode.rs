//! Arrow decoding throughput on captures of real workloads (`benches/gen_captures.py`), in
//! bytes of pgoutput payload per second: a whole capture pushed through a [`Decoder`] (as
//! `pgoutput_arrow.decode` does with an Arrow binary column) until every batch is built.
//! `pgoutput_arrow_arrived` is the same in [`EmitMode::Arrived`], where changes are decoded
//! as they arrive instead of being buffered until their Commit: the difference is the cost
//! of transaction assembly. `pgoutput_arrow_views` is the default with
//! `TypeOptions::views` (text and bytea as view arrays into the input, zero copy): the
//! difference is what the default's plain utf8/binary columns cost.
//!
//! `PGOUTPUT_BENCH_DATA` names the capture directory (default `bench-data/`);
//! without captures the benchmark prints a message and does nothing.

use std::hint::black_box;

use arrow_array::BinaryArray;
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use criterion::{Criterion, Throughput};
use pgoutput_arrow::{Decoder, DecoderOptions, EmitMode, TypeOptions};

#[path = "../../../benches/capture.rs"]
mod capture;

/// The capture as the Arrow column that `decode()` receives from a Parquet file.
fn as_binary_array(cap: &capture::Capture) -> BinaryArray {
    let offsets: Vec<i32> = cap.offsets.iter().map(|&o| o as i32).collect();
    BinaryArray::new(
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        Buffer::from(cap.bytes.as_slice()),
        None,
    )
}

fn decode_array(lsns: &[u64], data: &BinaryArray, emit: EmitMode, views: bool) -> usize {
    let types = TypeOptions { views, ..TypeOptions::default() };
    let mut decoder = Decoder::new(DecoderOptions { emit, types, ..DecoderOptions::default() });
    decoder.push_array(lsns, data).expect("a capture from a real server decodes");
    let out = decoder.finish().expect("finish");
    black_box(&out);
    std::mem::size_of_val(&out)
}

fn main() {
    let captures = capture::load_all();
    if captures.is_empty() {
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    for cap in &captures {
        let array = as_binary_array(cap);
        let mut group = c.benchmark_group(format!("decode/{}", cap.name));
        group.throughput(Throughput::Bytes(cap.payload_bytes()));
        group.sample_size(10);
        group.bench_function("pgoutput_arrow", |b| {
            b.iter(|| black_box(decode_array(&cap.lsns, &array, EmitMode::default(), false)))
        });
        group.bench_function("pgoutput_arrow_views", |b| {
            b.iter(|| black_box(decode_array(&cap.lsns, &array, EmitMode::default(), true)))
        });
        group.bench_function("pgoutput_arrow_arrived", |b| {
            b.iter(|| black_box(decode_array(&cap.lsns, &array, EmitMode::Arrived, false)))
        });
        group.finish();
    }
    c.final_summary();
}
