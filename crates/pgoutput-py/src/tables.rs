//! Native Arrow objects handed to Python. They implement the Arrow PyCapsule interface, so
//! pyarrow (`pa.table(obj)`, `pa.record_batch(obj)`), polars and DuckDB import them without
//! copying; the Python package wraps them into pyarrow objects straight away.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

use crate::arrow_ffi;

/// A table: a schema and the record batches that hold its rows.
#[pyclass(name = "ArrowTable", module = "pgoutput_arrow._internal", frozen)]
pub struct ArrowTable {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl ArrowTable {
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self { schema, batches }
    }
}

#[pymethods]
impl ArrowTable {
    /// Exports the batches as an `arrow_array_stream` capsule. `requested_schema` is
    /// accepted and ignored, as the interface allows: the data has one schema.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        arrow_ffi::stream_capsule(py, self.schema.clone(), self.batches.clone())
    }

    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        arrow_ffi::schema_capsule(py, &self.schema)
    }

    #[getter]
    fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    fn __len__(&self) -> usize {
        self.num_rows()
    }

    fn __repr__(&self) -> String {
        format!(
            "ArrowTable({} rows, {} columns, {} batches)",
            self.num_rows(),
            self.schema.fields().len(),
            self.batches.len()
        )
    }
}

/// One record batch.
#[pyclass(name = "ArrowBatch", module = "pgoutput_arrow._internal", frozen)]
pub struct ArrowBatch {
    batch: RecordBatch,
}

impl ArrowBatch {
    pub fn new(batch: RecordBatch) -> Self {
        Self { batch }
    }
}

#[pymethods]
impl ArrowBatch {
    /// Exports the batch as the `(arrow_schema, arrow_array)` capsules of a struct array.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _ = requested_schema;
        arrow_ffi::array_capsules(py, &self.batch)
    }

    /// Exports the batch as a stream of one batch.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        arrow_ffi::stream_capsule(py, self.batch.schema(), vec![self.batch.clone()])
    }

    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        arrow_ffi::schema_capsule(py, &self.batch.schema())
    }

    #[getter]
    fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }

    fn __repr__(&self) -> String {
        format!(
            "ArrowBatch({} rows, {} columns)",
            self.batch.num_rows(),
            self.batch.num_columns()
        )
    }
}
