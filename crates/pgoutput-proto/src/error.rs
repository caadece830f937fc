use thiserror::Error;

/// Why a message could not be decoded. Every variant carries the byte offset
/// within the message where decoding stopped.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseError {
    #[error("empty message: expected a message kind byte at offset 0")]
    Empty,
    #[error("unknown message kind {kind:?} (0x{byte:02x}) at offset {offset}: expected {expected}")]
    UnknownKind { offset: usize, byte: u8, kind: char, expected: &'static str },
    #[error("truncated message at offset {offset}: expected {expected} ({needed} bytes), {available} left")]
    Truncated { offset: usize, expected: &'static str, needed: usize, available: usize },
    #[error("unterminated string at offset {offset}: expected {expected} ending in NUL")]
    UnterminatedString { offset: usize, expected: &'static str },
    #[error(
        "invalid UTF-8 at offset {offset} in {expected} (PostgreSQL sends names in the session's client_encoding: \
         read a stream, or take a capture, with client_encoding UTF8)"
    )]
    InvalidUtf8 { offset: usize, expected: &'static str },
    #[error("{count} trailing bytes at offset {offset} after a complete message")]
    TrailingBytes { offset: usize, count: usize },
    #[error("invalid {field} at offset {offset}: expected {expected}, found {found}")]
    InvalidValue { offset: usize, field: &'static str, expected: &'static str, found: String },
}

impl ParseError {
    /// Byte offset within the message at which decoding stopped.
    pub fn offset(&self) -> usize {
        match self {
            ParseError::Empty => 0,
            ParseError::UnknownKind { offset, .. }
            | ParseError::Truncated { offset, .. }
            | ParseError::UnterminatedString { offset, .. }
            | ParseError::InvalidUtf8 { offset, .. }
            | ParseError::TrailingBytes { offset, .. }
            | ParseError::InvalidValue { offset, .. } => *offset,
        }
    }
}
