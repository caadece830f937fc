//! A bounds-checked reader over one message: every read checks the remaining
//! length and reports the byte offset it failed at, so no input can panic.

use crate::error::ParseError;

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    #[inline]
    pub(crate) fn offset(&self) -> usize {
        self.pos
    }

    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ParseError> {
        if self.remaining() < n {
            return Err(self.truncated(n, what));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    #[cold]
    fn truncated(&self, needed: usize, what: &'static str) -> ParseError {
        ParseError::Truncated { offset: self.pos, expected: what, needed, available: self.remaining() }
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ParseError> {
        let b = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    #[inline]
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, ParseError> {
        Ok(self.array::<1>(what)?[0])
    }

    #[inline]
    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16, ParseError> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }

    #[inline]
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, ParseError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    #[inline]
    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, ParseError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    #[inline]
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, ParseError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    #[inline]
    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, ParseError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// A NUL-terminated string, UTF-8 (the encoding of every database we support
    /// for logical replication consumers; anything else is reported, not guessed).
    pub(crate) fn cstr(&mut self, what: &'static str) -> Result<&'a str, ParseError> {
        let start = self.pos;
        let rest = &self.buf[start..];
        let Some(nul) = rest.iter().position(|&b| b == 0) else {
            return Err(ParseError::UnterminatedString { offset: start, expected: what });
        };
        let s = std::str::from_utf8(&rest[..nul])
            .map_err(|_| ParseError::InvalidUtf8 { offset: start, expected: what })?;
        self.pos = start + nul + 1;
        Ok(s)
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Moves past `n` bytes that the caller checked are there (at most `remaining()`).
    pub(crate) fn skip(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
    }

    /// The bytes read since `start` (an earlier offset).
    pub(crate) fn slice_from(&self, start: usize) -> &'a [u8] {
        &self.buf[start.min(self.pos)..self.pos]
    }

    pub(crate) fn finish(&self) -> Result<(), ParseError> {
        if self.remaining() != 0 {
            return Err(ParseError::TrailingBytes { offset: self.pos, count: self.remaining() });
        }
        Ok(())
    }
}
