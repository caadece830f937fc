//! The spill file of one open transaction: its oldest buffered messages, written
//! out when the decoder holds more than `memory_limit` bytes, and read back in
//! chunks at commit. Each chunk becomes one Arrow buffer, so the values decoded
//! from it may still be referenced (zero copy) rather than copied once more.
//!
//! Record layout (native endianness, the file never leaves this process):
//! lsn u64, seq u64, xid u32, aux u32, flags u8, len u32, then `len` message bytes.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use arrow_buffer::Buffer;

const HEADER: usize = 8 + 8 + 4 + 4 + 1 + 4;
/// Bytes of messages read back at once.
const CHUNK: usize = 8 << 20;

/// What the decoder keeps of a buffered message besides its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryHeader {
    pub lsn: u64,
    /// Position of the message in the decoded stream.
    pub seq: u64,
    /// The xid the message carried (inside a stream block), else 0.
    pub xid: u32,
    /// Schema id of the relation for Insert/Update/Delete; index of the resolved
    /// relation list for Truncate.
    pub aux: u32,
    /// The message was sent inside a Stream Start … Stop block (it carries an xid).
    pub in_stream: bool,
}

pub(crate) struct SpillFile {
    writer: BufWriter<File>,
    records: u64,
    bytes: u64,
}

impl SpillFile {
    pub fn new(dir: Option<&Path>) -> io::Result<Self> {
        let file = match dir {
            Some(dir) => tempfile::tempfile_in(dir)?,
            None => tempfile::tempfile()?,
        };
        Ok(SpillFile { writer: BufWriter::with_capacity(1 << 20, file), records: 0, bytes: 0 })
    }

    pub fn write(&mut self, h: &EntryHeader, message: &[u8]) -> io::Result<()> {
        let len = u32::try_from(message.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message of 4 GiB or more"))?;
        let mut header = [0u8; HEADER];
        header[0..8].copy_from_slice(&h.lsn.to_ne_bytes());
        header[8..16].copy_from_slice(&h.seq.to_ne_bytes());
        header[16..20].copy_from_slice(&h.xid.to_ne_bytes());
        header[20..24].copy_from_slice(&h.aux.to_ne_bytes());
        header[24] = h.in_stream as u8;
        header[25..29].copy_from_slice(&len.to_ne_bytes());
        self.writer.write_all(&header)?;
        self.writer.write_all(message)?;
        self.records += 1;
        self.bytes += (HEADER + message.len()) as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Reads the records back, in the order written.
    pub fn into_reader(self) -> io::Result<SpillReader> {
        let mut file = self.writer.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        Ok(SpillReader { reader: BufReader::with_capacity(1 << 20, file), left: self.records })
    }
}

pub(crate) struct SpillReader {
    reader: BufReader<File>,
    left: u64,
}

/// Records read back: their bytes in one buffer, and where each lies in it.
pub(crate) struct Chunk {
    pub buffer: Buffer,
    pub entries: Vec<(EntryHeader, usize, usize)>,
}

impl SpillReader {
    /// The next chunk of about 8 MiB of records, or None at the end.
    pub fn next_chunk(&mut self) -> io::Result<Option<Chunk>> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut data: Vec<u8> = Vec::with_capacity(CHUNK);
        let mut entries = Vec::new();
        while self.left > 0 && (data.len() < CHUNK || entries.is_empty()) {
            let mut header = [0u8; HEADER];
            self.reader.read_exact(&mut header)?;
            let field = |r: std::ops::Range<usize>| -> u64 {
                let mut b = [0u8; 8];
                b[..r.len()].copy_from_slice(&header[r.clone()]);
                if r.len() == 8 {
                    u64::from_ne_bytes(b)
                } else {
                    u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as u64
                }
            };
            let h = EntryHeader {
                lsn: field(0..8),
                seq: field(8..16),
                xid: field(16..20) as u32,
                aux: field(20..24) as u32,
                in_stream: header[24] != 0,
            };
            let len = field(25..29) as usize;
            let start = data.len();
            data.resize(start + len, 0);
            self.reader.read_exact(&mut data[start..])?;
            entries.push((h, start, len));
            self.left -= 1;
        }
        Ok(Some(Chunk { buffer: Buffer::from_vec(data), entries }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_in_order() {
        let mut f = SpillFile::new(None).unwrap();
        let mut expected = Vec::new();
        for i in 0..1000u64 {
            let h = EntryHeader { lsn: i * 10, seq: i, xid: i as u32 % 7, aux: 3, in_stream: i % 2 == 0 };
            let msg = vec![i as u8; (i % 50) as usize];
            f.write(&h, &msg).unwrap();
            expected.push((h, msg));
        }
        let mut r = f.into_reader().unwrap();
        let mut got = Vec::new();
        while let Some(chunk) = r.next_chunk().unwrap() {
            for (h, start, len) in chunk.entries {
                got.push((h, chunk.buffer.as_slice()[start..start + len].to_vec()));
            }
        }
        assert_eq!(got, expected);
    }
}
