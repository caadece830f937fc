//! `_internal.Decoder`: the incremental decoder of pgoutput-arrow, driven from Python.
//!
//! Every call that decodes releases the GIL, and catches panics so that a bug in the
//! decoder is an exception, never a crashed interpreter.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use pgoutput_arrow::{DatetimeRange, DecodeError, Decoder, DecoderOptions, EmitMode, IntervalType, Output, SpecialValues, TimeType, UuidType};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::arrow_ffi;
use crate::errors::{decode_error, new_error, panic_error};
use pgoutput_arrow::capture as input;
use crate::tables::ArrowBatch;

enum State {
    Open(Box<Decoder>),
    Finished,
    /// A panic escaped the decoder: its state is unknown, so it is not used again.
    Broken,
}

/// What can go wrong while feeding a stream: decoding, the capture's shape, or the stream.
enum Failure {
    Decode(DecodeError),
    Capture(String),
}

impl From<DecodeError> for Failure {
    fn from(err: DecodeError) -> Self {
        Failure::Decode(err)
    }
}

#[pyclass(name = "Decoder", module = "pgoutput_arrow._internal", frozen)]
pub struct PyDecoder {
    state: Mutex<State>,
    /// Messages fed so far, to number capture rows in error messages.
    fed: Mutex<u64>,
}

fn parse_special_values(value: &str) -> PyResult<SpecialValues> {
    match value {
        "keep" => Ok(SpecialValues::Keep),
        "error" => Ok(SpecialValues::Error),
        "null" => Ok(SpecialValues::Null),
        "text" => Ok(SpecialValues::Text),
        other => Err(PyValueError::new_err(format!(
            "special_values must be 'keep', 'error', 'null' or 'text', not {other:?}"
        ))),
    }
}

/// `datetime_range` of `Decoder` and `CopyDecoder` (see pgoutput_arrow::DatetimeRange).
pub fn parse_datetime_range(value: &str) -> PyResult<DatetimeRange> {
    match value {
        "arrow" => Ok(DatetimeRange::Arrow),
        "python" => Ok(DatetimeRange::Python),
        "pandas" => Ok(DatetimeRange::Pandas),
        other => Err(PyValueError::new_err(format!(
            "datetime_range must be 'python', 'arrow' or 'pandas', not {other:?}"
        ))),
    }
}

fn parse_emit(value: &str) -> PyResult<EmitMode> {
    match value {
        "committed" => Ok(EmitMode::Committed),
        "arrived" | "immediate" => Ok(EmitMode::Arrived),
        other => Err(PyValueError::new_err(format!(
            "emit must be 'committed' or 'arrived' (alias 'immediate'), not {other:?}"
        ))),
    }
}

fn parse_interval(value: &str) -> PyResult<IntervalType> {
    match value {
        "struct" => Ok(IntervalType::Struct),
        "month_day_nano" => Ok(IntervalType::MonthDayNano),
        other => Err(PyValueError::new_err(format!(
            "interval must be 'struct' or 'month_day_nano', not {other:?}"
        ))),
    }
}

fn parse_uuid(value: &str) -> PyResult<UuidType> {
    match value {
        "text" => Ok(UuidType::Text),
        "fixed_size_binary" => Ok(UuidType::FixedSizeBinary),
        other => Err(PyValueError::new_err(format!("uuid must be 'text' or 'fixed_size_binary', not {other:?}"))),
    }
}

fn parse_time(value: &str) -> PyResult<TimeType> {
    match value {
        "text" => Ok(TimeType::Text),
        "time64" => Ok(TimeType::Time64),
        other => Err(PyValueError::new_err(format!("time must be 'text' or 'time64', not {other:?}"))),
    }
}

/// The type options of a decoder (shared by `Decoder` and the schema functions).
pub fn decoder_options(
    special_values: &str,
    views: bool,
    interval: &str,
    uuid: &str,
    time: &str,
    binary: Option<bool>,
    array_ndims: Option<usize>,
) -> PyResult<DecoderOptions> {
    let mut options = DecoderOptions::default();
    options.types.special_values = parse_special_values(special_values)?;
    options.types.views = views;
    options.types.interval = parse_interval(interval)?;
    options.types.uuid = parse_uuid(uuid)?;
    options.types.time = parse_time(time)?;
    if let Some(binary) = binary {
        options.types.binary = binary;
        options.detect_binary = false;
    }
    if let Some(ndims) = array_ndims {
        if ndims > 6 {
            return Err(PyValueError::new_err(format!(
                "array_ndims must be between 0 and 6 (PostgreSQL's limit), not {ndims}"
            )));
        }
        options.types.array_ndims = ndims;
        options.types.learn_array_ndims = false;
    }
    Ok(options)
}

/// How text-mode dates in the SQL and Postgres DateStyles (`date_order`) and zone
/// abbreviations of the non-ISO ones (`timezone`) are read; None keeps the defaults.
pub fn set_datetime_options(options: &mut DecoderOptions, date_order: Option<&str>, timezone: Option<&str>) -> PyResult<()> {
    if let Some(order) = date_order {
        options.types.date_order = order.parse().map_err(|e: String| PyValueError::new_err(format!("date_order: {e}")))?;
    }
    if let Some(zone) = timezone {
        options.types.timezone = Some(zone.parse().map_err(|e: String| PyValueError::new_err(format!("timezone: {e}")))?);
    }
    Ok(())
}

impl PyDecoder {
    fn lock(&self) -> PyResult<MutexGuard<'_, State>> {
        // Waiting for the lock while holding the GIL could deadlock with a thread that is
        // decoding without the GIL and needs it to pull its input: refuse instead.
        self.state
            .try_lock()
            .map_err(|_| PyRuntimeError::new_err("this Decoder is in use by another thread"))
    }

    /// Runs `f` on the decoder without the GIL, mapping errors and panics to exceptions.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Decoder) -> Result<T, Failure> + Send,
    ) -> PyResult<T> {
        let mut guard = self.lock()?;
        let decoder = match &mut *guard {
            State::Open(decoder) => decoder,
            State::Finished => {
                return Err(PyRuntimeError::new_err(
                    "this Decoder is finished: finish() was called",
                ))
            }
            State::Broken => {
                return Err(PyRuntimeError::new_err(
                    "this Decoder cannot be used any more after an internal error",
                ))
            }
        };
        let result = py.detach(|| catch_unwind(AssertUnwindSafe(|| f(decoder))));
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Failure::Decode(err))) => Err(decode_error(py, err)),
            Ok(Err(Failure::Capture(message))) => Err(new_error(py, "CaptureError", message, &[])),
            Err(payload) => {
                *guard = State::Broken;
                Err(panic_error(py, payload))
            }
        }
    }
}

#[pymethods]
impl PyDecoder {
    #[new]
    #[pyo3(signature = (*, special_values = "keep", views = false, interval = "struct", uuid = "text", time = "text", batch_size = None, memory_limit = None, spill_dir = None, emit = "committed", binary = None, array_ndims = None, date_order = None, timezone = None, datetime_range = "python"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        special_values: &str,
        views: bool,
        interval: &str,
        uuid: &str,
        time: &str,
        batch_size: Option<usize>,
        memory_limit: Option<usize>,
        spill_dir: Option<PathBuf>,
        emit: &str,
        binary: Option<bool>,
        array_ndims: Option<usize>,
        date_order: Option<&str>,
        timezone: Option<&str>,
        datetime_range: &str,
    ) -> PyResult<Self> {
        let mut options = decoder_options(special_values, views, interval, uuid, time, binary, array_ndims)?;
        set_datetime_options(&mut options, date_order, timezone)?;
        options.types.datetime_range = parse_datetime_range(datetime_range)?;
        if let Some(batch_size) = batch_size {
            if batch_size == 0 {
                return Err(PyValueError::new_err("batch_size must be at least 1"));
            }
            options.batch_size = batch_size;
        }
        if let Some(memory_limit) = memory_limit {
            options.memory_limit = memory_limit;
        }
        options.spill_dir = spill_dir;
        options.emit = parse_emit(emit)?;
        Ok(Self {
            state: Mutex::new(State::Open(Box::new(Decoder::new(options)))),
            fed: Mutex::new(0),
        })
    }

    /// Feeds one message. The bytes are copied once into an Arrow buffer that the
    /// decoder's output may then share.
    fn push(&self, py: Python<'_>, lsn: u64, data: &[u8]) -> PyResult<()> {
        let buffer = Buffer::from(data.to_vec());
        self.run(py, move |decoder| Ok(decoder.push(lsn, &buffer)?))?;
        *self.fed.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Ok(())
    }

    /// Feeds every row of an Arrow stream of captured messages (columns `lsn` and `data`),
    /// batch by batch, without copying the messages. Returns the number of messages fed.
    fn push_stream(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<u64> {
        let reader = arrow_ffi::import_stream(stream)?;
        let first = *self.fed.lock().unwrap_or_else(|e| e.into_inner());
        let mut fed = 0u64;
        let result = self.run(py, |decoder| {
            for batch in reader {
                let batch =
                    batch.map_err(|e| Failure::Capture(format!("reading the capture: {e}")))?;
                let row = first + fed;
                let lsns = input::lsns(&batch, row).map_err(|e| Failure::Capture(e.0))?;
                match input::messages(&batch, row).map_err(|e| Failure::Capture(e.0))? {
                    input::Messages::Binary(data) => decoder.push_array(&lsns, &data)?,
                    input::Messages::LargeBinary(data) => decoder.push_array(&lsns, &data)?,
                    input::Messages::View(data) => decoder.push_view_array(&lsns, &data)?,
                }
                fed += batch.num_rows() as u64;
            }
            Ok(())
        });
        *self.fed.lock().unwrap_or_else(|e| e.into_inner()) += fed;
        result.map(|()| fed)
    }

    /// The canonical rebuild of `rows` (a capture: `lsn`, `xid`, `data`, optionally `_tb`;
    /// whole transactions in any order, but `pieces`) fed as it is made, each row's message
    /// referenced where it is (pgoutput_arrow::Decoder::push_canonical): what
    /// `canonical_stream` and then `push_stream` give, without the rebuilt copy. `catalog`
    /// as for `canonical_stream`. Returns the number of messages fed.
    #[pyo3(signature = (rows, catalog, history = false, pieces = Vec::new()))]
    fn push_canonical(
        &self,
        py: Python<'_>,
        rows: &Bound<'_, PyAny>,
        catalog: &Bound<'_, PyAny>,
        history: bool,
        pieces: Vec<u64>,
    ) -> PyResult<u64> {
        let input = crate::canonical::RebuildInput::new(py, rows, catalog, pieces)?;
        let fed = self.run(py, |decoder| {
            let before = decoder.messages_pushed();
            let buffers: Vec<Buffer> = input.parts.iter().flat_map(|c| c.messages.buffers()).collect();
            decoder.push_canonical(&input.rows(), &buffers, &input.catalog, history, &input.pieces)?;
            Ok(decoder.messages_pushed() - before)
        })?;
        *self.fed.lock().unwrap_or_else(|e| e.into_inner()) += fed;
        Ok(fed)
    }

    /// The batches that are complete, as `(kind, table, version, batch)` tuples: kind is
    /// "table" (then table is "schema.table" and version its schema version), "truncates",
    /// "messages" or "transactions".
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let outputs = self.run(py, |decoder| Ok(decoder.take_ready()))?;
        let list = PyList::empty(py);
        for output in outputs {
            let (kind, table, version, batch): (&str, Option<String>, Option<u64>, RecordBatch) =
                match output {
                    Output::Table {
                        name,
                        version,
                        batch,
                    } => ("table", Some(name), Some(version as u64), batch),
                    Output::Truncates(batch) => ("truncates", None, None, batch),
                    Output::Messages(batch) => ("messages", None, None, batch),
                    Output::Transactions(batch) => ("transactions", None, None, batch),
                    #[allow(unreachable_patterns)]
                    _ => continue,
                };
            list.append((kind, table, version, ArrowBatch::new(batch)))?;
        }
        Ok(list)
    }

    /// Emits everything that is complete now, even if below the batch size.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |decoder| Ok(decoder.flush()?))
    }

    /// Which attnum (`pg_attribute.attnum`) each named column of `relation_id` has: the
    /// Relation messages fed after this are matched to earlier definitions by attnum.
    fn column_attnums(&self, py: Python<'_>, relation_id: u32, names: Vec<String>, attnums: Vec<i16>) -> PyResult<()> {
        if names.len() != attnums.len() {
            return Err(PyValueError::new_err(format!(
                "column_attnums: {} names but {} attnums",
                names.len(),
                attnums.len()
            )));
        }
        self.run(py, move |decoder| {
            decoder.column_attnums(relation_id, names.into_iter().zip(attnums));
            Ok(())
        })
    }

    /// The LSN up to which every change has been handed out by `take()`: what a consumer
    /// may confirm to the server once it has stored them.
    #[getter]
    fn safe_lsn(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |decoder| Ok(decoder.safe_lsn()))
    }

    /// What the decoder holds of transactions whose outcome is not known yet: (their
    /// number, bytes of their messages in memory, bytes in spill files).
    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<(usize, usize, u64)> {
        self.run(py, |decoder| {
            Ok((decoder.pending_transactions(), decoder.buffered_bytes(), decoder.spilled_bytes()))
        })
    }

    /// Ends the stream: returns every change not yet taken as whole tables, in a dict with
    /// the keys tables, table_versions, truncates, messages, transactions.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let decoder = {
            let mut guard = self.lock()?;
            match std::mem::replace(&mut *guard, State::Finished) {
                State::Open(decoder) => decoder,
                State::Finished => {
                    return Err(PyRuntimeError::new_err(
                        "this Decoder is finished: finish() was called",
                    ))
                }
                State::Broken => {
                    *guard = State::Broken;
                    return Err(PyRuntimeError::new_err(
                        "this Decoder cannot be used any more after an internal error",
                    ));
                }
            }
        };
        let changes = match py.detach(|| catch_unwind(AssertUnwindSafe(move || decoder.finish()))) {
            Ok(Ok(changes)) => changes,
            Ok(Err(err)) => return Err(decode_error(py, err)),
            Err(payload) => return Err(panic_error(py, payload)),
        };
        crate::changes::to_dict(py, changes)
    }

    fn __repr__(&self) -> String {
        let state = match self.state.try_lock().as_deref() {
            Ok(State::Open(_)) => "open",
            Ok(State::Finished) => "finished",
            Ok(State::Broken) => "broken",
            Err(_) => "busy",
        };
        format!("Decoder({state})")
    }
}
