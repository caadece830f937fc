//! The one error type of this crate. Every message says what went wrong and where:
//! the message number, its LSN (written `X/Y`), and table, column and byte offset
//! when there is one.

use std::io;

use arrow_schema::ArrowError;
use pgoutput_proto::{Lsn, ParseError};

/// Why decoding stopped. The LSNs are u64 positions, displayed as PostgreSQL
/// writes them (`X/Y`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A message could not be parsed. The message is skipped; the decoder can go on.
    #[error("message #{index} at LSN {}: {source}", Lsn(*lsn))]
    Parse {
        lsn: u64,
        /// Number of the message in the decoded stream (0 for the first pushed).
        index: u64,
        #[source]
        source: ParseError,
    },
    /// A value could not be decoded into its column's Arrow type. The transaction it
    /// belongs to was partly decoded, so the decoder stops here (later calls fail).
    #[error("column {column:?} of {table} in message #{index} at LSN {}, byte offset {offset}: {message}", Lsn(*lsn))]
    Value {
        table: String,
        column: String,
        lsn: u64,
        message: String,
        /// Number of the message in the decoded stream.
        index: u64,
        /// Byte offset of the value within its message.
        offset: usize,
    },
    /// A change names a relation id that no Relation message announced. The message
    /// is skipped; the decoder can go on.
    #[error("relation id {relation_id} at LSN {} was not announced by a Relation message before it (did decoding start in the middle of the stream?)", Lsn(*lsn))]
    UnknownRelation { relation_id: u32, lsn: u64 },
    /// The binary COPY data of a snapshot is malformed or truncated, or a value in it could
    /// not be decoded. `row` counts from 1 (the row being read), `offset` is the byte offset
    /// within the whole COPY data.
    #[error("COPY data of {table}, row {row}{}, byte offset {offset}: {message}", column.as_ref().map(|c| format!(", column {c:?}")).unwrap_or_default())]
    Copy { table: String, row: u64, column: Option<String>, offset: u64, message: String },
    /// A message that is well formed but does not fit the stream so far (a Commit
    /// without Begin, a Stream Commit for an unknown xid, a tuple with the wrong number
    /// of columns). The message is skipped; the decoder can go on.
    #[error("message #{index} ({kind}) at LSN {}: {message}", Lsn(*lsn))]
    Protocol { lsn: u64, index: u64, kind: &'static str, message: String },
    /// Writing or reading the spill file of a large transaction failed.
    #[error("spilling buffered changes to disk: {0}")]
    Spill(#[from] io::Error),
    /// The versions of a table cannot be brought to one schema.
    #[error("unifying the versions of {table}: column {column:?}: {message}")]
    Schema { table: String, column: String, message: String },
    /// Arrow refused to assemble a batch; a bug of this crate if it ever happens.
    #[error("assembling {what}: {source}")]
    Arrow {
        what: String,
        #[source]
        source: ArrowError,
    },
    /// The input given to `push_array` is not a list of messages (length mismatch, null).
    #[error("invalid input: {0}")]
    Input(String),
    /// An earlier error left the decoder in a state it cannot continue from.
    #[error("the decoder stopped at an earlier error: {0}")]
    Stopped(String),
}

impl DecodeError {
    /// The LSN of the message the error is about, when there is one.
    pub fn lsn(&self) -> Option<u64> {
        match self {
            DecodeError::Parse { lsn, .. }
            | DecodeError::Value { lsn, .. }
            | DecodeError::UnknownRelation { lsn, .. }
            | DecodeError::Protocol { lsn, .. } => Some(*lsn),
            _ => None,
        }
    }

    pub(crate) fn arrow(what: impl Into<String>, source: ArrowError) -> Self {
        DecodeError::Arrow { what: what.into(), source }
    }

    pub(crate) fn boxed_arrow(what: impl Into<String>, source: ArrowError) -> Box<Self> {
        Box::new(Self::arrow(what, source))
    }
}

/// What the decoder's internal steps return: the error boxed, so that the
/// `Result` of each step on the hot path fits in a register.
pub(crate) type Fallible<T> = Result<T, Box<DecodeError>>;

impl From<io::Error> for Box<DecodeError> {
    fn from(e: io::Error) -> Self {
        Box::new(DecodeError::Spill(e))
    }
}
