//! Peak memory of one streamed transaction of 2 million changes: the rows of
//! pgbench_accounts (aid, bid, abalance int4, filler bpchar(84), text mode), sent
//! as PostgreSQL streams them (Stream Start … Stop blocks of 10,000 changes,
//! interleaved with small transactions sent whole), then Stream Commit.
//!
//! Each message arrives in its own buffer, as from a walsender, so what the
//! decoder holds is its own doing. With the default options (256 MiB of buffered
//! messages), the transaction spills to disk, and the peak resident memory of this
//! process (VmHWM) stays under 1 GiB, the 2 million decoded rows included.
//!
//! This file holds one test so that the process measures nothing else.
//! `PGOUTPUT_SPILL_CHANGES` changes the number of changes.
//! Run: `cargo test --release -p pgoutput-arrow --test spill_memory -- --nocapture`

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_buffer::Buffer;
use pgoutput_arrow::{Decoder, DecoderOptions, Output};

const REL: u32 = 16397;

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn relation(in_stream: Option<u32>) -> Vec<u8> {
    let mut m = vec![b'R'];
    if let Some(x) = in_stream {
        m.extend_from_slice(&x.to_be_bytes());
    }
    m.extend_from_slice(&REL.to_be_bytes());
    m.extend_from_slice(b"public\0pgbench_accounts\0d");
    m.extend_from_slice(&4i16.to_be_bytes());
    for (key, name, oid, typmod) in [(1u8, "aid", 23u32, -1i32), (0, "bid", 23, -1), (0, "abalance", 23, -1), (0, "filler", 1042, 88)] {
        m.push(key);
        m.extend_from_slice(name.as_bytes());
        m.push(0);
        m.extend_from_slice(&oid.to_be_bytes());
        m.extend_from_slice(&typmod.to_be_bytes());
    }
    m
}

fn insert(in_stream: Option<u32>, aid: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(160);
    m.push(b'I');
    if let Some(x) = in_stream {
        m.extend_from_slice(&x.to_be_bytes());
    }
    m.extend_from_slice(&REL.to_be_bytes());
    m.push(b'N');
    m.extend_from_slice(&4i16.to_be_bytes());
    let aid_s = aid.to_string();
    let bid_s = (aid / 100_000 + 1).to_string();
    for v in [aid_s.as_bytes(), bid_s.as_bytes(), b"0", &[b' '; 84][..]] {
        m.push(b't');
        m.extend_from_slice(&(v.len() as i32).to_be_bytes());
        m.extend_from_slice(v);
    }
    m
}

#[test]
fn two_million_change_stream_stays_under_1_gib() {
    let n: u32 = std::env::var("PGOUTPUT_SPILL_CHANGES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000_000);
    let xid: u32 = 1000;
    let started = std::time::Instant::now();
    let mut d = Decoder::new(DecoderOptions::default());
    let lsn_at = std::cell::Cell::new(0x1_0000_0000u64);
    let push = |d: &mut Decoder, m: Vec<u8>| {
        lsn_at.set(lsn_at.get() + m.len() as u64);
        d.push(lsn_at.get(), &Buffer::from_vec(m)).unwrap();
    };
    let (mut max_buffered, mut max_spilled, mut message_bytes) = (0usize, 0u64, 0u64);
    push(&mut d, relation(None));
    let mut aid = 1;
    let mut other_xid: u32 = 5000;
    let mut whole_rows = 0;
    while aid <= n {
        let mut s = vec![b'S'];
        s.extend_from_slice(&xid.to_be_bytes());
        s.push((aid == 1) as u8);
        push(&mut d, s);
        if aid == 1 {
            push(&mut d, relation(Some(xid)));
        }
        let end = (aid + 10_000).min(n + 1);
        for a in aid..end {
            let m = insert(Some(xid), a);
            message_bytes += m.len() as u64;
            push(&mut d, m);
        }
        aid = end;
        push(&mut d, vec![b'E']);
        // A small transaction sent whole between two blocks.
        other_xid += 1;
        let mut b = vec![b'B'];
        b.extend_from_slice(&(lsn_at.get() + 0x100).to_be_bytes());
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&other_xid.to_be_bytes());
        push(&mut d, b);
        push(&mut d, insert(None, 10_000_000 + other_xid));
        whole_rows += 1;
        let mut c = vec![b'C', 0];
        c.extend_from_slice(&(lsn_at.get() + 0x100).to_be_bytes());
        c.extend_from_slice(&(lsn_at.get() + 0x110).to_be_bytes());
        c.extend_from_slice(&0i64.to_be_bytes());
        push(&mut d, c);
        max_buffered = max_buffered.max(d.buffered_bytes());
        max_spilled = max_spilled.max(d.spilled_bytes());
        // The small transactions' batches are taken as a consumer would.
        drop(d.take_ready());
    }
    let mut c = vec![b'c'];
    c.extend_from_slice(&xid.to_be_bytes());
    c.push(0);
    c.extend_from_slice(&(lsn_at.get() + 0x100).to_be_bytes());
    c.extend_from_slice(&(lsn_at.get() + 0x110).to_be_bytes());
    c.extend_from_slice(&0i64.to_be_bytes());
    push(&mut d, c);
    d.flush().unwrap();
    assert_eq!(d.pending_transactions(), 0);
    let outputs = d.take_ready();
    let mut rows = 0usize;
    let mut next_aid = 1;
    for o in &outputs {
        if let Output::Table { batch, .. } = o {
            let aids = batch.column(0).as_primitive::<Int32Type>();
            for a in aids.values() {
                if *a < 10_000_000 {
                    assert_eq!(*a as u32, next_aid, "the streamed rows in order, none lost or repeated");
                    next_aid += 1;
                }
            }
            rows += batch.num_rows();
        }
    }
    assert_eq!(next_aid, n + 1);
    let hwm = vm_hwm_kib().expect("/proc/self/status has VmHWM");
    eprintln!(
        "spill: {n} changes in one streamed transaction ({:.0} MiB of messages), {rows} rows decoded \
         ({whole_rows} from small transactions) in {:.1} s; buffered at most {:.0} MiB, spilled at most {:.0} MiB; \
         peak RSS (VmHWM) {:.0} MiB with the decoded batches held",
        message_bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64(),
        max_buffered as f64 / (1 << 20) as f64,
        max_spilled as f64 / (1 << 20) as f64,
        hwm as f64 / 1024.0
    );
    if n >= 2_000_000 {
        assert!(max_spilled > 0, "the transaction did not spill");
        assert!(hwm < 1024 * 1024, "peak RSS {hwm} KiB");
    }
}
