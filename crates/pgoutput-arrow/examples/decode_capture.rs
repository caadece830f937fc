//! Decodes `.pgo` captures (u64 BE lsn, u32 BE xid, u32 BE length, bytes per
//! message) and reports throughput in payload bytes per second, rows, batches
//! and peak RSS.
//!
//! `cargo run --release -p pgoutput-arrow --example decode_capture -- bench-data/pgbench-binary.pgo [--binary] [--repeat N]`

use std::time::Instant;

use arrow_array::BinaryArray;
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use pgoutput_arrow::{Decoder, DecoderOptions, Output};

fn load(path: &str) -> (Vec<u64>, BinaryArray) {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (mut lsns, mut bytes, mut offsets) = (Vec::new(), Vec::with_capacity(raw.len()), vec![0i32]);
    let mut at = 0;
    while at + 16 <= raw.len() {
        let lsn = u64::from_be_bytes(raw[at..at + 8].try_into().unwrap());
        let len = u32::from_be_bytes(raw[at + 12..at + 16].try_into().unwrap()) as usize;
        bytes.extend_from_slice(&raw[at + 16..at + 16 + len]);
        lsns.push(lsn);
        offsets.push(bytes.len() as i32);
        at += 16 + len;
    }
    let data = BinaryArray::new(OffsetBuffer::new(ScalarBuffer::from(offsets)), Buffer::from_vec(bytes), None);
    (lsns, data)
}

fn vm_hwm_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// Nanoseconds this thread has run on a CPU: throughput on a busy machine is
/// measured against it, not against the wall clock.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let binary = args.iter().any(|a| a == "--binary");
    let repeat: usize = args
        .iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(5);
    for path in args.iter().filter(|a| a.ends_with(".pgo")) {
        let (lsns, data) = load(path);
        let payload = data.values().len() as f64;
        let mut best = f64::MAX;
        let mut best_cpu = f64::MAX;
        let mut rows = 0;
        let mut batches = 0;
        for _ in 0..repeat {
            let mut options = DecoderOptions::default();
            options.types.binary = binary || path.contains("binary");
            let start = Instant::now();
            let cpu = cpu_ns();
            let mut d = Decoder::new(options);
            d.push_array(&lsns, &data).unwrap_or_else(|e| panic!("{path}: {e}"));
            d.flush().unwrap();
            let out = d.take_ready();
            let secs = start.elapsed().as_secs_f64();
            best = best.min(secs);
            best_cpu = best_cpu.min((cpu_ns() - cpu) as f64 / 1e9);
            rows = out
                .iter()
                .map(|o| match o {
                    Output::Table { batch, .. } => batch.num_rows(),
                    _ => 0,
                })
                .sum::<usize>();
            batches = out.len();
        }
        println!(
            "{path}: {:.1} MB in {:.3} s CPU = {:.0} MB/s ({:.0} MB/s by wall clock; {rows} rows, {batches} batches, {} messages), peak RSS {:.0} MiB",
            payload / 1e6,
            best_cpu,
            payload / 1e6 / best_cpu,
            payload / 1e6 / best,
            lsns.len(),
            vm_hwm_mib()
        );
    }
}
