//! The canonical rebuild of shuffled transactions, the relation catalog's schemas and the
//! message helpers of SQL (pgoutput_arrow::canonical), on Arrow data from Python.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, LargeBinaryArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use pgoutput_arrow::canonical::{self, CaptureRow, RelationCatalog};
use pgoutput_arrow::capture::Capture;
use pgoutput_arrow::DecoderOptions;
use pgoutput_proto::{Column, Relation, ReplicaIdentity, TypeInfo};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrow_ffi;
use crate::decoder::decoder_options;
use crate::errors::{decode_error, new_error};
use crate::tables::{ArrowBatch, ArrowTable};

/// Every batch of `data` (an object with `__arrow_c_stream__`) as one capture.
fn captures(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Vec<Capture>> {
    let reader = arrow_ffi::import_stream(data)?;
    let mut out = Vec::new();
    let mut first = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| PyValueError::new_err(format!("reading the batches: {e}")))?;
        let n = batch.num_rows() as u64;
        out.push(Capture::from_batch(&batch, first).map_err(|e| new_error(py, "CaptureError", e.0, &[]))?);
        first += n;
    }
    Ok(out)
}

/// What a rebuild takes from Python: the rows' captures, the relation catalog and the
/// transactions held in pieces (`canonical_stream`, `Decoder.push_canonical`).
pub(crate) struct RebuildInput {
    pub parts: Vec<Capture>,
    pub catalog: RelationCatalog,
    pub pieces: std::collections::HashSet<u64>,
}

impl RebuildInput {
    pub(crate) fn new(py: Python<'_>, rows: &Bound<'_, PyAny>, catalog: &Bound<'_, PyAny>, pieces: Vec<u64>) -> PyResult<Self> {
        Ok(RebuildInput { parts: captures(py, rows)?, catalog: catalog_of(py, catalog)?, pieces: pieces.into_iter().collect() })
    }

    /// Every row of every part, borrowing the messages.
    pub(crate) fn rows(&self) -> Vec<CaptureRow<'_>> {
        self.parts.iter().flat_map(|c| c.rows()).collect()
    }
}

fn catalog_of(py: Python<'_>, catalog: &Bound<'_, PyAny>) -> PyResult<RelationCatalog> {
    let parts = captures(py, catalog)?;
    RelationCatalog::from_rows(parts.iter().flat_map(|c| c.rows())).map_err(|e| decode_error(py, e))
}

/// `rows` (a capture: `lsn`, `xid`, `data`, optionally `_tb`, whole transactions in any
/// order) rebuilt into one self-contained stream (`lsn` int64, `data` large_binary), with
/// the Relation and Type messages from `catalog` (a capture's rows of kinds CATALOG_KINDS,
/// or the whole capture) injected where needed; with `history`, preceded by every Relation
/// and Type version of the catalog at LSN 0. `pieces`: the transactions `rows` hold only a
/// part of, rebuilt with the framing of `catalog` (which then holds their rows of kinds
/// FRAMING_KINDS too; pgoutput_arrow::canonical::canonical_pieces).
#[pyfunction]
#[pyo3(signature = (rows, catalog, history = false, pieces = Vec::new()))]
pub fn canonical_stream(
    py: Python<'_>,
    rows: &Bound<'_, PyAny>,
    catalog: &Bound<'_, PyAny>,
    history: bool,
    pieces: Vec<u64>,
) -> PyResult<ArrowBatch> {
    let input = RebuildInput::new(py, rows, catalog, pieces)?;
    let stream = py
        .detach(|| canonical::canonical_pieces(&input.rows(), &input.catalog, history, &input.pieces))
        .map_err(|e| decode_error(py, e))?;
    let lsn = Int64Array::from_iter_values(stream.lsns.iter().map(|&l| l as i64));
    let schema = Arc::new(Schema::new(vec![
        Field::new("lsn", DataType::Int64, false),
        Field::new("data", DataType::LargeBinary, false),
    ]));
    let batch = RecordBatch::try_new(schema, vec![Arc::new(lsn) as ArrayRef, Arc::new(stream.messages) as ArrayRef])
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(ArrowBatch::new(batch))
}

/// A part of a capture before it is decoded where it is
/// (pgoutput_arrow::canonical::partition_summary): `(pieces, incomplete)`, `pieces` the
/// transactions of `split` it holds changes of, as `(xid, changes, first lsn, first
/// tie-breaker, last lsn, last tie-breaker)`; `incomplete` those not in `split` it holds
/// changes or an end of without their start (the capture's parts were cut otherwise).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn partition_summary(
    py: Python<'_>,
    rows: &Bound<'_, PyAny>,
    split: Vec<u64>,
) -> PyResult<(Vec<(u64, u64, u64, i64, u64, i64)>, Vec<u64>)> {
    let parts = captures(py, rows)?;
    let split: std::collections::HashSet<u64> = split.into_iter().collect();
    let summary = py
        .detach(|| {
            let rows: Vec<CaptureRow<'_>> = parts.iter().flat_map(|c| c.rows()).collect();
            canonical::partition_summary(&rows, &split)
        })
        .map_err(|e| decode_error(py, e))?;
    let pieces = summary.pieces.iter().map(|p| (p.xid, p.changes, p.first.0, p.first.1, p.last.0, p.last.1)).collect();
    Ok((pieces, summary.incomplete))
}

/// Each table's schema as a decoder of the whole capture makes it, from the catalog's
/// Relation and Type messages alone: `{"schema.table": ArrowTable}` (empty tables).
#[pyfunction]
#[pyo3(signature = (catalog, *, special_values = "keep", views = false, interval = "struct", uuid = "text", time = "text", binary = None, array_ndims = None))]
#[allow(clippy::too_many_arguments)]
pub fn relation_schemas<'py>(
    py: Python<'py>,
    catalog: &Bound<'_, PyAny>,
    special_values: &str,
    views: bool,
    interval: &str,
    uuid: &str,
    time: &str,
    binary: Option<bool>,
    array_ndims: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = decoder_options(special_values, views, interval, uuid, time, binary, array_ndims)?;
    let schemas = catalog_of(py, catalog)?.schemas(options).map_err(|e| decode_error(py, e))?;
    let out = PyDict::new(py);
    for (name, schema) in schemas {
        out.set_item(name, ArrowTable::new(schema, Vec::new()))?;
    }
    Ok(out)
}

pub(crate) fn replica_identity(value: &str) -> PyResult<ReplicaIdentity> {
    Ok(match value {
        "d" | "default" => ReplicaIdentity::Default,
        "n" | "nothing" => ReplicaIdentity::Nothing,
        "f" | "full" => ReplicaIdentity::Full,
        "i" | "index" => ReplicaIdentity::Index,
        other => {
            return Err(PyValueError::new_err(format!(
                "replica_identity must be one of 'd', 'n', 'f', 'i' (pg_class.relreplident), not {other:?}"
            )))
        }
    })
}

/// The schema the decoder gives a relation of this definition, as an empty table.
/// `columns`: `(name, type oid, typmod, is key)` each; `types`: `(oid, namespace, name)`
/// of its non-built-in column types (what Type messages would carry; namespace "" for
/// pg_catalog).
#[pyfunction]
#[pyo3(signature = (relation_id, namespace, name, replica_identity, columns, types, *,
                    special_values = "keep", views = false, interval = "struct", uuid = "text", time = "text", binary = None, array_ndims = None))]
#[allow(clippy::too_many_arguments)]
pub fn relation_schema(
    py: Python<'_>,
    relation_id: u32,
    namespace: &str,
    name: &str,
    replica_identity: &str,
    columns: Vec<(String, u32, i32, bool)>,
    types: Vec<(u32, String, String)>,
    special_values: &str,
    views: bool,
    interval: &str,
    uuid: &str,
    time: &str,
    binary: Option<bool>,
    array_ndims: Option<usize>,
) -> PyResult<ArrowTable> {
    let options: DecoderOptions = decoder_options(special_values, views, interval, uuid, time, binary, array_ndims)?;
    let (relation, types) = definition(relation_id, namespace, name, replica_identity, &columns, &types)?;
    let schema = canonical::relation_schema(&relation, &types, options).map_err(|e| decode_error(py, e))?;
    Ok(ArrowTable::new(schema, Vec::new()))
}

/// A relation and its types as Python gives them (`relation_schema`, `CopyDecoder`): the
/// Relation message and Type messages pgoutput would send for them.
pub(crate) fn definition<'a>(
    relation_id: u32,
    namespace: &'a str,
    name: &'a str,
    replica_identity: &str,
    columns: &'a [(String, u32, i32, bool)],
    types: &'a [(u32, String, String)],
) -> PyResult<(Relation<'a>, Vec<TypeInfo<'a>>)> {
    let relation = Relation {
        xid: None,
        id: relation_id,
        namespace,
        name,
        replica_identity: self::replica_identity(replica_identity)?,
        columns: columns
            .iter()
            .map(|(n, oid, typmod, key)| Column { is_key: *key, name: n, type_oid: *oid, type_modifier: *typmod })
            .collect(),
    };
    let types = types.iter().map(|(oid, ns, n)| TypeInfo { xid: None, oid: *oid, namespace: ns, name: n }).collect();
    Ok((relation, types))
}

/// For each message of `data` (a table with a binary `data` column): `kind` (its kind's
/// name: 'insert', 'stream_start', ..., 'unknown'; null for null or empty) and
/// `relation_id` (of a Relation, or of an Insert/Update/Delete outside a stream block) and
/// `binary` (whether an Insert outside a stream block has its values in binary format; null
/// when its cells do not tell), and for the end of a transaction (Commit, Stream Commit,
/// Commit Prepared: commit LSN; Prepare, Stream Prepare: prepare LSN) `commit_lsn` and
/// `end_lsn`, and for a Stream Abort the transaction's `xid` and the aborted `subxid` (equal
/// when the whole transaction was).
#[pyfunction]
pub fn describe_messages(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<ArrowTable> {
    let reader = arrow_ffi::import_stream(data)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("kind", DataType::Utf8, true),
        Field::new("relation_id", DataType::Int64, true),
        Field::new("binary", DataType::Boolean, true),
        Field::new("commit_lsn", DataType::Int64, true),
        Field::new("end_lsn", DataType::Int64, true),
        Field::new("xid", DataType::Int64, true),
        Field::new("subxid", DataType::Int64, true),
    ]));
    let mut batches = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| PyValueError::new_err(format!("reading the batches: {e}")))?;
        let column = batch
            .column_by_name("data")
            .ok_or_else(|| new_error(py, "CaptureError", "describe_messages needs a column data".into(), &[]))?;
        let column = arrow_cast_binary(column)?;
        let kinds: StringArray = column
            .iter()
            .map(|d| d.and_then(|d| d.first()).map(|&k| pgoutput_proto::peek::kind_name(k).unwrap_or("unknown")))
            .collect();
        let ids: Int64Array =
            column.iter().map(|d| d.and_then(canonical::message_relation_id).map(i64::from)).collect();
        let binary: arrow_array::BooleanArray =
            column.iter().map(|d| d.and_then(pgoutput_proto::peek::insert_is_binary)).collect();
        let ends: Vec<Option<(i64, i64)>> = column.iter().map(|d| d.and_then(commit_positions)).collect();
        let commit_lsn: Int64Array = ends.iter().map(|e| e.map(|e| e.0)).collect();
        let end_lsn: Int64Array = ends.iter().map(|e| e.map(|e| e.1)).collect();
        let aborts: Vec<Option<(i64, i64)>> = column.iter().map(|d| d.and_then(stream_abort)).collect();
        let xid: Int64Array = aborts.iter().map(|a| a.map(|a| a.0)).collect();
        let subxid: Int64Array = aborts.iter().map(|a| a.map(|a| a.1)).collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(kinds),
            Arc::new(ids),
            Arc::new(binary),
            Arc::new(commit_lsn),
            Arc::new(end_lsn),
            Arc::new(xid),
            Arc::new(subxid),
        ];
        batches.push(
            RecordBatch::try_new(schema.clone(), columns).map_err(|e| PyValueError::new_err(e.to_string()))?,
        );
    }
    Ok(ArrowTable::new(schema, batches))
}

fn stream_abort(data: &[u8]) -> Option<(i64, i64)> {
    use pgoutput_proto::{parse_message, Message};
    if data.first()? != &b'A' {
        return None;
    }
    match parse_message(data, false).ok()? {
        Message::StreamAbort(a) => Some((i64::from(a.xid), i64::from(a.subxid))),
        _ => None,
    }
}

fn commit_positions(data: &[u8]) -> Option<(i64, i64)> {
    use pgoutput_proto::{parse_message, Message};
    if !matches!(data.first()?, b'C' | b'c' | b'K' | b'P' | b'p') {
        return None;
    }
    let (a, b) = match parse_message(data, false).ok()? {
        Message::Commit(c) => (c.commit_lsn, c.end_lsn),
        Message::StreamCommit(c) => (c.commit_lsn, c.end_lsn),
        Message::CommitPrepared(c) => (c.commit_lsn, c.end_lsn),
        Message::Prepare(p) | Message::StreamPrepare(p) => (p.prepare_lsn, p.end_lsn),
        _ => return None,
    };
    Some((a.0 as i64, b.0 as i64))
}

fn arrow_cast_binary(array: &ArrayRef) -> PyResult<LargeBinaryArray> {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    Ok(match array.data_type() {
        DataType::Binary => array.as_binary::<i32>().iter().collect(),
        DataType::LargeBinary => array.as_binary::<i64>().clone(),
        DataType::BinaryView => array.as_binary_view().iter().collect(),
        DataType::Null => LargeBinaryArray::new_null(array.len()),
        other => return Err(PyValueError::new_err(format!("column data has type {other}; expected binary"))),
    })
}
