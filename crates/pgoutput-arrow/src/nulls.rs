//! All-null arrays that share one zeroed buffer: `_before` of a batch without old values.

use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::DataType;

/// Bytes of zeros that [`null_data`] takes from the shared buffer for an all-null array of
/// `data_type` and `len` rows: its widest buffer.
pub(crate) fn zero_bytes(data_type: &DataType, len: usize) -> usize {
    match data_type {
        DataType::FixedSizeBinary(width) => usize::try_from(*width).unwrap_or(0) * len,
        DataType::Struct(fields) => fields.iter().map(|f| zero_bytes(f.data_type(), len)).max().unwrap_or(0),
        other => other.primitive_width().unwrap_or(0) * len,
    }
    .max(len.div_ceil(8))
}

/// An all-null array of `len` rows whose values and validity are slices of `zeros`, one
/// zeroed buffer shared by every column: `_before` of a batch without old values is a child
/// per column, for which arrow's `new_null_array` zeroes a buffer each (2.5% of the
/// instructions of the wide and numts captures in `memset`). Only fixed-width types (and
/// structs of them) share: their check in `try_new` is of lengths, where offsets and views
/// would be checked value by value (dearer than zeroing them: +3% on pgbench-binary). Any
/// other type, or one that does not fit in `zeros`, gets its own buffers as in arrow.
pub(crate) fn null_data(data_type: &DataType, len: usize, zeros: &Buffer) -> ArrayData {
    let bytes = |n: usize| (n <= zeros.len()).then(|| zeros.slice_with_length(0, n));
    let shared = || -> Option<(Vec<Buffer>, Vec<ArrayData>)> {
        Some(match data_type {
            DataType::Boolean => (vec![bytes(len.div_ceil(8))?], vec![]),
            DataType::FixedSizeBinary(width) => (vec![bytes(usize::try_from(*width).ok()? * len)?], vec![]),
            DataType::Struct(fields) => (vec![], fields.iter().map(|f| null_data(f.data_type(), len, zeros)).collect()),
            other => (vec![bytes(other.primitive_width()? * len)?], vec![]),
        })
    };
    shared()
        .and_then(|(buffers, children)| {
            ArrayData::try_new(data_type.clone(), len, Some(bytes(len.div_ceil(8))?), 0, buffers, children).ok()
        })
        .unwrap_or_else(|| ArrayData::new_null(data_type, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{special_type, unchanged_type};
    use arrow_buffer::MutableBuffer;
    use arrow_schema::{Field, IntervalUnit, TimeUnit};
    use std::sync::Arc;

    /// The all-null arrays on shared zeros equal arrow's own, for every type a column or a
    /// metadata column takes, with zeros enough and too few.
    #[test]
    fn null_data_on_shared_zeros_is_new_null() {
        let item = |dt: DataType| Arc::new(Field::new("item", dt, true));
        let types = vec![
            DataType::Boolean,
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::Float32,
            DataType::Float64,
            DataType::Decimal128(12, 2),
            DataType::Decimal256(40, 2),
            DataType::Date32,
            DataType::Time64(TimeUnit::Microsecond),
            DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
            DataType::Interval(IntervalUnit::MonthDayNano),
            DataType::FixedSizeBinary(16),
            DataType::FixedSizeBinary(40),
            DataType::Utf8,
            DataType::Binary,
            DataType::LargeUtf8,
            DataType::Utf8View,
            DataType::BinaryView,
            DataType::List(item(DataType::Int32)),
            DataType::List(item(DataType::List(item(DataType::Utf8)))),
            DataType::Null,
            special_type(),
            unchanged_type(),
            DataType::Struct(crate::types::interval_struct_fields()),
        ];
        let all = DataType::Struct(types.iter().enumerate().map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true)).collect());
        for len in [0, 1, 7, 8, 9, 1000] {
            for zeros in [zero_bytes(&all, len), 3, 0] {
                let zeros: Buffer = MutableBuffer::from_len_zeroed(zeros).into();
                for dt in types.iter().chain([&all]) {
                    let ours = null_data(dt, len, &zeros);
                    ours.validate_full().unwrap_or_else(|e| panic!("{dt} of {len}: {e}"));
                    assert_eq!(ours, ArrayData::new_null(dt, len), "{dt} of {len}");
                    assert_eq!(ours.null_count(), if *dt == DataType::Null { 0 } else { len }, "{dt} of {len}");
                }
            }
        }
    }
}
