//! Capture normalisation: a capture batch (the rows of `pg_logical_slot_get_binary_changes`:
//! `lsn`, `xid`, `data`, however a file or a DataFrame typed them) to what
//! `Decoder::push_array` and the canonical rebuild take: one LSN per message, the xid of
//! each, and the messages as the capture's own binary array.

use std::str::FromStr;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, BinaryArray, BinaryViewArray, LargeBinaryArray, RecordBatch};
use arrow_schema::DataType;
use pgoutput_proto::Lsn;

/// Why a batch is not a capture (the Python binding raises `CaptureError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureError(pub String);

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CaptureError {}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a dyn Array, CaptureError> {
    batch.column_by_name(name).map(|a| a.as_ref()).ok_or_else(|| {
        let found: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
        CaptureError(format!(
            "a capture needs the columns lsn and data (as pg_logical_slot_get_binary_changes returns); \
             no column {name:?} among [{}]",
            found.join(", ")
        ))
    })
}

/// The `lsn` column as u64: int64, uint64, or text `X/Y`. A null LSN is 0 (PostgreSQL's
/// InvalidXLogRecPtr, "unknown").
pub fn lsns(batch: &RecordBatch, first_row: u64) -> Result<Vec<u64>, CaptureError> {
    let array = column(batch, "lsn")?;
    let bad_text = |row: usize, text: &str| {
        CaptureError(format!(
            "row {}: lsn {text:?} is not an LSN (expected X/Y with hexadecimal X and Y, as 16/B374D848)",
            first_row + row as u64
        ))
    };
    let parse = |row: usize, text: Option<&str>| -> Result<u64, CaptureError> {
        match text {
            None => Ok(0),
            Some(text) => Lsn::from_str(text)
                .map(|lsn| lsn.0)
                .map_err(|_| bad_text(row, text)),
        }
    };
    match array.data_type() {
        DataType::UInt64 => Ok(array
            .as_primitive::<UInt64Type>()
            .iter()
            .map(|v| v.unwrap_or(0))
            .collect()),
        DataType::Int64 => array
            .as_primitive::<Int64Type>()
            .iter()
            .enumerate()
            .map(|(row, v)| {
                u64::try_from(v.unwrap_or(0)).map_err(|_| {
                    CaptureError(format!(
                        "row {}: lsn {} is negative",
                        first_row + row as u64,
                        v.unwrap_or(0)
                    ))
                })
            })
            .collect(),
        DataType::Utf8 => {
            // The common case (a capture straight from pg_logical_slot_get_binary_changes):
            // each value's bytes parsed in place, without a &str or a Result per row.
            let strings = array.as_string::<i32>();
            if strings.null_count() == 0 {
                let (offsets, values) = (strings.value_offsets(), strings.values().as_slice());
                let mut out = Vec::with_capacity(strings.len());
                for (row, w) in offsets.windows(2).enumerate() {
                    let text = &values[w[0] as usize..w[1] as usize];
                    match Lsn::from_ascii(text) {
                        Some(lsn) => out.push(lsn.0),
                        None => return Err(bad_text(row, strings.value(row))),
                    }
                }
                return Ok(out);
            }
            strings
                .iter()
                .enumerate()
                .map(|(r, t)| parse(r, t))
                .collect()
        }
        DataType::LargeUtf8 => array
            .as_string::<i64>()
            .iter()
            .enumerate()
            .map(|(r, t)| parse(r, t))
            .collect(),
        DataType::Utf8View => array
            .as_string_view()
            .iter()
            .enumerate()
            .map(|(r, t)| parse(r, t))
            .collect(),
        other => Err(CaptureError(format!(
            "column lsn has type {other}; expected text (X/Y), int64 or uint64"
        ))),
    }
}

/// The `data` column, in the shape the decoder takes without copying.
pub enum Messages {
    Binary(BinaryArray),
    LargeBinary(LargeBinaryArray),
    View(BinaryViewArray),
}

/// The `data` column. Binary, large_binary and binary_view are taken as they are (the
/// decoder references their buffers, nothing is copied); text holding bytea's output (hex
/// or escape) is decoded into a new binary array.
pub fn messages(batch: &RecordBatch, first_row: u64) -> Result<Messages, CaptureError> {
    let array = column(batch, "data")?;
    if let Some(row) = array
        .logical_nulls()
        .and_then(|nulls| nulls.iter().position(|valid| !valid))
    {
        return Err(CaptureError(format!(
            "row {}: data is null; every row must hold one message",
            first_row + row as u64
        )));
    }
    Ok(match array.data_type() {
        DataType::Binary => Messages::Binary(array.as_binary::<i32>().clone()),
        DataType::LargeBinary => Messages::LargeBinary(array.as_binary::<i64>().clone()),
        DataType::BinaryView => Messages::View(array.as_binary_view().clone()),
        DataType::Utf8 => {
            Messages::Binary(text_messages(array.as_string::<i32>().iter(), first_row)?)
        }
        DataType::LargeUtf8 => {
            Messages::Binary(text_messages(array.as_string::<i64>().iter(), first_row)?)
        }
        other => {
            return Err(CaptureError(format!(
                "column data has type {other}; expected binary (bytea), large_binary, binary_view, \
                 or text holding bytea's output (hex \\x..., or escape)"
            )))
        }
    })
}

/// A text `data` column holding bytea's text output, as `COPY ... TO ... (FORMAT csv)`
/// writes it: hex (`\x0123...`, the default `bytea_output`) or escape (`bytea_output =
/// escape`: printable bytes as themselves, `\\` for a backslash, `\ooo` octal for the
/// rest), told apart by the `\x` an escape output cannot start with; decoded into a new
/// binary array (a copy; text captures are for convenience, binary ones for speed).
fn text_messages<'a>(
    values: impl Iterator<Item = Option<&'a str>>,
    first_row: u64,
) -> Result<BinaryArray, CaptureError> {
    let mut builder = arrow_array::builder::BinaryBuilder::new();
    let mut bytes = Vec::new();
    for (row, value) in values.enumerate() {
        let value = value.unwrap_or_default();
        let bad = |what: &str| {
            CaptureError(format!(
                "row {}: data is text but not bytea output, hex or escape ({what}): {:?}",
                first_row + row as u64,
                value.chars().take(24).collect::<String>()
            ))
        };
        bytes.clear();
        match value.strip_prefix("\\x") {
            Some(hex) => unhex(hex.as_bytes(), &mut bytes).map_err(bad)?,
            None => unescape(value.as_bytes(), &mut bytes).map_err(bad)?,
        }
        builder.append_value(&bytes);
    }
    Ok(builder.finish())
}

/// bytea's hex output after its `\x`, into `out`; what is wrong with it.
fn unhex(hex: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    if !hex.len().is_multiple_of(2) {
        return Err("odd number of hex digits");
    }
    for pair in hex.chunks_exact(2) {
        let digit = |c: u8| (c as char).to_digit(16).ok_or("non-hex character");
        out.push((digit(pair[0])? * 16 + digit(pair[1])?) as u8);
    }
    Ok(())
}

/// bytea's escape output into `out`; what is wrong with it.
fn unescape(text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'\\' if text.get(i + 1) == Some(&b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            b'\\' => {
                let octal = text.get(i + 1..i + 4).ok_or("a backslash without three octal digits")?;
                if !octal.iter().all(|c| (b'0'..=b'7').contains(c)) || octal[0] > b'3' {
                    return Err("a backslash without three octal digits");
                }
                out.push(octal.iter().fold(0u8, |v, c| v * 8 + (c - b'0')));
                i += 4;
            }
            c if c.is_ascii() => {
                out.push(c);
                i += 1;
            }
            _ => return Err("a character outside ASCII"),
        }
    }
    Ok(())
}

impl Messages {
    /// The buffers every message lies in (a view array's short messages lie in its views).
    pub fn buffers(&self) -> Vec<arrow_buffer::Buffer> {
        match self {
            Messages::Binary(a) => vec![a.values().clone()],
            Messages::LargeBinary(a) => vec![a.values().clone()],
            Messages::View(a) => {
                let mut out = a.data_buffers().to_vec();
                out.push(a.views().inner().clone());
                out
            }
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Messages::Binary(a) => a.len(),
            Messages::LargeBinary(a) => a.len(),
            Messages::View(a) => a.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message of row `i`.
    pub fn value(&self, i: usize) -> &[u8] {
        match self {
            Messages::Binary(a) => a.value(i),
            Messages::LargeBinary(a) => a.value(i),
            Messages::View(a) => a.value(i),
        }
    }
}

/// An integer column by name as u64/i64 (int8…int64, uint8…uint64; null is 0), or None
/// when the batch has no such column.
fn integers(batch: &RecordBatch, name: &str, first_row: u64) -> Result<Option<Vec<i64>>, CaptureError> {
    use arrow_array::types::*;
    let Some(array) = batch.column_by_name(name) else { return Ok(None) };
    macro_rules! ints {
        ($t:ty) => {
            array.as_primitive::<$t>().iter().map(|v| v.map_or(0, |v| v as i64)).collect()
        };
    }
    let values: Vec<i64> = match array.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => ints!(UInt64Type),
        DataType::Null => vec![0; array.len()],
        other => {
            return Err(CaptureError(format!(
                "column {name} has type {other}; expected an integer (rows from {first_row})"
            )))
        }
    };
    Ok(Some(values))
}

/// A capture batch normalised: LSNs, xids (0 without an `xid` column), messages, and the
/// optional tie-breaker column `_tb` (a capture-time row number).
pub struct Capture {
    pub lsns: Vec<u64>,
    pub xids: Vec<u64>,
    pub messages: Messages,
    pub tiebreak: Option<Vec<i64>>,
}

impl Capture {
    pub fn from_batch(batch: &RecordBatch, first_row: u64) -> Result<Capture, CaptureError> {
        let lsns = lsns(batch, first_row)?;
        let messages = messages(batch, first_row)?;
        let xids = match integers(batch, "xid", first_row)? {
            Some(x) => x.into_iter().map(|v| v as u64).collect(),
            None => vec![0; lsns.len()],
        };
        let tiebreak = integers(batch, "_tb", first_row)?;
        Ok(Capture { lsns, xids, messages, tiebreak })
    }

    /// The rows, borrowing the messages.
    pub fn rows(&self) -> impl Iterator<Item = crate::canonical::CaptureRow<'_>> {
        (0..self.lsns.len()).map(move |i| crate::canonical::CaptureRow {
            lsn: self.lsns[i],
            xid: self.xids[i],
            data: self.messages.value(i),
            tiebreak: self.tiebreak.as_ref().map_or(0, |t| t[i]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::text_messages;
    use arrow_array::Array;

    /// Every byte value, written as PostgreSQL's byteaout writes it in each format.
    fn outputs() -> (Vec<u8>, String, String) {
        let bytes: Vec<u8> = (0..=255u8).chain([b'\\', b'\\', 0, b'x', b'B']).collect();
        let hex = format!("\\x{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let escape = bytes
            .iter()
            .map(|&b| match b {
                b'\\' => "\\\\".to_string(),
                0x20..=0x7e => (b as char).to_string(),
                _ => format!("\\{b:03o}"),
            })
            .collect::<String>();
        (bytes, hex, escape)
    }

    #[test]
    fn hex_and_escape_output_give_the_bytes() {
        let (bytes, hex, escape) = outputs();
        let got = text_messages([Some(hex.as_str()), Some(escape.as_str()), Some("\\x"), Some("")].into_iter(), 0).unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got.value(0), bytes.as_slice());
        assert_eq!(got.value(1), bytes.as_slice());
        assert!(got.value(2).is_empty() && got.value(3).is_empty());
    }

    #[test]
    fn malformed_output_is_an_error_naming_the_row() {
        for (text, what) in [
            ("\\x0", "odd number of hex digits"),
            ("\\xzz", "non-hex character"),
            ("B\\00", "three octal digits"),
            ("B\\400", "three octal digits"),
            ("B\\08a", "three octal digits"),
            ("Bé", "outside ASCII"),
        ] {
            let err = text_messages([Some("\\x42"), Some(text)].into_iter(), 10).unwrap_err().to_string();
            assert!(err.contains("row 11") && err.contains(what), "{text}: {err}");
        }
    }
}
