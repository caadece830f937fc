//! Schema evolution: the batches of a table's versions brought to one schema.
//!
//! The unified schema has the newest version's published columns in its order,
//! then the columns that only older versions have (dropped since), newest first,
//! then the metadata columns (with `_before` holding the unified columns). Rows of
//! a version that lacks a column get null there.
//!
//! Columns are the same column across versions when their `pg.column_id` field
//! metadata is equal (the decoder's catalog keeps it across a RENAME COLUMN; see
//! `catalog::column_ids`), else when their names are (an older version's name against the
//! name the column has in the newest, so the outcome depends on the set of versions and
//! the newest alone, not on which of them had rows); the newest name is kept. A unified
//! column that took in a column of another id by its name (one dropped and another added
//! under its name) lists that id in `pg.column_id.merged`, so that the older versions of
//! that column (under its earlier names) come to it too: a column renamed, then dropped,
//! then added again under the new name is one column, all its versions' values in it.
//!
//! When a column's type changed (ALTER COLUMN … TYPE, or a column dropped and re-added
//! under its name), the unified type is the one that holds both losslessly: the newer
//! type when the older casts to it without loss (int4 → int8, numeric(10,2) →
//! numeric(12,2), int → numeric, date → timestamp, varchar → text), else the older when
//! the newer casts to it without loss (int8 → int4 keeps int8). Two types that neither
//! holds (text → int, int → bool, int[] → text) make the column utf8 holding PostgreSQL's
//! text output of every value (see `types::to_pg_text`); the field then gets the metadata
//! `pg.unified` = `text`. Unifying never fails: any history of a table decodes.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Date32Type;
use arrow_array::{
    new_null_array, Array, ArrayRef, ListArray, MapArray, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_cast::{cast_with_options, CastOptions};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

use crate::output::TableVersion;
use crate::error::DecodeError;
use crate::types::to_pg_text;

/// Published columns carry the PostgreSQL type in their metadata; the metadata
/// columns do not.
fn is_data_field(f: &Field) -> bool {
    f.metadata().contains_key("pg.type_oid")
}

fn table_name(schema: &Schema) -> String {
    schema.metadata().get("pg.table").cloned().unwrap_or_else(|| "the table".to_string())
}

/// Whether every value of `from` is a value of `to`, with the same meaning.
pub fn lossless(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    if from == to {
        return true;
    }
    let int_digits = |t: &DataType| match t {
        Int8 | UInt8 => Some(3),
        Int16 | UInt16 => Some(5),
        Int32 | UInt32 => Some(10),
        Int64 => Some(19),
        UInt64 => Some(20),
        _ => None,
    };
    match (from, to) {
        (Null, _) => true,
        (Int8, Int16 | Int32 | Int64) | (Int16, Int32 | Int64) | (Int32, Int64) => true,
        (UInt8, UInt16 | UInt32 | UInt64 | Int16 | Int32 | Int64)
        | (UInt16, UInt32 | UInt64 | Int32 | Int64)
        | (UInt32, UInt64 | Int64) => true,
        (Int8 | Int16 | UInt8 | UInt16, Float32 | Float64) | (Int32 | UInt32, Float64) | (Float32, Float64) => true,
        (Decimal128(p1, s1), Decimal128(p2, s2)) => s2 >= s1 && (*p2 as i16 - *s2 as i16) >= (*p1 as i16 - *s1 as i16),
        (f, Decimal128(p, s)) if int_digits(f).is_some() => {
            *s >= 0 && (*p as i16 - *s as i16) >= int_digits(f).unwrap_or(99)
        }
        (Utf8, Utf8View | LargeUtf8) | (Utf8View, Utf8 | LargeUtf8) | (LargeUtf8, Utf8View) => true,
        (Binary, BinaryView | LargeBinary) | (BinaryView, Binary | LargeBinary) | (LargeBinary, BinaryView) => true,
        (Date32, Timestamp(TimeUnit::Microsecond, None)) => true,
        (List(a), List(b)) | (LargeList(a), LargeList(b)) | (List(a), LargeList(b)) => {
            lossless(a.data_type(), b.data_type())
        }
        _ => false,
    }
}

/// The type both `older` and `newer` are cast to, and whether it is the text fallback.
fn common_type(older: &DataType, newer: &DataType) -> (DataType, bool) {
    if lossless(older, newer) {
        (newer.clone(), false)
    } else if lossless(newer, older) {
        (older.clone(), false)
    } else {
        (DataType::Utf8, true)
    }
}

const COLUMN_ID: &str = "pg.column_id";
const MERGED_IDS: &str = "pg.column_id.merged";

/// The column ids `f` stands for: its `pg.column_id`, then those a unified schema merged
/// into it (see the module documentation).
fn column_ids(f: &Field) -> Vec<&str> {
    let md = f.metadata();
    md.get(COLUMN_ID).map(String::as_str).into_iter().chain(md.get(MERGED_IDS).into_iter().flat_map(|m| m.split(','))).collect()
}

fn share(a: &[&str], b: &[&str]) -> bool {
    a.iter().any(|x| b.contains(x))
}

/// For each of `target`, the index of the same column in `source`: by column id (see
/// [`column_ids`]), then by name among the columns that no id matched on either side.
fn pair(source: &[&Field], target: &[&Field]) -> Vec<Option<usize>> {
    let source_ids: Vec<Vec<&str>> = source.iter().map(|s| column_ids(s)).collect();
    let target_ids: Vec<Vec<&str>> = target.iter().map(|t| column_ids(t)).collect();
    let mut out: Vec<Option<usize>> =
        target_ids.iter().map(|t| if t.is_empty() { None } else { source_ids.iter().position(|s| share(s, t)) }).collect();
    let (all_source, all_target) = (source_ids.concat(), target_ids.concat());
    for (k, t) in target.iter().enumerate() {
        if out[k].is_some() || share(&target_ids[k], &all_source) {
            continue;
        }
        out[k] = source
            .iter()
            .enumerate()
            .position(|(i, s)| s.name() == t.name() && !out.contains(&Some(i)) && !share(&source_ids[i], &all_target));
    }
    out
}

/// `f` standing for its own column ids and those of `taken`, paired with it by name.
fn merging(f: Field, own: &[String], taken: &Field) -> Field {
    let mut merged: Vec<String> = own.iter().skip(1).cloned().collect();
    for id in column_ids(taken) {
        if !own.iter().any(|o| o == id) && !merged.iter().any(|m| m == id) {
            merged.push(id.to_string());
        }
    }
    let mut md = f.metadata().clone();
    md.remove(MERGED_IDS);
    match own.first() {
        Some(id) => md.insert(COLUMN_ID.to_string(), id.clone()),
        None => md.remove(COLUMN_ID),
    };
    if !merged.is_empty() {
        md.insert(MERGED_IDS.to_string(), merged.join(","));
    }
    f.with_metadata(md)
}

/// The field `f` with type `t`: extension metadata is dropped when the type is not
/// the field's own any more.
fn retyped(f: &Field, t: &DataType, text: bool) -> Field {
    if f.data_type() == t {
        return f.clone();
    }
    let mut md: HashMap<String, String> =
        f.metadata().iter().filter(|(k, _)| !k.starts_with("ARROW:extension:")).map(|(k, v)| (k.clone(), v.clone())).collect();
    if text {
        md.insert("pg.unified".to_string(), "text".to_string());
    }
    Field::new(f.name(), t.clone(), true).with_metadata(md)
}

/// The schema that every version's batches can be brought to; `schemas` oldest
/// first, the last is the newest definition.
pub fn unify_schemas(schemas: &[SchemaRef]) -> Result<SchemaRef, DecodeError> {
    let Some(newest) = schemas.last() else {
        return Err(DecodeError::Input("no schema to unify".into()));
    };
    let mut data: Vec<Field> = newest.fields().iter().filter(|f| is_data_field(f)).map(|f| f.as_ref().clone()).collect();
    for older in schemas.iter().rev().skip(1) {
        let older: Vec<&Field> = older.fields().iter().map(|f| f.as_ref()).filter(|f| is_data_field(f)).collect();
        let pairs = pair(&older, &data.iter().collect::<Vec<_>>());
        let mut taken = vec![false; older.len()];
        for (d, p) in data.iter_mut().zip(&pairs) {
            let Some(i) = *p else { continue };
            taken[i] = true;
            let f = older[i];
            // The newest version's id first (a unified column is the newest one's).
            let own: Vec<String> = column_ids(d).into_iter().map(str::to_string).collect();
            if d.data_type() != f.data_type() {
                let (t, text) = common_type(f.data_type(), d.data_type());
                // The metadata of the version whose type was kept, under the newest name.
                let from = if !text && &t == f.data_type() { f.clone().with_name(d.name()) } else { d.clone() };
                *d = retyped(&from, &t, text);
            }
            if !own.is_empty() || !column_ids(f).is_empty() {
                *d = merging(d.clone(), &own, f);
            }
        }
        data.extend(older.iter().zip(&taken).filter(|(_, t)| !**t).map(|(f, _)| (*f).clone()));
    }
    // `_before` holds the unified columns, each widened further where a version's old
    // values were typed apart (an array column whose old rows settled at another depth).
    let mut before = data.clone();
    for schema in schemas {
        let Ok(f) = schema.field_with_name("_before") else { continue };
        let DataType::Struct(children) = f.data_type() else { continue };
        let children: Vec<&Field> = children.iter().map(|c| c.as_ref()).collect();
        let pairs = pair(&children, &before.iter().collect::<Vec<_>>());
        for (b, p) in before.iter_mut().zip(pairs) {
            if let Some(i) = p {
                if b.data_type() != children[i].data_type() {
                    let (t, text) = common_type(children[i].data_type(), b.data_type());
                    *b = retyped(b, &t, text);
                }
            }
        }
    }
    let data: Fields = data.into_iter().map(Arc::new).collect();
    let before: Fields = before.into_iter().map(Arc::new).collect();
    let mut fields: Vec<FieldRef> = data.iter().cloned().collect();
    for f in newest.fields().iter().filter(|f| !is_data_field(f)) {
        if f.name() == "_before" {
            fields.push(Arc::new(Field::new("_before", DataType::Struct(before.clone()), true)));
        } else {
            fields.push(f.clone());
        }
    }
    Ok(Arc::new(Schema::new_with_metadata(fields, newest.metadata().clone())))
}

fn cast_column(array: &ArrayRef, to: &DataType, table: &str, column: &str) -> Result<ArrayRef, DecodeError> {
    if array.data_type() == to {
        return Ok(array.clone());
    }
    match (array.data_type(), to) {
        (DataType::Date32, DataType::Timestamp(TimeUnit::Microsecond, None)) => {
            // ±infinity dates stay ±infinity timestamps: Arrow's cast would make them
            // finite dates in the year ±5.8 million.
            let timestamps: TimestampMicrosecondArray = array.as_primitive::<Date32Type>().unary(|days| {
                match crate::types::date32_infinity(days) {
                    Some("infinity") => i64::MAX,
                    Some(_) => crate::types::TIMESTAMP_NEG_INFINITY,
                    None => days as i64 * 86_400_000_000,
                }
            });
            return Ok(Arc::new(timestamps));
        }
        (DataType::List(_), DataType::List(to_item)) => {
            let list = array.as_list::<i32>();
            let values = cast_column(list.values(), to_item.data_type(), table, column)?;
            let cast = ListArray::try_new(to_item.clone(), list.offsets().clone(), values, list.nulls().cloned())
                .map_err(|e| DecodeError::arrow(format!("{column} of {table}"), e))?;
            return Ok(Arc::new(cast));
        }
        (from, DataType::Utf8) if !matches!(from, DataType::Utf8View | DataType::LargeUtf8 | DataType::Null) => {
            // The text fallback: PostgreSQL's text, not Arrow's rendering.
            let text = to_pg_text(array.as_ref()).map_err(|e| DecodeError::Schema {
                table: table.to_string(),
                column: column.to_string(),
                message: format!("showing {from} as text: {e}"),
            })?;
            return Ok(Arc::new(text));
        }
        _ => {}
    }
    let options = CastOptions { safe: false, ..Default::default() };
    cast_with_options(array, to, &options).map_err(|e| DecodeError::Schema {
        table: table.to_string(),
        column: column.to_string(),
        message: format!("casting {} to {}: {e}", array.data_type(), to),
    })
}

/// Children of `target` taken from the same columns of `source` (cast, or null when missing).
fn conform_columns(
    source_fields: &Fields,
    source: &[ArrayRef],
    target: &Fields,
    rows: usize,
    table: &str,
) -> Result<Vec<ArrayRef>, DecodeError> {
    let data: Vec<(usize, &Field)> =
        source_fields.iter().enumerate().filter(|(_, f)| is_data_field(f)).map(|(i, f)| (i, f.as_ref())).collect();
    let source_refs: Vec<&Field> = data.iter().map(|(_, f)| *f).collect();
    let target_refs: Vec<&Field> = target.iter().map(|f| f.as_ref()).collect();
    target
        .iter()
        .zip(pair(&source_refs, &target_refs))
        .map(|(f, p)| match p {
            Some(k) => cast_column(&source[data[k].0], f.data_type(), table, f.name()),
            None => Ok(new_null_array(f.data_type(), rows)),
        })
        .collect()
}

/// A batch of one version brought to a unified schema.
pub fn conform(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch, DecodeError> {
    if batch.schema().fields() == target.fields() {
        // Same columns; the schema's own metadata (pg.version) is the target's.
        return RecordBatch::try_new(target.clone(), batch.columns().to_vec())
            .map_err(|e| DecodeError::arrow("a unified batch", e));
    }
    let table = table_name(target);
    let rows = batch.num_rows();
    let schema = batch.schema();
    let data: Fields = target.fields().iter().filter(|f| is_data_field(f)).cloned().collect();
    let mut columns = conform_columns(schema.fields(), batch.columns(), &data, rows, &table)?;
    for f in target.fields().iter().filter(|f| !is_data_field(f)) {
        let Some((i, _)) = schema.fields().iter().enumerate().find(|(_, s)| s.name() == f.name() && !is_data_field(s)) else {
            columns.push(new_null_array(f.data_type(), rows));
            continue;
        };
        let column = batch.column(i);
        match (f.data_type(), column.as_any().downcast_ref::<StructArray>()) {
            (DataType::Struct(target_children), Some(before)) if f.name() == "_before" => {
                let children = conform_columns(before.fields(), before.columns(), target_children, rows, &table)?;
                let array = StructArray::try_new(target_children.clone(), children, before.nulls().cloned())
                    .map_err(|e| DecodeError::arrow(format!("_before of {table}"), e))?;
                columns.push(Arc::new(array));
            }
            // Renamed like the columns, then cast (a file's round trip may rename a list's
            // or map's inner fields).
            _ if f.name() == "_special" => {
                let renamed = renamed_special(column, schema.fields(), &data, &table)?;
                columns.push(cast_column(&renamed, f.data_type(), &table, f.name())?)
            }
            _ if f.name() == "_unchanged" => {
                let renamed = renamed_unchanged(column, schema.fields(), &data, &table)?;
                columns.push(cast_column(&renamed, f.data_type(), &table, f.name())?)
            }
            _ => columns.push(cast_column(column, f.data_type(), &table, f.name())?),
        }
    }
    RecordBatch::try_new(target.clone(), columns).map_err(|e| DecodeError::arrow(format!("a unified batch of {table}"), e))
}

/// Old column name → newest name, for the columns of `source` that `target` renamed.
fn renames<'a>(source: &'a Fields, target: &'a Fields) -> HashMap<&'a str, &'a str> {
    let source_data: Vec<&Field> = source.iter().map(|f| f.as_ref()).filter(|f| is_data_field(f)).collect();
    let target_refs: Vec<&Field> = target.iter().map(|f| f.as_ref()).collect();
    pair(&source_data, &target_refs)
        .into_iter()
        .zip(target.iter())
        .filter_map(|(p, t)| p.map(|i| (source_data[i].name().as_str(), t.name().as_str())))
        .filter(|(from, to)| from != to)
        .collect()
}

/// `_unchanged` (names of columns whose TOAST value was not sent) with the names renamed as
/// the columns were.
fn renamed_unchanged(unchanged: &ArrayRef, source: &Fields, target: &Fields, table: &str) -> Result<ArrayRef, DecodeError> {
    let renames = renames(source, target);
    let Some(list) = unchanged.as_any().downcast_ref::<ListArray>() else { return Ok(unchanged.clone()) };
    if renames.is_empty() || list.values().is_empty() {
        return Ok(unchanged.clone());
    }
    let names: StringArray = list
        .values()
        .as_string::<i32>()
        .iter()
        .map(|n| n.map(|n| renames.get(n).copied().unwrap_or(n).to_string()))
        .collect();
    let DataType::List(field) = list.data_type() else { return Ok(unchanged.clone()) };
    let out = ListArray::try_new(field.clone(), list.offsets().clone(), Arc::new(names), list.nulls().cloned())
        .map_err(|e| DecodeError::arrow(format!("_unchanged of {table}"), e))?;
    Ok(Arc::new(out))
}

/// `_special` with its keys (column names, `_before.<name>`) renamed as the columns were: a
/// special value of a column renamed since stays under the column's newest name.
fn renamed_special(special: &ArrayRef, source: &Fields, target: &Fields, table: &str) -> Result<ArrayRef, DecodeError> {
    if special.null_count() == special.len() {
        return Ok(special.clone());
    }
    let renames = renames(source, target);
    let Some(map) = special.as_any().downcast_ref::<MapArray>() else { return Ok(special.clone()) };
    if renames.is_empty() {
        return Ok(special.clone());
    }
    let keys = map.keys().as_string::<i32>();
    let renamed: StringArray = keys
        .iter()
        .map(|k| {
            k.map(|k| match k.strip_prefix("_before.") {
                Some(name) => renames.get(name).map_or_else(|| k.to_string(), |to| format!("_before.{to}")),
                None => renames.get(k).map_or_else(|| k.to_string(), |to| to.to_string()),
            })
        })
        .collect();
    let entries = StructArray::try_new(
        map.entries().fields().clone(),
        vec![Arc::new(renamed), map.values().clone()],
        map.entries().nulls().cloned(),
    )
    .map_err(|e| DecodeError::arrow(format!("_special of {table}"), e))?;
    let DataType::Map(field, sorted) = map.data_type() else { return Ok(special.clone()) };
    let out = MapArray::try_new(field.clone(), map.offsets().clone(), entries, map.nulls().cloned(), *sorted)
        .map_err(|e| DecodeError::arrow(format!("_special of {table}"), e))?;
    Ok(Arc::new(out))
}

/// The batches of every version of a table, brought to one schema; `versions`
/// oldest first, the last is the newest definition.
pub fn unify(versions: &[TableVersion]) -> Result<(SchemaRef, Vec<RecordBatch>), DecodeError> {
    let schemas: Vec<SchemaRef> = versions.iter().map(|v| v.schema.clone()).collect();
    let target = unify_schemas(&schemas)?;
    let mut batches = Vec::new();
    for v in versions {
        for b in &v.batches {
            batches.push(conform(b, &target)?);
        }
    }
    Ok((target, batches))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use DataType::*;

    #[test]
    fn lossless_casts() {
        assert!(lossless(&Int32, &Int64));
        assert!(!lossless(&Int64, &Int32));
        assert!(lossless(&Decimal128(10, 2), &Decimal128(12, 2)));
        assert!(lossless(&Decimal128(10, 2), &Decimal128(12, 4)));
        assert!(!lossless(&Decimal128(10, 2), &Decimal128(10, 3)));
        assert!(lossless(&Int32, &Decimal128(12, 2)));
        assert!(!lossless(&Int32, &Decimal128(11, 2)));
        assert!(lossless(&Utf8, &Utf8View));
        assert!(lossless(&Date32, &Timestamp(TimeUnit::Microsecond, None)));
        assert!(!lossless(&Int32, &Utf8));
        assert_eq!(common_type(&Int64, &Int32), (Int64, false));
        assert_eq!(common_type(&Utf8View, &Int32), (Utf8, true));
        let list = List(Arc::new(Field::new("item", Int32, true)));
        assert_eq!(common_type(&list, &Int32), (Utf8, true));
    }

    #[test]
    fn infinite_dates_stay_infinite_timestamps() {
        use arrow_array::Date32Array;
        let dates: ArrayRef = Arc::new(Date32Array::from(vec![Some(i32::MAX), Some(i32::MIN + 1), Some(1), None]));
        let ts = cast_column(&dates, &Timestamp(TimeUnit::Microsecond, None), "t", "d").unwrap();
        let ts = ts.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert_eq!(ts.iter().collect::<Vec<_>>(), [Some(i64::MAX), Some(i64::MIN + 1), Some(86_400_000_000), None]);
        let item = |t: DataType| Arc::new(Field::new("item", t, true));
        let list: ArrayRef = Arc::new(ListArray::new(
            item(Date32),
            arrow_buffer::OffsetBuffer::from_lengths([2, 0]),
            dates.slice(0, 2),
            Some(arrow_buffer::NullBuffer::from(vec![true, false])),
        ));
        let cast = cast_column(&list, &List(item(Timestamp(TimeUnit::Microsecond, None))), "t", "d").unwrap();
        let values = cast.as_list::<i32>().values().as_primitive::<arrow_array::types::TimestampMicrosecondType>().clone();
        assert_eq!(values.values().to_vec(), [i64::MAX, i64::MIN + 1]);
        assert!(cast.is_null(1));
    }

    fn field(name: &str, t: DataType) -> Field {
        Field::new(name, t, true).with_metadata(HashMap::from([("pg.type_oid".to_string(), "0".to_string())]))
    }

    #[test]
    fn conform_adds_missing_columns_and_casts() {
        let old = Arc::new(Schema::new(vec![field("id", Int32), field("gone", Utf8), Field::new("_op", Utf8, false)]));
        let new = Arc::new(Schema::new(vec![field("id", Int64), field("added", Int32), Field::new("_op", Utf8, false)]));
        let target = unify_schemas(&[old.clone(), new]).unwrap();
        let names: Vec<&str> = target.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "added", "gone", "_op"]);
        let batch = RecordBatch::try_new(
            old,
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(StringArray::from(vec!["insert", "delete"])),
            ],
        )
        .unwrap();
        let out = conform(&batch, &target).unwrap();
        assert_eq!(out.column(0).as_ref(), &Int64Array::from(vec![1, 2]) as &dyn Array);
        assert_eq!(out.column(1).null_count(), 2);
        assert_eq!(out.column(2).as_ref(), &StringArray::from(vec!["a", "b"]) as &dyn Array);
    }

    fn with_id(f: Field, id: &str) -> Field {
        let mut md = f.metadata().clone();
        md.insert(COLUMN_ID.to_string(), id.to_string());
        f.with_metadata(md)
    }

    /// Torture seed 9504: `c` renamed to `c_r`, then `c_r` dropped and added again under its
    /// name with another type (ids 3 then 8). The column added under the name takes in the
    /// dropped one's values, its rows under its first name (`c`, id 3) too: one column.
    #[test]
    fn a_column_renamed_then_dropped_and_added_again_under_its_name_is_one_column() {
        let schema = |f: Field| Arc::new(Schema::new(vec![with_id(field("id", Int32), "0"), f]));
        let v1 = schema(with_id(field("c", Int32), "3"));
        let v2 = schema(with_id(field("c_r", Int32), "3"));
        let v3 = schema(with_id(field("c_r", Int64), "8"));
        let target = unify_schemas(&[v1.clone(), v2.clone(), v3]).unwrap();
        let names: Vec<&str> = target.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "c_r"]);
        assert_eq!(column_ids(target.field(1)), ["8", "3"]);
        for v in [v1, v2] {
            let batch = RecordBatch::try_new(
                v,
                vec![Arc::new(Int32Array::from(vec![1, 2])), Arc::new(Int32Array::from(vec![Some(7), None]))],
            )
            .unwrap();
            let out = conform(&batch, &target).unwrap();
            assert_eq!(out.column(1).as_ref(), &Int64Array::from(vec![Some(7), None]) as &dyn Array);
        }
    }
}
