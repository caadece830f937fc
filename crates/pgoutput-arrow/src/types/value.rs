//! What the type decoders share: the value's source in its input buffer, the error of one
//! value, and what to do with values that the Arrow type cannot hold. A module of its own so
//! that the decoders (siblings) need nothing from `types/mod.rs`.

/// What to do with values that no value of the column's Arrow type can hold
/// (numeric NaN in a decimal, time 24:00:00, timestamps out of i64 microseconds since 1970, ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpecialValues {
    /// The typed column holds null and the row's `_special` column maps the column's name
    /// to PostgreSQL's text output of the value (the default: never stops, never loses a
    /// value, and the column keeps its type). ±infinity dates and timestamps map to their
    /// documented sentinels, as under `Error`.
    #[default]
    Keep,
    /// A [`ValueError`]. ±infinity dates and timestamps still map to their documented sentinels.
    Error,
    /// A null, and ±infinity dates, timestamps and intervals become null too.
    Null,
    /// Columns whose type can carry special values (date, time, timestamp, timestamptz,
    /// interval, numeric with a typmod) are Utf8 with PostgreSQL's text output.
    Text,
}

/// Which dates and timestamps a typed column holds; the others are special values (see
/// [`SpecialValues`]): null in the column and PostgreSQL's text in `_special` by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DatetimeRange {
    /// Every value of the Arrow type: date32 and timestamp[us] since 1970, ±infinity as the
    /// type's extreme values (the crate's default; DuckDB and polars read them).
    #[default]
    Arrow,
    /// What Python's `datetime` holds, so that `to_pandas()`, `to_pylist()` and `as_py()` take
    /// every value: dates and timestamps from 0001-01-01 to 9999-12-31 (no BC, no years past
    /// 9999); ±infinity is special. The Python package's default.
    Python,
    /// What pandas' `datetime64[ns]` and Python's `datetime` hold, so that PySpark's `collect()`
    /// and `toPandas()` can take every value: dates from 0001-01-01 to 9999-12-31 and
    /// timestamps from 1677-09-22 to 2262-04-10 (less a day at each end for a time zone's
    /// offset); ±infinity is special.
    Pandas,
}

impl DatetimeRange {
    /// Days since 1970 of 0001-01-01 and 9999-12-31.
    const PYTHON_DAYS: (i32, i32) = (-719_162, 2_932_896);
    /// Microseconds since 1970 of 0001-01-01 00:00:00 and 9999-12-31 23:59:59.999999.
    const PYTHON_MICROS: (i64, i64) = (-62_135_596_800_000_000, 253_402_300_799_999_999);
    /// Microseconds since 1970 of 1677-09-22 00:00:00 and 2262-04-10 23:59:59.999999.
    const PANDAS_MICROS: (i64, i64) = (-9_223_286_400_000_000, 9_223_286_399_999_999);

    /// The dates (days since 1970) a typed column holds; None: every date32.
    pub(crate) fn days(self) -> Option<(i32, i32)> {
        match self {
            DatetimeRange::Arrow => None,
            DatetimeRange::Python | DatetimeRange::Pandas => Some(Self::PYTHON_DAYS),
        }
    }

    /// The timestamps (µs since 1970) a typed column holds; None: every timestamp[us].
    pub(crate) fn micros(self) -> Option<(i64, i64)> {
        match self {
            DatetimeRange::Arrow => None,
            DatetimeRange::Python => Some(Self::PYTHON_MICROS),
            DatetimeRange::Pandas => Some(Self::PANDAS_MICROS),
        }
    }

    /// The option's name in Python (`datetime_range=`).
    pub fn name(self) -> &'static str {
        match self {
            DatetimeRange::Arrow => "arrow",
            DatetimeRange::Python => "python",
            DatetimeRange::Pandas => "pandas",
        }
    }
}

/// Where a value's bytes live in an input buffer that the output may reference (zero copy).
#[derive(Clone, Copy)]
pub struct Source<'a> {
    pub buffer: &'a arrow_buffer::Buffer,
    /// Unique id of that buffer for the decoder's lifetime.
    pub buffer_id: u64,
    /// Offset of the value's first byte within `buffer`.
    pub offset: usize,
}

impl<'a> Source<'a> {
    /// The source of the sub-slice `at..` of the value this source describes.
    pub(super) fn advance(self, at: usize) -> Source<'a> {
        Source { offset: self.offset.saturating_add(at), ..self }
    }
}

/// What went wrong with one value; the caller adds table, column and LSN.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValueError {
    pub message: String,
    /// The value is valid in PostgreSQL but the column's Arrow type cannot hold it (a
    /// special value); otherwise the value is malformed.
    pub special: bool,
}

impl ValueError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        ValueError { message: message.into(), special: false }
    }

    pub(crate) fn special(message: impl Into<String>) -> Self {
        ValueError { message: message.into(), special: true }
    }
}

pub(crate) type Result<T> = std::result::Result<T, ValueError>;

/// A value that exists in PostgreSQL but that the Arrow type cannot hold.
pub(crate) struct Special(pub String);
