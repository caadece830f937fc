//! Reading the captures that `benches/gen_captures.py` writes, shared by the criterion
//! benchmarks of every crate (included with `#[path]`).
//!
//! A `.pgo` file is a sequence of records: u64 BE lsn, u32 BE xid, u32 BE length, then
//! that many bytes of one pgoutput message.

// Each benchmark uses a different part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// One capture loaded into memory: the message bytes back to back, and where each is.
pub struct Capture {
    /// `<workload>-<mode>`, e.g. `pgbench-binary`.
    pub name: String,
    pub lsns: Vec<u64>,
    pub xids: Vec<u32>,
    /// Every message's bytes, back to back.
    pub bytes: Vec<u8>,
    /// `offsets[i]..offsets[i + 1]` is message `i` in `bytes` (Arrow's binary layout).
    pub offsets: Vec<usize>,
}

impl Capture {
    pub fn messages(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.offsets.windows(2).map(move |w| &self.bytes[w[0]..w[1]])
    }
    /// Payload bytes (the message bytes only, not the framing): what throughput counts.
    pub fn payload_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// The directory of captures: `$PGOUTPUT_BENCH_DATA`, else `<workspace>/bench-data`.
pub fn data_dir() -> PathBuf {
    match std::env::var_os("PGOUTPUT_BENCH_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-data"),
    }
}

/// Every `*.pgo` capture in [`data_dir`], sorted by name; `PGOUTPUT_BENCH_ONLY` (a comma list
/// of substrings) keeps only the matching ones. Empty (with a message on stderr) when there
/// are none, so that `cargo bench` without captures skips instead of failing.
pub fn load_all() -> Vec<Capture> {
    let dir = data_dir();
    let only: Vec<String> = std::env::var("PGOUTPUT_BENCH_ONLY")
        .map(|s| s.split(',').filter(|p| !p.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "pgo"))
            .filter(|p| {
                let stem = p.file_stem().unwrap_or_default().to_string_lossy();
                only.is_empty() || only.iter().any(|o| stem.contains(o.as_str()))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    paths.sort();
    if paths.is_empty() {
        eprintln!(
            "no captures in {} (set PGOUTPUT_BENCH_DATA, or run `python benches/gen_captures.py`); skipping",
            dir.display()
        );
    }
    paths.iter().map(|p| load(p)).collect()
}

pub fn load(path: &Path) -> Capture {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut capture = Capture {
        name: path.file_stem().unwrap_or_default().to_string_lossy().into_owned(),
        lsns: Vec::new(),
        xids: Vec::new(),
        bytes: Vec::with_capacity(raw.len()),
        offsets: vec![0],
    };
    let mut at = 0;
    while at < raw.len() {
        let header = raw
            .get(at..at + 16)
            .unwrap_or_else(|| panic!("{}: truncated record header at byte {at}", path.display()));
        let lsn = u64::from_be_bytes(header[0..8].try_into().unwrap());
        let xid = u32::from_be_bytes(header[8..12].try_into().unwrap());
        let len = u32::from_be_bytes(header[12..16].try_into().unwrap()) as usize;
        let body = raw
            .get(at + 16..at + 16 + len)
            .unwrap_or_else(|| panic!("{}: truncated message at byte {at}", path.display()));
        capture.lsns.push(lsn);
        capture.xids.push(xid);
        capture.bytes.extend_from_slice(body);
        capture.offsets.push(capture.bytes.len());
        at += 16 + len;
    }
    capture
}
