//! Shared helpers of the integration tests: a builder for hand-made pgoutput
//! messages, written from the PostgreSQL 18 documentation (section 54.9), and the
//! corpus of those messages that the robustness tests mutate.
#![allow(dead_code)]

/// Builds one message field by field, big-endian as PostgreSQL sends it.
#[derive(Default, Clone)]
pub struct Msg(pub Vec<u8>);

impl Msg {
    pub fn kind(kind: u8) -> Self {
        Msg(vec![kind])
    }
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn cstr(mut self, s: &str) -> Self {
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        self
    }
    pub fn raw(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    /// A TupleData: Int16 count, then each cell.
    pub fn tuple(mut self, cells: &[TestCell]) -> Self {
        self.0.extend_from_slice(&(cells.len() as i16).to_be_bytes());
        for cell in cells {
            match cell {
                TestCell::Null => self.0.push(b'n'),
                TestCell::Toast => self.0.push(b'u'),
                TestCell::Text(v) | TestCell::Binary(v) => {
                    self.0.push(if matches!(cell, TestCell::Text(_)) { b't' } else { b'b' });
                    self.0.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    self.0.extend_from_slice(v);
                }
            }
        }
        self
    }
    pub fn build(self) -> Vec<u8> {
        self.0
    }
}

pub enum TestCell {
    Null,
    Toast,
    Text(&'static [u8]),
    Binary(&'static [u8]),
}

/// One hand-built message of each kind (and each variant of the kinds that have
/// several), with the stream state it must be parsed in.
pub fn hand_built_corpus() -> Vec<(&'static str, bool, Vec<u8>)> {
    use TestCell::*;
    let cells: &[TestCell] = &[Text(b"42"), Null, Toast, Binary(&[0, 0, 0, 7]), Text(b"")];
    let mut out = Vec::new();
    for in_stream in [false, true] {
        let x = |m: Msg| if in_stream { m.u32(777) } else { m };
        out.push(("Insert", in_stream, x(Msg::kind(b'I')).u32(16384).u8(b'N').tuple(cells).build()));
        out.push(("Update N", in_stream, x(Msg::kind(b'U')).u32(16384).u8(b'N').tuple(cells).build()));
        out.push((
            "Update K",
            in_stream,
            x(Msg::kind(b'U')).u32(16384).u8(b'K').tuple(&[Text(b"1"), Null]).u8(b'N').tuple(cells).build(),
        ));
        out.push(("Update O", in_stream, x(Msg::kind(b'U')).u32(16384).u8(b'O').tuple(cells).u8(b'N').tuple(cells).build()));
        out.push(("Delete K", in_stream, x(Msg::kind(b'D')).u32(16384).u8(b'K').tuple(&[Text(b"1"), Null]).build()));
        out.push(("Delete O", in_stream, x(Msg::kind(b'D')).u32(16384).u8(b'O').tuple(cells).build()));
        out.push(("Truncate", in_stream, x(Msg::kind(b'T')).i32(2).u8(3).u32(16384).u32(16390).build()));
        out.push((
            "Relation",
            in_stream,
            x(Msg::kind(b'R'))
                .u32(16384)
                .cstr("public")
                .cstr("t")
                .u8(b'd')
                .i16(2)
                .u8(1)
                .cstr("id")
                .u32(23)
                .i32(-1)
                .u8(0)
                .cstr("v")
                .u32(1043)
                .i32(14)
                .build(),
        ));
        out.push(("Type", in_stream, x(Msg::kind(b'Y')).u32(16400).cstr("public").cstr("mood").build()));
        out.push((
            "Message",
            in_stream,
            x(Msg::kind(b'M')).u8(1).u64(0x1_0000_0040).cstr("prefix").i32(5).raw(b"hello").build(),
        ));
    }
    let n = |name, b: Vec<u8>| (name, false, b);
    out.push(n("Begin", Msg::kind(b'B').u64(0x0000_0001_0000_00A0).i64(800_000_000_000_000).u32(750).build()));
    out.push(n("Commit", Msg::kind(b'C').u8(0).u64(0x1_0000_00A0).u64(0x1_0000_00D8).i64(800_000_000_000_000).build()));
    out.push(n("Origin", Msg::kind(b'O').u64(0x2_0000_0010).cstr("node_a").build()));
    out.push(n(
        "Message non-transactional",
        Msg::kind(b'M').u8(0).u64(0x1_0000_0040).cstr("p").i32(0).build(),
    ));
    out.push(n("Stream Start", Msg::kind(b'S').u32(777).u8(1).build()));
    out.push(("Stream Stop", true, Msg::kind(b'E').build()));
    out.push(n(
        "Stream Commit",
        Msg::kind(b'c').u32(777).u8(0).u64(0x3_0000_0000).u64(0x3_0000_0030).i64(800_000_000_000_001).build(),
    ));
    out.push(n("Stream Abort", Msg::kind(b'A').u32(777).u32(778).build()));
    out.push(n(
        "Stream Abort parallel",
        Msg::kind(b'A').u32(777).u32(777).u64(0x3_0000_0100).i64(800_000_000_000_002).build(),
    ));
    out.push(n(
        "Begin Prepare",
        Msg::kind(b'b').u64(0x4_0000_0000).u64(0x4_0000_0040).i64(800_000_000_000_003).u32(900).cstr("gid-1").build(),
    ));
    out.push(n(
        "Prepare",
        Msg::kind(b'P').u8(0).u64(0x4_0000_0000).u64(0x4_0000_0040).i64(800_000_000_000_003).u32(900).cstr("gid-1").build(),
    ));
    out.push(n(
        "Commit Prepared",
        Msg::kind(b'K').u8(0).u64(0x4_0000_0100).u64(0x4_0000_0140).i64(800_000_000_000_004).u32(900).cstr("gid-1").build(),
    ));
    out.push(n(
        "Rollback Prepared",
        Msg::kind(b'r')
            .u8(0)
            .u64(0x4_0000_0040)
            .u64(0x4_0000_0200)
            .i64(800_000_000_000_003)
            .i64(800_000_000_000_005)
            .u32(900)
            .cstr("gid-1")
            .build(),
    ));
    out.push(n(
        "Stream Prepare",
        Msg::kind(b'p').u8(0).u64(0x5_0000_0000).u64(0x5_0000_0040).i64(800_000_000_000_006).u32(901).cstr("gid-2").build(),
    ));
    out
}

/// One row of a golden capture: what `pg_logical_slot_get_binary_changes`
/// returned (lsn, xid, data).
#[derive(Debug, Clone)]
pub struct Row {
    pub lsn: u64,
    pub xid: u32,
    pub data: Vec<u8>,
}

/// The directory of the golden captures, `tests/golden/captures` at the
/// workspace root.
pub fn captures_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/captures")
}

/// Every `*.bin` capture, sorted by name, with its rows.
pub fn load_captures() -> Vec<(String, Vec<Row>)> {
    let dir = captures_dir();
    // A missing or empty directory is a failure, not a vacuous pass of every golden test.
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("golden captures {}: {e}", dir.display()));
    let mut paths: Vec<_> = entries
        .map(|e| e.expect("read captures dir").path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    assert!(!paths.is_empty(), "no golden captures (*.bin) in {}", dir.display());
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let rows = split_rows(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, rows)
        })
        .collect()
}

/// Framing per row: u64 BE lsn, u32 BE xid, u32 BE length, then the bytes.
pub fn split_rows(mut bytes: &[u8]) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < 16 {
            return Err(format!("row {} header truncated ({} bytes left)", rows.len(), bytes.len()));
        }
        let lsn = u64::from_be_bytes(bytes[..8].try_into().unwrap());
        let xid = u32::from_be_bytes(bytes[8..12].try_into().unwrap());
        let len = u32::from_be_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let data = bytes.get(16..16 + len).ok_or_else(|| format!("row {} data truncated", rows.len()))?;
        rows.push(Row { lsn, xid, data: data.to_vec() });
        bytes = &bytes[16 + len..];
    }
    Ok(rows)
}

/// Every distinct message of the golden captures with the stream state it
/// arrives in (decided by one Parser per capture), followed by the hand-built
/// corpus. Byte-identical messages in the same state (the same change seen
/// under several option sets) are kept once: they cannot behave differently.
pub fn all_messages() -> Vec<(String, bool, Vec<u8>)> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (name, rows) in load_captures() {
        let mut parser = pgoutput_proto::Parser::new();
        for (i, row) in rows.iter().enumerate() {
            let in_stream = parser.in_stream();
            parser.parse(&row.data).unwrap_or_else(|e| panic!("{name} row {i}: {e}"));
            if seen.insert((in_stream, row.data.clone())) {
                out.push((format!("{name} row {i}"), in_stream, row.data.clone()));
            }
        }
    }
    for (name, in_stream, bytes) in hand_built_corpus() {
        out.push((format!("hand-built {name} (in stream: {in_stream})"), in_stream, bytes));
    }
    out
}
