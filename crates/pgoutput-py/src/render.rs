//! `_internal.Renderer` and `rows_json`: pgoutput-arrow's text formats (jsonl, pretty) on
//! pyarrow batches. The batches are imported without copying; rendering releases the GIL.

use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow_array::RecordBatch;
use pgoutput_arrow::render::{first_changes as first, rows_json as render_rows, Format, Renderer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::arrow_ffi;
use crate::errors::panic_error;

/// Bytes of text handed to Python at a time: memory stays bounded whatever the group.
const PIECE: usize = 1 << 20;

fn arrow_error(e: arrow_schema::ArrowError) -> PyErr {
    PyValueError::new_err(format!("rendering the changes: {e}"))
}

#[pyclass(name = "Renderer", module = "pgoutput_arrow._internal")]
pub struct PyRenderer {
    inner: Renderer,
    out: Vec<u8>,
}

#[pymethods]
impl PyRenderer {
    #[new]
    #[pyo3(signature = (format, *, max_chars = 64))]
    fn new(format: &str, max_chars: usize) -> PyResult<Self> {
        let format = match format {
            "jsonl" => Format::Jsonl,
            "pretty" => Format::Pretty,
            other => return Err(PyValueError::new_err(format!("format must be 'jsonl' or 'pretty', not {other:?}"))),
        };
        Ok(PyRenderer { inner: Renderer::new(format, max_chars), out: Vec::new() })
    }

    /// Writes the changes of one group of batches in commit order, as UTF-8 text, by
    /// calling `write` with pieces of about a megabyte; returns how many changes.
    fn render<'py>(
        &mut self,
        py: Python<'py>,
        tables: Vec<(String, Bound<'py, PyAny>)>,
        truncates: Vec<Bound<'py, PyAny>>,
        messages: Vec<Bound<'py, PyAny>>,
        write: Bound<'py, PyAny>,
    ) -> PyResult<usize> {
        let tables: Vec<(String, RecordBatch)> =
            tables.iter().map(|(n, b)| Ok((n.clone(), arrow_ffi::import_batch(b)?))).collect::<PyResult<_>>()?;
        let truncates: Vec<RecordBatch> = truncates.iter().map(arrow_ffi::import_batch).collect::<PyResult<_>>()?;
        let messages: Vec<RecordBatch> = messages.iter().map(arrow_ffi::import_batch).collect::<PyResult<_>>()?;
        let inner = &mut self.inner;
        let result = py.detach(|| {
            catch_unwind(AssertUnwindSafe(|| {
                let tables: Vec<(&str, &RecordBatch)> = tables.iter().map(|(n, b)| (n.as_str(), b)).collect();
                let truncates: Vec<&RecordBatch> = truncates.iter().collect();
                let messages: Vec<&RecordBatch> = messages.iter().collect();
                inner.group(&tables, &truncates, &messages)
            }))
        });
        let mut group = result.map_err(|payload| panic_error(py, payload))?.map_err(arrow_error)?;
        loop {
            self.out.clear();
            let (inner, out) = (&mut self.inner, &mut self.out);
            let done = py
                .detach(|| catch_unwind(AssertUnwindSafe(|| inner.write(&mut group, out, PIECE))))
                .map_err(|payload| panic_error(py, payload))?;
            if !self.out.is_empty() {
                write.call1((PyBytes::new(py, &self.out),))?;
            }
            if done {
                return Ok(group.len());
            }
        }
    }

    /// Pretty: the COMMIT line of the transaction still open (empty when none is).
    fn end_transaction<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        self.out.clear();
        self.inner.end_transaction(&mut self.out);
        PyBytes::new(py, &self.out)
    }
}

/// Every row of every batch of `data` (an object with `__arrow_c_stream__`) as a JSON
/// object of all its columns, one per line, by jsonl's value rules.
#[pyfunction]
pub fn rows_json<'py>(py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let reader = arrow_ffi::import_stream(data)?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(arrow_error)?;
        render_rows(&batch, &mut out).map_err(arrow_error)?;
    }
    Ok(PyBytes::new(py, &out))
}

/// pgoutput-dump's `--limit`: which rows of a group's batches are among its first `n`
/// changes in the order `Renderer` writes them, as (number of changes, None when they are
/// no more than `n`, else a list of kept-row flags per batch for `tables`, `truncates`
/// and `messages`).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn first_changes<'py>(
    py: Python<'py>,
    tables: Vec<Bound<'py, PyAny>>,
    truncates: Vec<Bound<'py, PyAny>>,
    messages: Vec<Bound<'py, PyAny>>,
    n: usize,
) -> PyResult<(usize, Option<[Vec<Vec<bool>>; 3]>)> {
    fn refs(batches: &[RecordBatch]) -> Vec<&RecordBatch> {
        batches.iter().collect()
    }
    let import = |bs: &[Bound<'py, PyAny>]| bs.iter().map(arrow_ffi::import_batch).collect::<PyResult<Vec<RecordBatch>>>();
    let (tables, truncates, messages) = (import(&tables)?, import(&truncates)?, import(&messages)?);
    catch_unwind(AssertUnwindSafe(|| first(&refs(&tables), &refs(&truncates), &refs(&messages), n)))
        .map_err(|payload| panic_error(py, payload))?
        .map_err(arrow_error)
}
