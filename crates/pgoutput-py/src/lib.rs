//! The `pgoutput_arrow._internal` extension module: the pgoutput-arrow decoder driven from
//! Python. Only conversions and error mapping live here; decoding is pgoutput-arrow's.
//! Arrow data crosses the boundary through the Arrow PyCapsule interface, without copying.

mod arrow_ffi;
mod canonical;
mod changes;
mod copyout;
mod decoder;
mod errors;
mod lsn;
mod render;
mod schema;
mod session;
mod tables;
mod walreceiver;

use pyo3::prelude::*;

#[pymodule]
fn _internal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<decoder::PyDecoder>()?;
    m.add_class::<tables::ArrowTable>()?;
    m.add_class::<tables::ArrowBatch>()?;
    m.add_class::<render::PyRenderer>()?;
    m.add_class::<walreceiver::WalReceiver>()?;
    m.add_class::<walreceiver::TxnTracker>()?;
    m.add_class::<session::PySessionPositions>()?;
    m.add_class::<copyout::PyCopyDecoder>()?;
    m.add_function(wrap_pyfunction!(schema::unify_schemas, m)?)?;
    m.add_function(wrap_pyfunction!(schema::conform, m)?)?;
    m.add_function(wrap_pyfunction!(schema::align_columns, m)?)?;
    m.add_function(wrap_pyfunction!(schema::pg_text, m)?)?;
    m.add_function(wrap_pyfunction!(render::rows_json, m)?)?;
    m.add_function(wrap_pyfunction!(render::first_changes, m)?)?;
    m.add_function(wrap_pyfunction!(lsn::lsn_to_int, m)?)?;
    m.add_function(wrap_pyfunction!(lsn::lsn_to_str, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::canonical_stream, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::partition_summary, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::relation_schemas, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::relation_schema, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::describe_messages, m)?)?;
    m.add("END_KINDS", pyo3::types::PyBytes::new(m.py(), pgoutput_arrow::canonical::END_KINDS))?;
    m.add("CHANGE_KINDS", pyo3::types::PyBytes::new(m.py(), pgoutput_arrow::canonical::CHANGE_KINDS))?;
    m.add("CATALOG_KINDS", pyo3::types::PyBytes::new(m.py(), pgoutput_arrow::canonical::CATALOG_KINDS))?;
    m.add("FRAMING_KINDS", pyo3::types::PyBytes::new(m.py(), pgoutput_arrow::canonical::FRAMING_KINDS))?;
    m.add("META_COLUMNS", pgoutput_arrow::META_COLUMNS.to_vec())?;
    m.add("OUTPUT_SETTINGS", pgoutput_proto::OUTPUT_SETTINGS.to_vec())?;
    m.add("ARRIVED_COLUMNS", pgoutput_arrow::ARRIVED_COLUMNS.to_vec())?;
    Ok(())
}
