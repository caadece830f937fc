//! Prints every message of golden capture files (`tests/golden/captures/*.bin`:
//! per row u64 BE lsn, u32 BE xid, u32 BE length, bytes), one per line.
//!
//! `cargo run -p pgoutput-proto --example dump -- tests/golden/captures/streaming-pg18-v4-parallel.bin`

use pgoutput_proto::{Lsn, Parser};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path)?;
        let mut parser = Parser::new();
        let mut rest = &bytes[..];
        let mut row = 0;
        while rest.len() >= 16 {
            let lsn = Lsn(u64::from_be_bytes(rest[..8].try_into()?));
            let xid = u32::from_be_bytes(rest[8..12].try_into()?);
            let len = u32::from_be_bytes(rest[12..16].try_into()?) as usize;
            let data = rest.get(16..16 + len).ok_or("truncated capture")?;
            match parser.parse(data) {
                Ok(m) => println!("{path}:{row} {lsn} xid {xid}: {m:?}"),
                Err(e) => println!("{path}:{row} {lsn} xid {xid}: ERROR {e}"),
            }
            rest = &rest[16 + len..];
            row += 1;
        }
    }
    Ok(())
}
