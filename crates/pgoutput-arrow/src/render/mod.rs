//! Decoded changes as text: one JSON object per change (`jsonl`), or aligned lines for a
//! person (`pretty`), written straight from the Arrow batches into one output buffer.
//!
//! [`Renderer::render`] takes one group of batches (whole committed transactions: tables,
//! truncates, messages), puts its changes in commit order (`_commit_lsn`, then `_seq`; a
//! non-transactional message by its own LSN) and writes them. It keeps what spans groups
//! (the pretty format's open transaction and column width), so a stream is rendered
//! batch by batch in bounded memory. [`rows_json`] writes every column of a batch, one
//! object per row, by the same value rules.
//!
//! A jsonl object has the keys `op` (insert, update, delete, truncate, message), `schema`,
//! `table`, `lsn` and `commit_lsn` (`X/Y`), `commit_ts` (ISO 8601, UTC), `xid`, `new`, `old`
//! (the old key or row, when the server sent one), `unchanged` (columns whose TOAST value
//! an UPDATE left unchanged: null in `new`, but not NULL); a truncate adds `cascade` and
//! `restart_identity`, a message `prefix`, `content` (hex) and `transactional`. A value no
//! Arrow value of its column's type could hold (the `_special` column) is PostgreSQL's text
//! in the value's place. The value rules are in [`value`]'s documentation.

mod changes;
mod sources;
mod text;
mod value;

pub use changes::{first_changes, rows_json, Format, Group, Renderer};
