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
