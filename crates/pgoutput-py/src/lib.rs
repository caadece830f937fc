//! The `pgoutput_arrow._internal` extension module: the pgoutput-arrow decoder driven from
//! Python. Only conversions and error mapping live here; decoding is pgoutput-arrow's.
//! Arrow data crosses the boundary through the Arrow PyCapsule interface, without copying.

mod arrow_ffi;
mod changes;
mod decoder;
mod errors;
mod input;
mod lsn;
mod render;
mod schema;
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
    m.add_function(wrap_pyfunction!(schema::unify_schemas, m)?)?;
    m.add_function(wrap_pyfunction!(schema::conform, m)?)?;
    m.add_function(wrap_pyfunction!(schema::pg_text, m)?)?;
    m.add_function(wrap_pyfunction!(render::rows_json, m)?)?;
    m.add_function(wrap_pyfunction!(lsn::lsn_to_int, m)?)?;
    m.add_function(wrap_pyfunction!(lsn::lsn_to_str, m)?)?;
    m.add("META_COLUMNS", pgoutput_arrow::META_COLUMNS.to_vec())?;
    m.add("ARRIVED_COLUMNS", pgoutput_arrow::ARRIVED_COLUMNS.to_vec())?;
    Ok(())
}
