//! Everything a decoder produced, as whole tables: the batches handed out, gathered per
//! table and brought to one schema per table (see [`unify`](crate::unify())).

use std::collections::{BTreeMap, HashMap};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_select::concat::concat_batches;

use crate::catalog::Catalog;
use crate::error::DecodeError;
use crate::meta::{messages_schema, transactions_schema, truncates_schema};
use crate::output::{Changes, Output, Table, TableVersion};
use crate::table::{column_fields, table_schema};
use crate::types::{ColumnBuilder, TypeOptions};
use crate::unify::{conform, unify_schemas};

pub(crate) fn assemble(
    catalog: &Catalog,
    types: &TypeOptions,
    arrived: bool,
    outputs: Vec<Output>,
) -> Result<Changes, DecodeError> {
    // Rows of a table in the order they came out (commit order), whatever their version.
    let mut in_order: Vec<(String, u32, RecordBatch)> = Vec::new();
    let mut by_version: HashMap<(String, u32), Vec<RecordBatch>> = HashMap::new();
    let (mut truncates, mut messages, mut transactions) = (Vec::new(), Vec::new(), Vec::new());
    for output in outputs {
        match output {
            Output::Table { name, version, batch } => {
                by_version.entry((name.clone(), version)).or_default().push(batch.clone());
                in_order.push((name, version, batch));
            }
            Output::Truncates(b) => truncates.push(b),
            Output::Messages(b) => messages.push(b),
            Output::Transactions(b) => transactions.push(b),
        }
    }
    let mut tables: BTreeMap<String, Table> = BTreeMap::new();
    let mut table_versions = BTreeMap::new();
    for (name, ids) in catalog.tables() {
        let mut versions = Vec::new();
        for &id in ids {
            let rel = catalog.version(id);
            let batches = by_version.remove(&(name.to_string(), rel.version)).unwrap_or_default();
            // Definitions that only an aborted streamed transaction had are left out.
            if batches.is_empty() && !catalog.was_active(id) {
                continue;
            }
            let schema = match batches.first() {
                Some(b) => b.schema(),
                None => {
                    let builders: Vec<ColumnBuilder> = rel.columns.iter().map(|c| ColumnBuilder::new(&c.ty, types)).collect();
                    table_schema(rel, &column_fields(rel, &builders), arrived)
                }
            };
            versions.push((id, TableVersion { version: rel.version, schema, batches }));
        }
        if versions.is_empty() {
            continue;
        }
        // Unify towards the definition in force last: move it to the end.
        let newest = catalog.newest(ids);
        let mut schemas: Vec<SchemaRef> =
            versions.iter().filter(|(id, _)| Some(*id) != newest).map(|(_, v)| v.schema.clone()).collect();
        schemas.extend(versions.iter().filter(|(id, _)| Some(*id) == newest).map(|(_, v)| v.schema.clone()));
        let schema = unify_schemas(&schemas)?;
        tables.insert(name.to_string(), Table { schema, batches: Vec::new() });
        table_versions.insert(name.to_string(), versions.into_iter().map(|(_, v)| v).collect());
    }
    for (name, _, batch) in in_order {
        if let Some(table) = tables.get_mut(&name) {
            let batch = conform(&batch, &table.schema)?;
            table.batches.push(batch);
        }
    }
    let concat = |schema: SchemaRef, batches: Vec<RecordBatch>, what: &str| {
        concat_batches(&schema, &batches).map_err(|e| DecodeError::arrow(what, e))
    };
    Ok(Changes {
        tables,
        table_versions,
        truncates: concat(truncates_schema(arrived), truncates, "the truncates table")?,
        messages: concat(messages_schema(arrived), messages, "the messages table")?,
        transactions: concat(transactions_schema(), transactions, "the transactions table")?,
    })
}
