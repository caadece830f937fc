//! `pgoutput_arrow::Changes` to the dict that `pgoutput_arrow.Changes` wraps: every table
//! as a native `ArrowTable` (exported to pyarrow without copying).

use arrow_array::RecordBatch;
use pgoutput_arrow::Changes;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::tables::ArrowTable;

fn one(batch: RecordBatch) -> ArrowTable {
    ArrowTable::new(batch.schema(), vec![batch])
}

/// `{"tables": {name: ArrowTable}, "table_versions": {name: [ArrowTable, ...]},
/// "truncates": ArrowTable, "messages": ArrowTable, "transactions": ArrowTable}`.
pub fn to_dict(py: Python<'_>, changes: Changes) -> PyResult<Bound<'_, PyDict>> {
    let tables = PyDict::new(py);
    for (name, table) in changes.tables {
        tables.set_item(name, ArrowTable::new(table.schema, table.batches))?;
    }
    let versions = PyDict::new(py);
    for (name, list) in changes.table_versions {
        let out = PyList::empty(py);
        for version in list {
            out.append(ArrowTable::new(version.schema, version.batches))?;
        }
        versions.set_item(name, out)?;
    }
    let dict = PyDict::new(py);
    dict.set_item("tables", tables)?;
    dict.set_item("table_versions", versions)?;
    dict.set_item("truncates", one(changes.truncates))?;
    dict.set_item("messages", one(changes.messages))?;
    dict.set_item("transactions", one(changes.transactions))?;
    Ok(dict)
}
