//! A group's batches read row by row: the columns every change has, and each kind of
//! change's source (a table's rows, TRUNCATEs, logical decoding messages).

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{ArrowError, DataType, Field, Schema};

use super::value::{key, Column, Style};

/// One published column: its name, its key as written before its value, its values.
pub(super) type NamedColumn = (String, Vec<u8>, Column);
/// The transaction columns every kind of change has.
pub(super) struct Meta {
    pub(super) lsn: Ints,
    pub(super) commit: Ints,
    pub(super) ts: Ints,
    pub(super) xid: Ints,
    pub(super) seq: Ints,
}

impl Meta {
    pub(super) fn new(batch: &RecordBatch) -> Result<Meta, ArrowError> {
        Ok(Meta {
            lsn: Ints::new(batch, "_lsn")?,
            commit: Ints::new(batch, "_commit_lsn")?,
            ts: Ints::new(batch, "_commit_ts")?,
            xid: Ints::new(batch, "_xid")?,
            seq: Ints::new(batch, "_seq")?,
        })
    }
}

/// An integer (or timestamp) column as i64, or none when the batch has no such column.
pub(super) struct Ints(pub(super) Option<Int64Array>);

impl Ints {
    pub(super) fn new(batch: &RecordBatch, name: &str) -> Result<Ints, ArrowError> {
        let Some(column) = batch.column_by_name(name) else { return Ok(Ints(None)) };
        let column = match column.data_type() {
            DataType::Int64 => column.clone(),
            _ => arrow_cast::cast(column, &DataType::Int64)?,
        };
        Ok(Ints(Some(column.as_primitive::<Int64Type>().clone())))
    }

    pub(super) fn get(&self, i: usize) -> Option<i64> {
        self.0.as_ref().filter(|a| a.is_valid(i)).map(|a| a.value(i))
    }
}

/// A text column of any layout (utf8, large, view, dictionary: cast to utf8 when needed).
pub(super) struct Strs(pub(super) Option<ArrayRef>);

impl Strs {
    pub(super) fn new(column: Option<&ArrayRef>) -> Result<Strs, ArrowError> {
        let Some(column) = column else { return Ok(Strs(None)) };
        Ok(Strs(Some(match column.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => column.clone(),
            _ => arrow_cast::cast(column, &DataType::Utf8)?,
        })))
    }

    pub(super) fn get(&self, i: usize) -> Option<&str> {
        let a = self.0.as_ref()?;
        if a.is_null(i) {
            return None;
        }
        Some(match a.data_type() {
            DataType::Utf8View => a.as_string_view().value(i),
            DataType::LargeUtf8 => a.as_string::<i64>().value(i),
            _ => a.as_string::<i32>().value(i),
        })
    }
}

/// A boolean column, or none.
pub(super) struct Bools(pub(super) Option<ArrayRef>);

impl Bools {
    pub(super) fn get(&self, i: usize) -> Option<bool> {
        let a = self.0.as_ref()?;
        (a.data_type() == &DataType::Boolean && a.is_valid(i)).then(|| a.as_boolean().value(i))
    }
}

/// A list<utf8> column (`_unchanged`, a truncate's `relations`).
pub(super) struct StrList {
    pub(super) offsets: Option<OffsetBuffer<i32>>,
    pub(super) nulls: Option<NullBuffer>,
    pub(super) values: Strs,
}

impl StrList {
    pub(super) fn new(column: Option<&ArrayRef>) -> Result<StrList, ArrowError> {
        let Some(column) = column else { return Ok(StrList { offsets: None, nulls: None, values: Strs(None) }) };
        let list = match column.data_type() {
            DataType::List(_) => column.clone(),
            _ => arrow_cast::cast(column, &DataType::List(Field::new("item", DataType::Utf8, true).into()))?,
        };
        let list = list.as_list::<i32>();
        Ok(StrList { offsets: Some(list.offsets().clone()), nulls: list.nulls().cloned(), values: Strs::new(Some(list.values()))? })
    }

    pub(super) fn range(&self, row: usize) -> std::ops::Range<usize> {
        match &self.offsets {
            Some(o) if !self.nulls.as_ref().is_some_and(|n| n.is_null(row)) => o[row] as usize..o[row + 1] as usize,
            _ => 0..0,
        }
    }

    pub(super) fn get(&self, j: usize) -> &str {
        self.values.get(j).unwrap_or("")
    }
}

/// A map<utf8, utf8> column (`_special`).
pub(super) struct StrMap {
    pub(super) offsets: OffsetBuffer<i32>,
    pub(super) keys: Strs,
    pub(super) values: Strs,
}

pub(super) struct Before {
    pub(super) nulls: Option<NullBuffer>,
    pub(super) fields: Vec<NamedColumn>,
}

impl Before {
    pub(super) fn is_null(&self, row: usize) -> bool {
        self.nulls.as_ref().is_some_and(|n| n.is_null(row))
    }
}

pub(super) struct TableSource {
    pub(super) name: String,
    pub(super) name_chars: usize,
    pub(super) rows: usize,
    pub(super) columns: Vec<NamedColumn>,
    pub(super) before: Option<Before>,
    pub(super) unchanged: Option<StrList>,
    pub(super) special: Option<StrMap>,
    pub(super) op: Strs,
    pub(super) meta: Meta,
}

/// A published column, not one of the decoder's metadata columns (`_op`, `_lsn`, ...,
/// `_special`): the decoder gives every published column its PostgreSQL type in the field
/// metadata (the rule `unify_schemas` uses), so a table's own column named `_seq` is still
/// printed.
pub(super) fn is_data_field(f: &Field) -> bool {
    f.metadata().contains_key("pg.type_oid")
}

impl TableSource {
    pub(super) fn new(name: &str, batch: &RecordBatch, style: Style) -> Result<TableSource, ArrowError> {
        let schema = batch.schema();
        let columns = named_columns(&schema, batch.columns(), style, is_data_field)?;
        let before = match batch.column_by_name("_before").map(|c| c.as_struct_opt()) {
            Some(Some(s)) => Some(Before::new(s, &schema, style)?),
            _ => None,
        };
        let unchanged = batch.column_by_name("_unchanged").map(|c| StrList::new(Some(c))).transpose()?;
        let special = match batch.column_by_name("_special") {
            Some(c) => match c.as_map_opt() {
                Some(m) => Some(StrMap {
                    offsets: m.offsets().clone(),
                    keys: Strs::new(Some(m.keys()))?,
                    values: Strs::new(Some(m.values()))?,
                }),
                None => None,
            },
            None => None,
        };
        Ok(TableSource {
            name: name.to_string(),
            name_chars: name.chars().count(),
            rows: batch.num_rows(),
            columns,
            before,
            unchanged,
            special,
            op: Strs::new(batch.column_by_name("_op"))?,
            meta: Meta::new(batch)?,
        })
    }
}

impl Before {
    /// The old key or row. An old key ('K', replica identity not full) has only the key
    /// columns: the others are not NULL, they were not sent.
    pub(super) fn new(s: &StructArray, schema: &Schema, style: Style) -> Result<Before, ArrowError> {
        let full = schema.metadata().get("pg.replica_identity").map(String::as_str) == Some("full");
        let fields = s
            .fields()
            .iter()
            .zip(s.columns())
            .filter(|(f, _)| full || f.metadata().get("pg.key").map(String::as_str) == Some("true"))
            .map(|(f, c)| Ok((f.name().clone(), key(f.name(), style), Column::new(c, Some(f), style)?)))
            .collect::<Result<_, ArrowError>>()?;
        Ok(Before { nulls: s.logical_nulls(), fields })
    }
}

pub(super) fn named_columns(
    schema: &Schema,
    columns: &[ArrayRef],
    style: Style,
    keep: impl Fn(&Field) -> bool,
) -> Result<Vec<NamedColumn>, ArrowError> {
    schema
        .fields()
        .iter()
        .zip(columns)
        .filter(|(f, _)| keep(f))
        .map(|(f, c)| Ok((f.name().clone(), key(f.name(), style), Column::new(c, Some(f), style)?)))
        .collect()
}

pub(super) struct TruncateSource {
    pub(super) rows: usize,
    pub(super) relations: StrList,
    pub(super) cascade: Bools,
    pub(super) restart_identity: Bools,
    pub(super) meta: Meta,
}

impl TruncateSource {
    pub(super) fn new(batch: &RecordBatch) -> Result<TruncateSource, ArrowError> {
        Ok(TruncateSource {
            rows: batch.num_rows(),
            relations: StrList::new(batch.column_by_name("relations"))?,
            cascade: Bools(batch.column_by_name("cascade").cloned()),
            restart_identity: Bools(batch.column_by_name("restart_identity").cloned()),
            meta: Meta::new(batch)?,
        })
    }
}

pub(super) struct MessageSource {
    pub(super) rows: usize,
    pub(super) prefix: Strs,
    pub(super) content: Column,
    pub(super) raw: Option<ArrayRef>,
    pub(super) transactional: Bools,
    pub(super) meta: Meta,
}

impl MessageSource {
    pub(super) fn new(batch: &RecordBatch, style: Style) -> Result<MessageSource, ArrowError> {
        let raw = batch.column_by_name("content").cloned();
        let content = match &raw {
            Some(c) => Column::new(c, None, style)?,
            None => Column::new(&arrow_array::new_null_array(&DataType::Null, batch.num_rows()), None, style)?,
        };
        Ok(MessageSource {
            rows: batch.num_rows(),
            prefix: Strs::new(batch.column_by_name("prefix"))?,
            content,
            raw,
            transactional: Bools(batch.column_by_name("transactional").cloned()),
            meta: Meta::new(batch)?,
        })
    }

    pub(super) fn content_bytes(&self, row: usize) -> Option<&[u8]> {
        let a = self.raw.as_ref().filter(|a| a.is_valid(row))?;
        Some(match a.data_type() {
            DataType::Binary => a.as_binary::<i32>().value(row),
            DataType::LargeBinary => a.as_binary::<i64>().value(row),
            DataType::BinaryView => a.as_binary_view().value(row),
            _ => return None,
        })
    }
}
