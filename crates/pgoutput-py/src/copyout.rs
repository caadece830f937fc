//! `_internal.CopyDecoder`: the rows of an initial snapshot, read with
//! `COPY (SELECT ...) TO STDOUT (FORMAT binary)` on a psycopg2 connection's `PGconn` and
//! decoded by pgoutput-arrow's [`CopyDecoder`], without a Python object per row.
//!
//! As `WalReceiver` does for the walsender, Python hands over the `PGconn *` and the
//! addresses of the libpq functions; the query is sent, its CopyData messages taken and
//! decoded here without the GIL, so that several connections read in parallel threads.

#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use arrow_buffer::Buffer;
use pgoutput_arrow::{CopyDecoder, DecodeError, SnapshotPosition};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::canonical::definition;
use crate::decoder::{decoder_options, parse_datetime_range};
use crate::errors::{decode_error, new_error, panic_error};
use crate::tables::{ArrowBatch, ArrowTable};

type SendQuery = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;
type GetResult = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type ResultStatus = unsafe extern "C" fn(*const c_void) -> c_int;
type ResultErrorMessage = unsafe extern "C" fn(*const c_void) -> *const c_char;
type Clear = unsafe extern "C" fn(*mut c_void);
type GetCopyData = unsafe extern "C" fn(*mut c_void, *mut *mut c_char, c_int) -> c_int;
type FreeMem = unsafe extern "C" fn(*mut c_void);
type ErrorMessage = unsafe extern "C" fn(*const c_void) -> *const c_char;

const PGRES_COMMAND_OK: c_int = 1;
const PGRES_COPY_OUT: c_int = 3;

/// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01 (UTC).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// CopyData messages are gathered into buffers of about this size before decoding: view
/// columns reference them, and few buffers mean few data blocks per batch.
const GATHER_BYTES: usize = 4 << 20;

#[derive(Clone, Copy)]
struct Libpq {
    conn: usize,
    send_query: SendQuery,
    get_result: GetResult,
    result_status: ResultStatus,
    result_error_message: ResultErrorMessage,
    clear: Clear,
    get_copy_data: GetCopyData,
    freemem: FreeMem,
    error_message: ErrorMessage,
}

/// Why a COPY could not be read: the server's or libpq's message.
struct CopyFailed(String);

impl Libpq {
    fn conn(&self) -> *mut c_void {
        self.conn as *mut c_void
    }

    fn connection_error(&self) -> String {
        // SAFETY: `conn` is the live PGconn (see `start`); PQerrorMessage returns a string
        // owned by the connection, valid until the next call on it, copied at once.
        let text = unsafe { CStr::from_ptr((self.error_message)(self.conn())) };
        let text = text.to_string_lossy().trim().to_string();
        if text.is_empty() { "the connection to the server was lost".into() } else { text }
    }

    /// Takes the results left (each freed); the first error message among them.
    fn drain_results(&self) -> Option<String> {
        let mut error = None;
        for _ in 0..16 {
            // SAFETY: as in `start`; PQgetResult returns NULL once the command is done.
            let res = unsafe { (self.get_result)(self.conn()) };
            if res.is_null() {
                break;
            }
            // SAFETY: `res` is a PGresult just returned, freed by PQclear right after.
            unsafe {
                let status = (self.result_status)(res);
                if status != PGRES_COMMAND_OK && status != PGRES_COPY_OUT && error.is_none() {
                    let text = CStr::from_ptr((self.result_error_message)(res)).to_string_lossy().trim().to_string();
                    error = Some(text);
                }
                (self.clear)(res);
            }
        }
        error
    }

    /// Sends `sql` (a `COPY ... TO STDOUT`) and waits for the server to start the COPY.
    fn start(&self, sql: &CStr) -> Result<(), CopyFailed> {
        // SAFETY: `conn` is the live PGconn of the psycopg2 connection that the Python caller
        // keeps open, idle and unused by any other thread while this decoder reads from it;
        // `sql` is a NUL-terminated string that outlives the call.
        if unsafe { (self.send_query)(self.conn(), sql.as_ptr()) } != 1 {
            return Err(CopyFailed(self.connection_error()));
        }
        // SAFETY: as above; a blocking connection waits for the first result.
        let res = unsafe { (self.get_result)(self.conn()) };
        if res.is_null() {
            return Err(CopyFailed(self.connection_error()));
        }
        // SAFETY: `res` is the PGresult just returned, freed by PQclear right after.
        let (status, message) = unsafe {
            let status = (self.result_status)(res);
            let message = CStr::from_ptr((self.result_error_message)(res)).to_string_lossy().trim().to_string();
            (self.clear)(res);
            (status, message)
        };
        if status != PGRES_COPY_OUT {
            let more = self.drain_results();
            let message = if message.is_empty() { more.unwrap_or_default() } else { message };
            return Err(CopyFailed(if message.is_empty() {
                format!("the server did not start a COPY (result status {status})")
            } else {
                message
            }));
        }
        Ok(())
    }

    /// Appends the next CopyData message to `out`; false at the end of the COPY.
    fn next(&self, out: &mut Vec<u8>) -> Result<bool, CopyFailed> {
        let mut data: *mut c_char = std::ptr::null_mut();
        // SAFETY: as in `start`; with async = 0 PQgetCopyData waits for a whole message and
        // only writes `data`.
        let n = unsafe { (self.get_copy_data)(self.conn(), &mut data, 0) };
        if n > 0 {
            // SAFETY: libpq stored in `data` a buffer of `n` bytes that the caller owns until
            // PQfreemem, which follows the copy.
            unsafe {
                out.extend_from_slice(std::slice::from_raw_parts(data as *const u8, n as usize));
                (self.freemem)(data as *mut c_void);
            }
            return Ok(true);
        }
        if n == -1 {
            // The COPY ended: its final result says whether it succeeded.
            return match self.drain_results() {
                Some(error) => Err(CopyFailed(error)),
                None => Ok(false),
            };
        }
        Err(CopyFailed(self.connection_error()))
    }
}

enum Failure {
    Decode(DecodeError),
    Copy(String),
}

/// Decodes the binary COPY data of one relation's snapshot into RecordBatches of the
/// relation's schema (see pgoutput-arrow's `CopyDecoder`).
#[pyclass(name = "CopyDecoder", module = "pgoutput_arrow._internal")]
pub struct PyCopyDecoder {
    decoder: CopyDecoder,
    libpq: Option<Libpq>,
    broken: bool,
}

impl PyCopyDecoder {
    fn run<T: Send>(
        &mut self,
        py: Python<'_>,
        f: impl FnOnce(&mut CopyDecoder, Option<Libpq>) -> Result<T, Failure> + Send,
    ) -> PyResult<T> {
        if self.broken {
            return Err(PyRuntimeError::new_err("this CopyDecoder cannot be used any more after an internal error"));
        }
        let libpq = self.libpq;
        let decoder = &mut self.decoder;
        match py.detach(|| catch_unwind(AssertUnwindSafe(|| f(decoder, libpq)))) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(Failure::Decode(e))) => Err(decode_error(py, e)),
            Ok(Err(Failure::Copy(message))) => Err(new_error(py, "ReplicationError", message, &[])),
            Err(payload) => {
                self.broken = true;
                Err(panic_error(py, payload))
            }
        }
    }
}

fn batches(list: Vec<arrow_array::RecordBatch>) -> Vec<ArrowBatch> {
    list.into_iter().map(ArrowBatch::new).collect()
}

#[pymethods]
impl PyCopyDecoder {
    /// The relation as `relation_schema` takes it (`columns`: `(name, type oid, typmod, is
    /// key)` of the published columns in order; `types`: `(oid, namespace, name)` of the
    /// non-built-in ones); `lsn`: the slot's consistent point; `commit_ts`: microseconds
    /// since 1970 (the snapshot's time); `first_seq`: `_seq` of the first row.
    #[new]
    #[pyo3(signature = (relation_id, namespace, name, replica_identity, columns, types, *, lsn, commit_ts,
                        first_seq, special_values = "keep", views = false, interval = "struct", uuid = "text", time = "text", binary = None, array_ndims = None,
                        batch_size = None, datetime_range = "python"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        relation_id: u32,
        namespace: &str,
        name: &str,
        replica_identity: &str,
        columns: Vec<(String, u32, i32, bool)>,
        types: Vec<(u32, String, String)>,
        lsn: u64,
        commit_ts: i64,
        first_seq: i64,
        special_values: &str,
        views: bool,
        interval: &str,
        uuid: &str,
        time: &str,
        binary: Option<bool>,
        array_ndims: Option<usize>,
        batch_size: Option<usize>,
        datetime_range: &str,
    ) -> PyResult<Self> {
        let mut options = decoder_options(special_values, views, interval, uuid, time, binary, array_ndims)?;
        options.types.datetime_range = parse_datetime_range(datetime_range)?;
        if let Some(n) = batch_size {
            options.batch_size = n.max(1);
        }
        let (relation, types) = definition(relation_id, namespace, name, replica_identity, &columns, &types)?;
        let position = SnapshotPosition { lsn, commit_ts: commit_ts - PG_EPOCH_OFFSET_US, first_seq };
        let decoder = CopyDecoder::new(&relation, &types, &options, position).map_err(|e| decode_error(py, e))?;
        Ok(PyCopyDecoder { decoder, libpq: None, broken: false })
    }

    /// Per column: whether it must be selected as text (`col::text`), see
    /// pgoutput-arrow's `CopyDecoder::text_columns`.
    #[getter]
    fn text_columns(&self) -> Vec<bool> {
        self.decoder.text_columns().to_vec()
    }

    /// The batches' schema, as an empty table.
    #[getter]
    fn schema(&self) -> ArrowTable {
        ArrowTable::new(self.decoder.schema(), Vec::new())
    }

    #[getter]
    fn rows(&self) -> u64 {
        self.decoder.rows()
    }

    /// Bytes of COPY data taken so far.
    #[getter]
    fn bytes_read(&self) -> u64 {
        self.decoder.bytes()
    }

    /// Whether the COPY data's trailer was read.
    #[getter]
    fn done(&self) -> bool {
        self.decoder.is_done()
    }

    /// Decodes the next piece of COPY data (cut anywhere).
    fn push(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        let data = data.to_vec();
        self.run(py, move |d, _| d.push_buffer(Buffer::from_vec(data)).map_err(Failure::Decode))
    }

    /// The batches completed so far.
    fn take(&mut self, py: Python<'_>) -> PyResult<Vec<ArrowBatch>> {
        self.run(py, |d, _| Ok(d.take_ready())).map(batches)
    }

    /// The end of the data: the last batches; an error when it stopped before its trailer.
    fn finish(&mut self, py: Python<'_>) -> PyResult<Vec<ArrowBatch>> {
        self.run(py, |d, _| d.finish().map_err(Failure::Decode)).map(batches)
    }

    /// Starts `sql` (a `COPY ... TO STDOUT (FORMAT binary)`) on the connection `conn` (a
    /// `PGconn *`, psycopg2's `connection.pgconn_ptr`, blocking and idle); `functions`: the
    /// addresses of that libpq's PQsendQuery, PQgetResult, PQresultStatus,
    /// PQresultErrorMessage, PQclear, PQgetCopyData, PQfreemem and PQerrorMessage. The
    /// connection must stay open and unused until `read` said the COPY is done.
    fn start(&mut self, py: Python<'_>, conn: usize, sql: &str, functions: Vec<usize>) -> PyResult<()> {
        if functions.len() != 8 || functions.contains(&0) || conn == 0 {
            return Err(PyValueError::new_err("start needs a connection and eight libpq functions"));
        }
        let sql = CString::new(sql).map_err(|_| PyValueError::new_err("the COPY command contains a NUL byte"))?;
        // SAFETY: the caller passes the addresses of these libpq functions (ctypes casts of
        // the library's symbols), whose C signatures are the types converted to.
        let libpq = unsafe {
            Libpq {
                conn,
                send_query: std::mem::transmute::<usize, SendQuery>(functions[0]),
                get_result: std::mem::transmute::<usize, GetResult>(functions[1]),
                result_status: std::mem::transmute::<usize, ResultStatus>(functions[2]),
                result_error_message: std::mem::transmute::<usize, ResultErrorMessage>(functions[3]),
                clear: std::mem::transmute::<usize, Clear>(functions[4]),
                get_copy_data: std::mem::transmute::<usize, GetCopyData>(functions[5]),
                freemem: std::mem::transmute::<usize, FreeMem>(functions[6]),
                error_message: std::mem::transmute::<usize, ErrorMessage>(functions[7]),
            }
        };
        self.libpq = Some(libpq);
        self.run(py, move |_, libpq| match libpq {
            Some(l) => l.start(&sql).map_err(|CopyFailed(m)| Failure::Copy(m)),
            None => Err(Failure::Copy("no connection".into())),
        })
    }

    /// Reads and decodes CopyData messages of the COPY `start` began, without the GIL, until
    /// about `max_bytes` were read or the COPY ended; returns the batches completed (all of
    /// them once it ended: then `done` is true and the connection is free again).
    #[pyo3(signature = (max_bytes = 64 << 20))]
    fn read(&mut self, py: Python<'_>, max_bytes: usize) -> PyResult<Vec<ArrowBatch>> {
        self.run(py, move |d, libpq| {
            let Some(libpq) = libpq else {
                return Err(Failure::Copy("read before start: no COPY is running".into()));
            };
            let mut read = 0usize;
            let mut gathered = Vec::with_capacity(GATHER_BYTES + (64 << 10));
            loop {
                let more = libpq.next(&mut gathered).map_err(|CopyFailed(m)| Failure::Copy(m))?;
                if gathered.len() >= GATHER_BYTES || !more {
                    read += gathered.len();
                    let chunk = std::mem::replace(&mut gathered, Vec::with_capacity(GATHER_BYTES + (64 << 10)));
                    if !chunk.is_empty() {
                        d.push_buffer(Buffer::from_vec(chunk)).map_err(Failure::Decode)?;
                    }
                }
                if !more {
                    let mut out = d.take_ready();
                    out.extend(d.finish().map_err(Failure::Decode)?);
                    return Ok(out);
                }
                if read >= max_bytes {
                    return Ok(d.take_ready());
                }
            }
        })
        .map(batches)
    }
}
