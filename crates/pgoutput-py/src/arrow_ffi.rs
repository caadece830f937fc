//! Arrow data across the Python boundary through the Arrow PyCapsule interface
//! (<https://arrow.apache.org/docs/format/CDataInterface/PyCapsuleInterface.html>):
//! nothing is copied, the consumer receives pointers to the buffers Rust built and
//! releases them through the C data interface's release callbacks.
//!
//! Every `unsafe` block of the extension lives in this module.
#![deny(clippy::undocumented_unsafe_blocks)]

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{Array, RecordBatch, RecordBatchIterator, StructArray};
use arrow_schema::SchemaRef;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple};
use std::ffi::CStr;

const STREAM_CAPSULE: &CStr = c"arrow_array_stream";
const SCHEMA_CAPSULE: &CStr = c"arrow_schema";
const ARRAY_CAPSULE: &CStr = c"arrow_array";

fn arrow_error(err: arrow_schema::ArrowError) -> PyErr {
    PyValueError::new_err(format!("Arrow C data interface: {err}"))
}

/// A schema as an `arrow_schema` capsule.
pub fn schema_capsule<'py>(py: Python<'py>, schema: &SchemaRef) -> PyResult<Bound<'py, PyCapsule>> {
    let ffi_schema = FFI_ArrowSchema::try_from(schema.as_ref()).map_err(arrow_error)?;
    // The capsule owns the struct; a consumer that imports it moves it out and leaves a
    // released struct behind, whose drop is then a no-op.
    PyCapsule::new_with_value(py, ffi_schema, SCHEMA_CAPSULE)
}

/// Batches as an `arrow_array_stream` capsule. The stream owns the batches, and through
/// them the buffers; they are freed when the consumer releases the stream or what it
/// imported from it.
pub fn stream_capsule<'py>(
    py: Python<'py>,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    let stream = FFI_ArrowArrayStream::new(Box::new(reader));
    PyCapsule::new_with_value(py, stream, STREAM_CAPSULE)
}

/// One batch as the `(arrow_schema, arrow_array)` capsule pair of `__arrow_c_array__`:
/// a struct array whose children are the columns.
pub fn array_capsules<'py>(py: Python<'py>, batch: &RecordBatch) -> PyResult<Bound<'py, PyTuple>> {
    let schema = schema_capsule(py, &batch.schema())?;
    let data = StructArray::from(batch.clone()).into_data();
    let array = PyCapsule::new_with_value(py, FFI_ArrowArray::new(&data), ARRAY_CAPSULE)?;
    PyTuple::new(py, [schema.into_any(), array.into_any()])
}

/// Imports the stream of any object implementing `__arrow_c_stream__` (a pyarrow Table or
/// RecordBatchReader, a polars DataFrame, ...). The returned reader pulls batches on demand;
/// their buffers stay owned by the producer and are released when the arrays are dropped.
pub fn import_stream(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatchStreamReader> {
    if !obj.hasattr("__arrow_c_stream__")? {
        return Err(PyTypeError::new_err(format!(
            "expected an object with __arrow_c_stream__ (a pyarrow Table or RecordBatchReader), got {}",
            obj.get_type().name()?
        )));
    }
    let capsule = obj.call_method0("__arrow_c_stream__")?;
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__arrow_c_stream__ did not return a PyCapsule"))?;
    let pointer = capsule.pointer_checked(Some(STREAM_CAPSULE))?;
    // SAFETY: the capsule is named "arrow_array_stream", so by the PyCapsule interface its
    // pointer is a valid, aligned, initialised `struct ArrowArrayStream`, which has the layout
    // of `FFI_ArrowArrayStream` (#[repr(C)]). `from_raw` moves the struct out and leaves a
    // released one in its place, so the capsule's destructor will not release it again. The
    // capsule stays alive (held by `capsule`) for the duration of the move.
    let reader = unsafe {
        RecordBatchStreamReader::from_raw(pointer.as_ptr().cast::<FFI_ArrowArrayStream>())
    };
    reader.map_err(arrow_error)
}

/// Imports the schema of any object implementing `__arrow_c_schema__` (a pyarrow Schema,
/// Field of struct type, Table, RecordBatch, ...).
pub fn import_schema(obj: &Bound<'_, PyAny>) -> PyResult<arrow_schema::Schema> {
    if !obj.hasattr("__arrow_c_schema__")? {
        return Err(PyTypeError::new_err(format!(
            "expected an object with __arrow_c_schema__ (a pyarrow Schema), got {}",
            obj.get_type().name()?
        )));
    }
    let capsule = obj.call_method0("__arrow_c_schema__")?;
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__arrow_c_schema__ did not return a PyCapsule"))?;
    let pointer = capsule.pointer_checked(Some(SCHEMA_CAPSULE))?;
    // SAFETY: the capsule is named "arrow_schema", so by the PyCapsule interface its pointer
    // is a valid, aligned, initialised `struct ArrowSchema`, which has the layout of
    // `FFI_ArrowSchema` (#[repr(C)]). It is only borrowed here (the capsule keeps ownership
    // and releases it), for as long as `capsule` lives.
    let ffi = unsafe { &*pointer.as_ptr().cast::<FFI_ArrowSchema>() };
    arrow_schema::Schema::try_from(ffi).map_err(arrow_error)
}

/// Imports one batch from any object implementing `__arrow_c_array__` (a pyarrow
/// RecordBatch): a struct array whose children are the columns. Nothing is copied; the
/// buffers are released through the producer's callbacks when the batch is dropped.
pub fn import_batch(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    if !obj.hasattr("__arrow_c_array__")? {
        return Err(PyTypeError::new_err(format!(
            "expected an object with __arrow_c_array__ (a pyarrow RecordBatch), got {}",
            obj.get_type().name()?
        )));
    }
    let pair = obj.call_method0("__arrow_c_array__")?;
    let (schema, array): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair.extract()?;
    let schema = schema
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__arrow_c_array__ did not return a schema PyCapsule"))?;
    let array = array
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__arrow_c_array__ did not return an array PyCapsule"))?;
    let schema_pointer = schema.pointer_checked(Some(SCHEMA_CAPSULE))?;
    let array_pointer = array.pointer_checked(Some(ARRAY_CAPSULE))?;
    // SAFETY: the capsule is named "arrow_schema", so by the PyCapsule interface its pointer
    // is a valid, aligned, initialised `struct ArrowSchema` (the layout of `FFI_ArrowSchema`,
    // #[repr(C)]). It is only borrowed, while `schema` keeps the capsule alive.
    let ffi_schema = unsafe { &*schema_pointer.as_ptr().cast::<FFI_ArrowSchema>() };
    // SAFETY: the capsule is named "arrow_array", so its pointer is a valid, aligned,
    // initialised `struct ArrowArray` (the layout of `FFI_ArrowArray`). `from_raw` moves it
    // out and leaves a released one behind, so the capsule's destructor does not release
    // it again; the capsule stays alive (held by `array`) during the move.
    let ffi_array = unsafe { FFI_ArrowArray::from_raw(array_pointer.as_ptr().cast::<FFI_ArrowArray>()) };
    // SAFETY: `ffi_array` was produced for the type `ffi_schema` describes (they come from
    // one `__arrow_c_array__` call), as `from_ffi` requires.
    let data = unsafe { arrow_array::ffi::from_ffi(ffi_array, ffi_schema) }.map_err(arrow_error)?;
    let schema = arrow_schema::Schema::try_from(ffi_schema).map_err(arrow_error)?;
    let columns = StructArray::from(data);
    RecordBatch::try_new(std::sync::Arc::new(schema), columns.columns().to_vec()).map_err(arrow_error)
}
