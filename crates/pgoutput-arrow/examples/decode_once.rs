//! Decodes each capture of `PGOUTPUT_BENCH_DATA` (filtered by `PGOUTPUT_BENCH_ONLY`) once,
//! as the `decode` benchmark's `pgoutput_arrow` does, and exits: a fixed amount of work
//! to count under `valgrind --tool=cachegrind` (instructions do not depend on the load of
//! a shared machine, wall time does) or to record with `perf`.
//!
//! `cargo run --release -p pgoutput-arrow --example decode_once [-- REPEAT]`

use arrow_array::BinaryArray;
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use pgoutput_arrow::{Decoder, DecoderOptions};

#[path = "../../../benches/capture.rs"]
mod capture;

fn main() {
    let repeat: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    for cap in capture::load_all() {
        let offsets: Vec<i32> = cap.offsets.iter().map(|&o| o as i32).collect();
        let array = BinaryArray::new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from(cap.bytes.as_slice()),
            None,
        );
        let (mut pushing, mut finishing) = (0.0, 0.0);
        let mut rows = 0;
        for _ in 0..repeat {
            let start = std::time::Instant::now();
            let mut decoder = Decoder::new(DecoderOptions::default());
            decoder.push_array(&cap.lsns, &array).expect("a capture from a real server decodes");
            let pushed = std::time::Instant::now();
            let changes = decoder.finish().expect("finish");
            rows = changes.tables.values().map(|t| t.num_rows()).sum::<usize>();
            pushing += (pushed - start).as_secs_f64();
            finishing += pushed.elapsed().as_secs_f64();
        }
        let secs = (pushing + finishing) / repeat as f64;
        println!(
            "{}: {rows} rows, {:.1} MB/s ({:.0}% of the time in finish)",
            cap.name,
            cap.payload_bytes() as f64 / secs / 1e6,
            100.0 * finishing / (pushing + finishing)
        );
    }
}
