//! LSN text ↔ int and the metadata column names, from the crates, so that Python has one
//! home for each (pgoutput_proto::Lsn, pgoutput_arrow::META_COLUMNS).

use pgoutput_proto::Lsn;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// `'16/B374D848'` → `0x16B374D848`: PostgreSQL's text form of an LSN as an int.
#[pyfunction]
pub fn lsn_to_int(lsn: &str) -> PyResult<u64> {
    Lsn::from_ascii(lsn.trim().as_bytes())
        .map(|l| l.0)
        .ok_or_else(|| PyValueError::new_err(format!("not an LSN: {lsn:?} (expected X/Y with hexadecimal 32-bit X and Y)")))
}

/// `0x16B374D848` → `'16/B374D848'`.
#[pyfunction]
pub fn lsn_to_str(lsn: &Bound<'_, PyAny>) -> PyResult<String> {
    let value: u64 = lsn
        .extract()
        .map_err(|_| PyValueError::new_err(format!("not an LSN: {lsn} (expected an integer in [0, 2**64))")))?;
    Ok(Lsn(value).to_string())
}
