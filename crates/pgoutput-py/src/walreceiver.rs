//! `_internal.WalReceiver`: the read loop of a walsender's CopyBoth stream, without a Python
//! object per message.
//!
//! The connection is libpq's (opened by psycopg2, which does authentication and TLS); the
//! Python side hands over its `PGconn *` and the addresses of five libpq functions, and this
//! loop calls them to take CopyData frames (XLogData 'w', primary keepalive 'k', section 54.4
//! of the PostgreSQL 18 documentation), parses them with pgoutput-proto, and gathers the
//! pgoutput messages into one Arrow batch (`lsn` uint64, `data` binary) that the decoder
//! takes as it takes a capture; standby status updates are encoded (pgoutput-proto's
//! `StandbyStatusUpdate`) and sent here too. Per message that is one copy out of libpq's buffer and no
//! GIL; the same loop in Python cost several ctypes calls and objects per message.
//!
//! [`TxnTracker`] follows transaction boundaries from the same messages, so that the stream
//! knows when nothing is pending and which prepared transactions are unresolved.

#![deny(clippy::undocumented_unsafe_blocks)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow_array::builder::BinaryBuilder;
use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use pgoutput_proto::{parse_copy_data, parse_message, Lsn, Message, ReplicationMessage, StandbyStatusUpdate, TxnFraming};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::tables::ArrowBatch;

type GetCopyData = unsafe extern "C" fn(*mut c_void, *mut *mut c_char, c_int) -> c_int;
type ConsumeInput = unsafe extern "C" fn(*mut c_void) -> c_int;
type FreeMem = unsafe extern "C" fn(*mut c_void);
type PutCopyData = unsafe extern "C" fn(*mut c_void, *const c_char, c_int) -> c_int;
type Flush = unsafe extern "C" fn(*mut c_void) -> c_int;

/// Why a read stopped.
const WOULD_BLOCK: i32 = 0;
/// After `max_messages` frames, or after a keepalive that asks for an answer now.
const MORE: i32 = 1;
/// PQgetCopyData returned -1: the server ended the COPY (PQgetResult says why).
const ENDED: i32 = -1;
/// PQgetCopyData returned -2 or PQconsumeInput failed: PQerrorMessage says why.
const FAILED: i32 = -2;

/// Transaction boundaries seen in the stream, kept by [`TxnFraming`] (the decoder's rules).
#[pyclass(name = "TxnTracker", module = "pgoutput_arrow._internal")]
#[derive(Default)]
pub struct TxnTracker {
    framing: TxnFraming<()>,
    /// Relation ids of the Relation messages seen since the reader last asked
    /// ([`TxnTracker::take_relations`]), so that it can tell the decoder their attnums first:
    /// only those whose definition differs from the last one seen for that relation. The
    /// server sends a relation's definition again in every transaction that touches it, and
    /// a definition the decoder already has needs no catalog read (a read per transaction
    /// cost a stream of 100 transactions of 1 000 inserts 13% of its time).
    relations: Vec<u32>,
    /// Each relation's last definition: the Relation message after its kind byte (and the
    /// xid that precedes it inside a stream block).
    definitions: HashMap<u32, Vec<u8>>,
}

impl TxnTracker {
    fn see_message(&mut self, data: &[u8]) {
        // Row changes, Relation, Type, Truncate, Message and Origin never move a boundary,
        // and are the bulk of the stream: decided by their first byte.
        if data.first() == Some(&b'R') {
            // Inside a stream block a Relation message carries the transaction's xid first.
            let in_stream = self.framing.stream_block().is_some();
            if let Ok(Message::Relation(r)) = parse_message(data, in_stream) {
                let definition = &data[if in_stream { 5 } else { 1 }..];
                if self.definitions.get(&r.id).map(Vec::as_slice) != Some(definition) {
                    self.definitions.insert(r.id, definition.to_vec());
                    if !self.relations.contains(&r.id) {
                        self.relations.push(r.id);
                    }
                }
            }
            return;
        }
        if !matches!(data.first(), Some(b'B' | b'b' | b'C' | b'P' | b'K' | b'r' | b'S' | b'E' | b'c' | b'A' | b'p')) {
            return;
        }
        // None of these kinds carries the in-stream xid, so the stream state does not
        // matter; a malformed or misplaced one is the decoder's to report.
        if let Ok(message) = parse_message(data, false) {
            let _ = self.framing.frame(&message);
        }
    }
}

#[pymethods]
impl TxnTracker {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// One pgoutput message.
    fn see(&mut self, data: &[u8]) {
        self.see_message(data);
    }

    /// No transaction open, streaming or awaiting its two-phase outcome.
    #[getter]
    fn idle(&self) -> bool {
        self.framing.is_idle()
    }

    /// The lowest prepare LSN of prepared transactions not yet resolved.
    fn prepared_floor(&self) -> Option<u64> {
        self.framing.prepared_floor()
    }

    /// The relation ids of the Relation messages seen since the last call, each once.
    fn take_relations(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.relations)
    }
}

/// The libpq calls of one connection.
#[derive(Clone, Copy)]
struct Libpq {
    conn: usize,
    get_copy_data: GetCopyData,
    consume_input: ConsumeInput,
    freemem: FreeMem,
    put_copy_data: PutCopyData,
    flush: Flush,
}

/// One frame taken from libpq, or why there is none.
enum Frame {
    Data(Vec<u8>),
    WouldBlock,
    Ended,
    Failed,
}

impl Libpq {
    /// Sends one CopyData message and waits (up to `timeout`) until libpq has written it.
    fn send(&self, message: &[u8], timeout: Duration) -> bool {
        // SAFETY: `conn` as in `next_frame`; PQputCopyData copies `message` (of the length
        // given) into libpq's output buffer before returning.
        if unsafe { (self.put_copy_data)(self.conn as *mut c_void, message.as_ptr() as *const c_char, message.len() as c_int) } != 1 {
            return false;
        }
        let deadline = Instant::now() + timeout;
        loop {
            // SAFETY: as above; PQflush on a nonblocking connection writes what the socket
            // takes and returns 1 while some is left.
            match unsafe { (self.flush)(self.conn as *mut c_void) } {
                0 => return true,
                1 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
                _ => return false,
            }
        }
    }

    fn next_frame(&self, buffer: &mut Vec<u8>) -> Frame {
        let mut consumed = false;
        loop {
            let mut data: *mut c_char = std::ptr::null_mut();
            // SAFETY: `conn` is the live PGconn of the psycopg2 connection that the Python
            // caller keeps open while it reads (and never uses from another thread meanwhile);
            // PQgetCopyData with async = 1 only writes `data` and never blocks.
            let n = unsafe { (self.get_copy_data)(self.conn as *mut c_void, &mut data, 1) };
            if n > 0 {
                buffer.clear();
                // SAFETY: on success libpq stores in `data` a buffer of `n` bytes that the
                // caller owns until PQfreemem, which follows the copy.
                unsafe {
                    buffer.extend_from_slice(std::slice::from_raw_parts(data as *const u8, n as usize));
                    (self.freemem)(data as *mut c_void);
                }
                return Frame::Data(std::mem::take(buffer));
            }
            match n {
                0 if !consumed => {
                    consumed = true;
                    // SAFETY: as above; PQconsumeInput reads what the socket has without
                    // blocking.
                    if unsafe { (self.consume_input)(self.conn as *mut c_void) } == 0 {
                        return Frame::Failed;
                    }
                }
                0 => return Frame::WouldBlock,
                -1 => return Frame::Ended,
                _ => return Frame::Failed,
            }
        }
    }
}

/// What one [`WalReceiver::read`] gathered.
struct Gathered {
    lsns: Vec<u64>,
    data: BinaryBuilder,
    bytes: u64,
    wal_end: u64,
    reply_requested: bool,
    status: i32,
    error: Option<String>,
}

/// Reads the CopyBoth stream of a walsender through the caller's libpq connection.
#[pyclass(name = "WalReceiver", module = "pgoutput_arrow._internal")]
pub struct WalReceiver {
    libpq: Libpq,
    frame: Vec<u8>,
    /// The last status update sent (its allocation is reused).
    status: Vec<u8>,
}

#[pymethods]
impl WalReceiver {
    /// `conn`: the `PGconn *` (psycopg2's `connection.pgconn_ptr`); the others: the
    /// addresses of that libpq's `PQgetCopyData`, `PQconsumeInput`, `PQfreemem`,
    /// `PQputCopyData` and `PQflush`.
    #[new]
    fn new(
        conn: usize,
        get_copy_data: usize,
        consume_input: usize,
        freemem: usize,
        put_copy_data: usize,
        flush: usize,
    ) -> PyResult<Self> {
        if [conn, get_copy_data, consume_input, freemem, put_copy_data, flush].contains(&0) {
            return Err(PyValueError::new_err("WalReceiver needs a connection and five libpq functions"));
        }
        // SAFETY: the caller passes the addresses of these libpq functions (ctypes casts of
        // the library's symbols), whose C signatures are the types converted to.
        let libpq = unsafe {
            Libpq {
                conn,
                get_copy_data: std::mem::transmute::<usize, GetCopyData>(get_copy_data),
                consume_input: std::mem::transmute::<usize, ConsumeInput>(consume_input),
                freemem: std::mem::transmute::<usize, FreeMem>(freemem),
                put_copy_data: std::mem::transmute::<usize, PutCopyData>(put_copy_data),
                flush: std::mem::transmute::<usize, Flush>(flush),
            }
        };
        Ok(WalReceiver { libpq, frame: Vec::new(), status: Vec::with_capacity(StandbyStatusUpdate::ENCODED_LEN) })
    }

    /// Sends a standby status update ('r') with the client clock of now, waiting up to
    /// `timeout` seconds for libpq to write it, without the GIL. The flushed position is
    /// what the server may discard WAL up to (the slot's confirmed_flush_lsn). Returns
    /// False when the connection failed (PQerrorMessage says why).
    #[pyo3(signature = (written, flushed, applied, reply_requested = false, timeout = 30.0))]
    fn send_status(
        &mut self,
        py: Python<'_>,
        written: u64,
        flushed: u64,
        applied: u64,
        reply_requested: bool,
        timeout: f64,
    ) -> bool {
        let update = StandbyStatusUpdate {
            written: Lsn(written),
            flushed: Lsn(flushed),
            applied: Lsn(applied),
            client_clock: pg_clock_now(),
            reply_requested,
        };
        self.status.clear();
        update.encode_into(&mut self.status);
        let (libpq, message) = (self.libpq, &self.status);
        py.detach(|| libpq.send(message, Duration::from_secs_f64(timeout.max(0.0))))
    }

    /// Takes up to `max_messages` frames without blocking and without the GIL; `tracker`
    /// sees every pgoutput message. Returns `(batch, messages, bytes, wal_end,
    /// reply_requested, status, error)`: `batch` the pgoutput messages with the WAL start of
    /// their XLogData as `lsn` (None when there were none), `wal_end` the highest server WAL
    /// end seen (0: none), `reply_requested` whether a keepalive asked for an answer now (the
    /// read stops right after it), `status` 0 when no more is readable now, 1 when there may
    /// be more, -1 when the server ended the stream, -2 when the connection failed or a frame
    /// was malformed (`error` says which frame).
    #[allow(clippy::type_complexity)]
    fn read(
        &mut self,
        py: Python<'_>,
        tracker: &mut TxnTracker,
        max_messages: usize,
    ) -> PyResult<(Option<ArrowBatch>, usize, u64, u64, bool, i32, Option<String>)> {
        let libpq = self.libpq;
        let frame = &mut self.frame;
        let g = py.detach(|| gather(libpq, frame, tracker, max_messages.max(1)));
        let messages = g.lsns.len();
        let batch = if messages > 0 {
            let mut data = g.data;
            let columns: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(g.lsns)), Arc::new(data.finish())];
            let schema = Schema::new(vec![
                Field::new("lsn", DataType::UInt64, false),
                Field::new("data", DataType::Binary, false),
            ]);
            let batch = RecordBatch::try_new(Arc::new(schema), columns)
                .map_err(|e| PyValueError::new_err(format!("the batch of received messages: {e}")))?;
            Some(ArrowBatch::new(batch))
        } else {
            None
        };
        Ok((batch, messages, g.bytes, g.wal_end, g.reply_requested, g.status, g.error))
    }
}

/// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01 (UTC).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// Now on the protocol's clock: microseconds since 2000-01-01 UTC.
fn pg_clock_now() -> i64 {
    let since_unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    since_unix.as_micros() as i64 - PG_EPOCH_OFFSET_US
}

fn gather(libpq: Libpq, frame: &mut Vec<u8>, tracker: &mut TxnTracker, max_messages: usize) -> Gathered {
    let mut g = Gathered {
        lsns: Vec::with_capacity(max_messages.min(4096)),
        data: BinaryBuilder::with_capacity(max_messages.min(4096), 64 * max_messages.min(4096)),
        bytes: 0,
        wal_end: 0,
        reply_requested: false,
        status: MORE,
        error: None,
    };
    while g.lsns.len() < max_messages {
        let raw = match libpq.next_frame(frame) {
            Frame::Data(raw) => raw,
            Frame::WouldBlock => {
                g.status = WOULD_BLOCK;
                break;
            }
            Frame::Ended => {
                g.status = ENDED;
                break;
            }
            Frame::Failed => {
                g.status = FAILED;
                break;
            }
        };
        match parse_copy_data(&raw) {
            Ok(ReplicationMessage::XLogData(x)) => {
                tracker.see_message(x.data);
                g.lsns.push(x.wal_start.0);
                g.data.append_value(x.data);
                g.bytes += x.data.len() as u64;
                g.wal_end = g.wal_end.max(x.wal_end.0);
            }
            Ok(ReplicationMessage::PrimaryKeepalive(k)) => {
                g.wal_end = g.wal_end.max(k.wal_end.0);
                if k.reply_requested {
                    g.reply_requested = true;
                    *frame = raw;
                    break;
                }
            }
            Err(e) => {
                let kind = raw.first().map_or("none".to_string(), |b| format!("{:?}", *b as char));
                g.status = FAILED;
                g.error = Some(format!("unexpected CopyData from the walsender (kind {kind}, {} bytes): {e}", raw.len()));
                break;
            }
        }
        // The frame's allocation is reused for the next one.
        *frame = raw;
    }
    g
}
