//! The pgoutput wire protocol alone: borrowed, zero-copy decoding of every
//! logical replication message (protocol versions 1 to 4) and of the
//! walsender's CopyData frames, the framing of transactions ([`TxnFraming`]) and the
//! positions of a replication session ([`SessionPositions`]). No Arrow, no I/O.
#![forbid(unsafe_code)]

mod cursor;
pub mod encode;
mod error;
mod framing;
mod parser;
pub mod peek;
mod session;
mod types;
mod walsender;

pub use error::ParseError;
pub use framing::{in_stream_block, Framed, FramingError, Outcome, StreamAborted, TxnFraming, TRANSACTION_END_KINDS};
pub use parser::{parse_message, parse_row_change, Parser};
pub use session::{AckBeyond, SessionPositions, OUTPUT_SETTINGS};
pub use types::*;
pub use walsender::{parse_copy_data, PrimaryKeepalive, ReplicationMessage, StandbyStatusUpdate, XLogData};
