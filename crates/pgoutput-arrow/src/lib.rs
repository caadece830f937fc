//! From pgoutput messages to typed Arrow RecordBatches: one table per
//! published relation, with full change-data-capture metadata.
//!
//! ```text
//! bytes ─ pgoutput-proto ─▶ messages ─ Decoder ─▶ transactions ─▶ RecordBatches
//! ```
//!
//! # Output model
//! * **One table per relation**, keyed `"schema.table"` (an empty namespace in the
//!   Relation message is pg_catalog). Columns: the published columns in order,
//!   typed by [`ColumnBuilder`], then
//!   `_op` utf8 (`insert` | `update` | `delete`, and `snapshot` for the rows of an
//!   initial snapshot, see [`CopyDecoder`]), `_lsn` int64 (the LSN the change
//!   came with), `_commit_lsn` int64, `_commit_ts` timestamp\[us, UTC\], `_xid` int64
//!   (the top-level transaction), `_seq` int64 (the message's number in the decoded
//!   stream: ordering by `_commit_lsn` then `_seq` is commit order), `_before` struct
//!   of the old key ('K', non-key fields null) or old row ('O'), null when the
//!   change carried none, and `_unchanged` list<utf8>: the columns whose value is an
//!   unchanged TOAST value, null in the row (an empty list when none).
//!   A Delete has its old key / old row both in the columns and in `_before`.
//!   Field metadata: `pg.type_oid`, `pg.type_name`, `pg.typmod`, `pg.key`; schema
//!   metadata: `pg.relation_id`, `pg.replica_identity`, `pg.table`, `pg.version`.
//!   In [`EmitMode::Arrived`] two more columns follow: `_status` and `_subxid`.
//! * **Truncates**: `relations` list<utf8>, `cascade`, `restart_identity`, `_lsn`,
//!   `_commit_lsn`, `_commit_ts`, `_xid`, `_seq`.
//! * **Messages**: `prefix`, `content` binary, `transactional`, `_lsn` (the
//!   message's own LSN), `_commit_lsn`, `_commit_ts`, `_xid` (null when not
//!   transactional), `_seq`.
//! * **Transactions**: `xid`, `begin_lsn`, `commit_lsn`, `end_lsn`, `commit_ts`
//!   (when the outcome was decided), `origin`, `origin_lsn` (null for a streamed
//!   transaction: its Origin message comes before the commit and carries none), `gid`, `outcome`
//!   (`committed` | `aborted` | `prepared-committed` | `prepared-rolled-back`, and in
//!   Arrived mode `prepared` | `subtransaction-aborted`), `streamed`, `changes` (row
//!   changes emitted), `_seq` (of the message that decided the outcome).
//!
//! # Transactions
//! Only committed changes come out, in commit order (see [`Decoder`]). Buffered
//! messages are cheap slices of the input buffers; beyond
//! [`DecoderOptions::memory_limit`] the largest open transactions spill to a
//! temporary file.
#![forbid(unsafe_code)]

mod assemble;
pub mod canonical;
pub mod capture;
mod catalog;
pub mod copy;
mod decoder;
mod error;
mod idmap;
mod meta;
mod nulls;
mod options;
mod output;
pub mod render;
mod spill;
mod table;
mod txn;
pub mod types;
mod unify;

pub use catalog::align_columns;
pub use copy::{CopyDecoder, SnapshotPosition};
pub use decoder::Decoder;
pub use error::DecodeError;
pub use meta::{messages_schema, transactions_schema, truncates_schema};
pub use options::{DecoderOptions, EmitMode};
pub use output::{Changes, Output, Table, TableVersion};
pub use table::{meta_fields, ARRIVED_COLUMNS, META_COLUMNS};
pub use types::{
    builtin_type_name, interval_struct_fields, is_interval_struct, to_pg_text, ColumnBuilder, DateOrder, DatetimeRange, IntervalType,
    PgColumnType, Source, SpecialValues, TimeType, TimeZoneName, TypeOptions, UuidType, ValueError, DATE32_NEG_INFINITY,
    TIMESTAMP_NEG_INFINITY,
};
pub use unify::{conform, lossless, unify, unify_schemas};

/// PostgreSQL's LSN type, for displaying the u64 positions as `X/Y`.
pub use pgoutput_proto::Lsn;
