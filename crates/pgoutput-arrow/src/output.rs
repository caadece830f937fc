//! What a decoder hands out: batches as they complete ([`Output`]) and, at the end,
//! everything as whole tables ([`Changes`]). Types only; they are built by the decoder
//! and `assemble`.

use std::collections::BTreeMap;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_select::concat::concat_batches;

use crate::error::DecodeError;

/// A batch that is complete.
#[derive(Debug, Clone)]
pub enum Output {
    /// Changes of one relation version: `name` is "schema.table", `version` counts
    /// its distinct definitions (1 for the first Relation message seen).
    Table { name: String, version: u32, batch: RecordBatch },
    Truncates(RecordBatch),
    Messages(RecordBatch),
    Transactions(RecordBatch),
}

/// A table's changes under one schema.
#[derive(Debug, Clone)]
pub struct Table {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl Table {
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// All batches as one.
    pub fn concat(&self) -> Result<RecordBatch, DecodeError> {
        concat_batches(&self.schema, &self.batches).map_err(|e| DecodeError::arrow("a table", e))
    }
}

/// The changes of one definition of a table.
#[derive(Debug, Clone)]
pub struct TableVersion {
    pub version: u32,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

/// Everything decoded, by table.
#[derive(Debug, Clone)]
pub struct Changes {
    /// Per "schema.table": every version's rows under the newest schema (see [`unify`](crate::unify())).
    pub tables: BTreeMap<String, Table>,
    /// Per "schema.table": each version's rows under its own schema, oldest first.
    pub table_versions: BTreeMap<String, Vec<TableVersion>>,
    pub truncates: RecordBatch,
    pub messages: RecordBatch,
    pub transactions: RecordBatch,
}
