//! The choices that decide how columns are typed ([`TypeOptions`]) and what a column is
//! ([`PgColumnType`]): data only, read by the builders in `mod.rs`.

use arrow_schema::{DataType, Field};

use super::datetime::{DateOrder, TimeZoneName};
use super::value::{DatetimeRange, SpecialValues};

/// How one published column is typed: from the Relation message (+ Type messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgColumnType {
    pub oid: u32,
    pub typmod: i32,
    /// From a Type message, for types that are not built in.
    pub type_name: Option<String>,
}

/// How interval columns are typed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IntervalType {
    /// `struct<months: int32, days: int32, microseconds: int64>` (the default): PostgreSQL's
    /// own three fields, so every interval is exact (±infinity: every field at its maximum or
    /// minimum, as PostgreSQL stores them), and every consumer takes it (polars, Spark and
    /// Delta have no month-day-nanosecond interval).
    #[default]
    Struct,
    /// Arrow's `month_day_nano` interval (DuckDB's INTERVAL, pandas' DateOffset); a time part
    /// beyond i64 nanoseconds (about 106751 days) is a special value.
    MonthDayNano,
}

/// How uuid columns are typed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UuidType {
    /// Utf8, uuid_out's canonical text (the default): pyarrow sorts, groups and joins it,
    /// pandas converts lists of it, Spark and Delta take it as it is.
    #[default]
    Text,
    /// FixedSizeBinary(16) with the `arrow.uuid` extension (pyarrow 26 neither sorts nor
    /// groups by it; pandas cannot convert a list of it).
    FixedSizeBinary,
}

/// How time (without time zone) columns are typed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeType {
    /// Utf8, time_out's text `HH:MM:SS[.ffffff]` (the default): exact (`24:00:00` too),
    /// sorted correctly as text, and taken by every consumer, Spark's default session
    /// included (it refuses TIME unless `spark.sql.timeType.enabled`).
    #[default]
    Text,
    /// Time64(µs) (pyarrow's time, polars' Time, DuckDB's TIME); `24:00:00` is a special value.
    Time64,
}

/// The fields of an interval column typed [`IntervalType::Struct`].
pub fn interval_struct_fields() -> arrow_schema::Fields {
    arrow_schema::Fields::from(vec![
        Field::new("months", DataType::Int32, true),
        Field::new("days", DataType::Int32, true),
        Field::new("microseconds", DataType::Int64, true),
    ])
}

/// Whether `fields` are those of an interval typed [`IntervalType::Struct`].
pub fn is_interval_struct(fields: &arrow_schema::Fields) -> bool {
    fields.len() == 3
        && fields.iter().zip(interval_struct_fields().iter()).all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
}

/// Choices that change how columns are typed.
#[derive(Clone, Debug)]
pub struct TypeOptions {
    pub special_values: SpecialValues,
    /// Text and binary columns as Utf8View/BinaryView pointing into input buffers (default
    /// false: Utf8/Binary, which every consumer takes; pyarrow's filter, sort, take and join
    /// and pandas' list conversion refuse views).
    pub views: bool,
    /// How interval columns are typed (default [`IntervalType::Struct`]).
    pub interval: IntervalType,
    /// How uuid columns are typed (default [`UuidType::Text`]).
    pub uuid: UuidType,
    /// How time columns are typed (default [`TimeType::Text`]).
    pub time: TimeType,
    /// The stream was started with `binary 'true'` (default false). Only types that cannot be
    /// decoded depend on it: they become Binary (the raw send bytes) instead of Utf8 (the text).
    pub binary: bool,
    /// Dimensions of array columns (default 1): lists nested this deep. PostgreSQL does not
    /// send them, and one column may hold arrays of any dimension; a value of another
    /// dimension is a special value. 0: arrays are Utf8 with PostgreSQL's text (any shape).
    pub array_ndims: usize,
    /// A list column whose values so far are all null or empty, and that has not yet
    /// finished a batch with rows, takes the dimensions of its first non-empty array
    /// (default true): `int4[][]` columns come out as nested lists without options.
    pub learn_array_ndims: bool,
    /// DateStyle's field order that text-mode SQL and Postgres style dates were printed in
    /// (default MDY, PostgreSQL's): only `01/02/2026` and `01-02-2026` need it.
    pub date_order: DateOrder,
    /// The TimeZone setting that text-mode timestamptz values in the SQL, German or Postgres
    /// DateStyle were printed under: they carry a zone abbreviation (`EST`, `LMT`) instead of
    /// an offset. Without it only numeric abbreviations, UTC and GMT are read; ISO's
    /// offsets never need it.
    pub timezone: Option<TimeZoneName>,
    /// Which dates and timestamps the typed columns hold (default: every value of the Arrow
    /// type); the others are special values. Spark asks for [`DatetimeRange::Pandas`].
    pub datetime_range: DatetimeRange,
}

impl Default for TypeOptions {
    fn default() -> Self {
        TypeOptions {
            special_values: SpecialValues::Keep,
            views: false,
            interval: IntervalType::Struct,
            uuid: UuidType::Text,
            time: TimeType::Text,
            binary: false,
            array_ndims: 1,
            learn_array_ndims: true,
            date_order: DateOrder::Mdy,
            timezone: None,
            datetime_range: DatetimeRange::Arrow,
        }
    }
}
