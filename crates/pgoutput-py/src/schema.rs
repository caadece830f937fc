//! Schema evolution for Python: pgoutput-arrow's `unify_schemas` and `conform` on pyarrow
//! objects, so that sinks that write a table's batches over time (the CLI's Parquet
//! directories) bring every version to one schema by the decoder's own rules.

use std::sync::Arc;

use arrow_schema::SchemaRef;
use pgoutput_arrow::{align_columns as align, conform as conform_batch, unify_schemas as unify};
use pyo3::prelude::*;

use crate::arrow_ffi;
use crate::errors::decode_error;
use crate::tables::ArrowTable;

/// The schema every one of `schemas` (objects with `__arrow_c_schema__`, oldest first)
/// can be brought to: see pgoutput_arrow::unify_schemas.
#[pyfunction]
pub fn unify_schemas(py: Python<'_>, schemas: Vec<Bound<'_, PyAny>>) -> PyResult<ArrowTable> {
    let schemas: Vec<SchemaRef> =
        schemas.iter().map(|s| arrow_ffi::import_schema(s).map(Arc::new)).collect::<PyResult<_>>()?;
    let schema = unify(&schemas).map_err(|e| decode_error(py, e))?;
    Ok(ArrowTable::new(schema, Vec::new()))
}

/// For each `(name, type)` of `columns` (a table's definition now), the index of the one of
/// `previous` (an earlier definition) it continues, or None (added): the decoder's rule for
/// a column renamed or dropped between two Relation messages (pgoutput_arrow::align_columns).
#[pyfunction]
pub fn align_columns(previous: Vec<(String, String)>, columns: Vec<(String, String)>) -> Vec<Option<usize>> {
    align(&previous, &columns)
}

/// The batches of `data` (an object with `__arrow_c_stream__`) brought to `schema`.
#[pyfunction]
pub fn conform(py: Python<'_>, data: &Bound<'_, PyAny>, schema: &Bound<'_, PyAny>) -> PyResult<ArrowTable> {
    let target: SchemaRef = Arc::new(arrow_ffi::import_schema(schema)?);
    let reader = arrow_ffi::import_stream(data)?;
    let mut batches = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("reading the batches: {e}")))?;
        batches.push(conform_batch(&batch, &target).map_err(|e| decode_error(py, e))?);
    }
    Ok(ArrowTable::new(target, batches))
}


/// Every column of `data` (an object with `__arrow_c_stream__`) as PostgreSQL's text output
/// of its values (see pgoutput_arrow::types::to_pg_text): what the text fallback of
/// unify_schemas shows, and what tests compare with PostgreSQL's own output.
#[pyfunction]
pub fn pg_text(data: &Bound<'_, PyAny>) -> PyResult<ArrowTable> {
    use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader};
    use arrow_schema::{DataType, Field, Schema};
    let reader = arrow_ffi::import_stream(data)?;
    let schema = reader.schema();
    let fields: Vec<Field> = schema.fields().iter().map(|f| Field::new(f.name(), DataType::Utf8, true)).collect();
    let target = Arc::new(Schema::new(fields));
    let mut batches = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("reading the batches: {e}")))?;
        let columns = batch
            .columns()
            .iter()
            .map(|c| {
                pgoutput_arrow::to_pg_text(c.as_ref())
                    .map(|t| Arc::new(t) as ArrayRef)
                    .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.message))
            })
            .collect::<PyResult<Vec<_>>>()?;
        batches.push(
            RecordBatch::try_new(target.clone(), columns)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?,
        );
    }
    Ok(ArrowTable::new(target, batches))
}
