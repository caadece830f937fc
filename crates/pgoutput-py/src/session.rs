//! `_internal.SessionPositions`: pgoutput-proto's [`SessionPositions`] for the live stream
//! (what was received, handed out, acknowledged and confirmed, and where to resume).

use pgoutput_proto::SessionPositions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

#[pyclass(name = "SessionPositions", module = "pgoutput_arrow._internal")]
pub struct PySessionPositions(SessionPositions);

#[pymethods]
impl PySessionPositions {
    #[new]
    fn new(start: u64) -> Self {
        PySessionPositions(SessionPositions::new(start))
    }

    fn server_confirmed(&mut self, lsn: u64) {
        self.0.server_confirmed(lsn);
    }

    fn server_end(&mut self, end: u64) {
        self.0.server_end(end);
    }

    #[pyo3(signature = (prepared_floor))]
    fn resume_lsn(&self, prepared_floor: Option<u64>) -> u64 {
        self.0.resume_lsn(prepared_floor)
    }

    fn reconnecting(&mut self) {
        self.0.reconnecting();
    }

    #[pyo3(signature = (safe, prepared_floor, empty))]
    fn handed_out(&mut self, safe: u64, prepared_floor: Option<u64>, empty: bool) -> (u64, u64) {
        self.0.handed_out(safe, prepared_floor, empty)
    }

    fn snapshot_done(&mut self, lsn: u64, empty: bool) {
        self.0.snapshot_done(lsn, empty);
    }

    fn yielded(&mut self, ack_lsn: u64) {
        self.0.yielded(ack_lsn);
    }

    #[pyo3(signature = (lsn=None))]
    fn ack(&mut self, lsn: Option<u64>) -> PyResult<()> {
        self.0.ack(lsn).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn idle_advance(&mut self, idle: bool) {
        self.0.idle_advance(idle);
    }

    #[pyo3(signature = (prepared_floor))]
    fn status(&mut self, prepared_floor: Option<u64>) -> (u64, u64) {
        self.0.status(prepared_floor)
    }

    #[getter]
    fn floor(&self) -> u64 {
        self.0.floor()
    }

    #[getter]
    fn emitted(&self) -> u64 {
        self.0.emitted()
    }

    #[getter]
    fn acked(&self) -> u64 {
        self.0.acked()
    }

    #[getter]
    fn last_yielded(&self) -> u64 {
        self.0.last_yielded()
    }

    #[getter]
    fn confirmed(&self) -> u64 {
        self.0.confirmed()
    }

    #[getter]
    fn received(&self) -> u64 {
        self.0.received()
    }

    #[getter]
    fn wal_end(&self) -> u64 {
        self.0.wal_end()
    }

    #[getter]
    fn dirty(&self) -> bool {
        self.0.dirty()
    }
}
