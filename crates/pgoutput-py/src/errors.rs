//! Rust errors to the exception hierarchy of `pgoutput_arrow.exceptions`, in one place.

use std::any::Any;

use pgoutput_arrow::DecodeError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// An instance of `pgoutput_arrow.exceptions.<class>(message, **attributes)` as a `PyErr`.
pub fn new_error(
    py: Python<'_>,
    class: &str,
    message: String,
    attributes: &[(&str, Option<u64>)],
) -> PyErr {
    new_error_with(py, class, message, |kwargs| {
        for (name, value) in attributes {
            kwargs.set_item(name, value)?;
        }
        Ok(())
    })
}

fn new_error_with(
    py: Python<'_>,
    class: &str,
    message: String,
    fill: impl FnOnce(&Bound<'_, PyDict>) -> PyResult<()>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = py.import("pgoutput_arrow.exceptions")?.getattr(class)?;
        let kwargs = PyDict::new(py);
        fill(&kwargs)?;
        Ok(PyErr::from_value(
            class.call((message.clone(),), Some(&kwargs))?,
        ))
    };
    // If the exceptions module cannot be imported the package is broken; still say what failed.
    build().unwrap_or_else(|import_error| {
        PyRuntimeError::new_err(format!(
            "{message} (and pgoutput_arrow.exceptions failed: {import_error})"
        ))
    })
}

/// Maps a decoder error to the exception class of its kind, with its location as attributes.
pub fn decode_error(py: Python<'_>, err: DecodeError) -> PyErr {
    let message = err.to_string();
    match err {
        DecodeError::Parse { lsn, index, source } => {
            new_error_with(py, "ParseError", message, |kw| {
                kw.set_item("lsn", lsn)?;
                kw.set_item("index", index)?;
                kw.set_item("offset", source.offset())
            })
        }
        DecodeError::Value {
            table,
            column,
            lsn,
            index,
            offset,
            ..
        } => new_error_with(py, "DecodeValueError", message, |kw| {
            kw.set_item("lsn", lsn)?;
            kw.set_item("table", table)?;
            kw.set_item("column", column)?;
            kw.set_item("index", index)?;
            kw.set_item("offset", offset)
        }),
        DecodeError::UnknownRelation { relation_id, lsn } => {
            new_error_with(py, "UnknownRelationError", message, |kw| {
                kw.set_item("lsn", lsn)?;
                kw.set_item("relation_id", relation_id)
            })
        }
        DecodeError::Protocol { lsn, index, .. } => new_error(
            py,
            "ProtocolError",
            message,
            &[("lsn", Some(lsn)), ("index", Some(index))],
        ),
        DecodeError::Copy { table, row, column, offset, .. } => new_error_with(py, "CopyDataError", message, |kw| {
            kw.set_item("table", table)?;
            kw.set_item("row", row)?;
            kw.set_item("column", column)?;
            kw.set_item("offset", offset)
        }),
        DecodeError::Spill(_) => new_error(py, "SpillError", message, &[]),
        DecodeError::Schema { table, column, .. } => {
            new_error_with(py, "SchemaError", message, |kw| {
                kw.set_item("table", table)?;
                kw.set_item("column", column)
            })
        }
        DecodeError::Input(_) => new_error(py, "CaptureError", message, &[]),
        other => new_error(py, "PgoutputError", message, &[("lsn", other.lsn())]),
    }
}

/// A panic caught at the boundary: a bug, reported as an exception instead of a crash.
pub fn panic_error(py: Python<'_>, payload: Box<dyn Any + Send>) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    new_error(
        py,
        "PgoutputError",
        format!("internal error in the decoder (a bug, please report it): {what}; this Decoder cannot be used any more"),
        &[],
    )
}
