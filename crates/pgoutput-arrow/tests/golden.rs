//! The decoder on the golden captures of real PostgreSQL 15 and 18 streams
//! (tests/golden/captures, made by tests/golden/capture.py): every capture decodes,
//! transactions have the outcome and commit time the server reported, and the
//! changes replayed into table state give the rows the server's SELECT returned.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use pgoutput_arrow::{Changes, Decoder, DecoderOptions, SpecialValues};
use serde_json::Value;

const PG_EPOCH: i64 = 946_684_800_000_000;

fn captures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/captures")
}

struct Capture {
    name: String,
    json: Value,
    messages: Vec<(u64, Vec<u8>)>,
}

fn load_all() -> Vec<Capture> {
    let Ok(entries) = std::fs::read_dir(captures_dir()) else { return Vec::new() };
    let mut paths: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "bin")).collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let raw = std::fs::read(&p).unwrap();
            let mut messages = Vec::new();
            let mut at = 0;
            while at + 16 <= raw.len() {
                let lsn = u64::from_be_bytes(raw[at..at + 8].try_into().unwrap());
                let len = u32::from_be_bytes(raw[at + 12..at + 16].try_into().unwrap()) as usize;
                messages.push((lsn, raw[at + 16..at + 16 + len].to_vec()));
                at += 16 + len;
            }
            let json = serde_json::from_slice(&std::fs::read(p.with_extension("json")).unwrap()).unwrap();
            Capture { name: p.file_stem().unwrap().to_string_lossy().into_owned(), json, messages }
        })
        .collect()
}

fn decode(c: &Capture, special: SpecialValues) -> Result<(Changes, usize), String> {
    let mut options = DecoderOptions::default();
    options.types.binary = c.json["options"]["binary"] == "true";
    options.types.special_values = special;
    // Small batches and a tiny memory limit: the batch and spill paths run too.
    options.batch_size = 7;
    options.memory_limit = 4096;
    let mut d = Decoder::new(options);
    for (i, (lsn, m)) in c.messages.iter().enumerate() {
        d.push(*lsn, &Buffer::from(m.clone())).map_err(|e| format!("message {i}: {e}"))?;
        // Flushes at arbitrary points, inside transactions too, as a live consumer does.
        if i % 5 == 3 {
            d.flush().map_err(|e| e.to_string())?;
        }
    }
    let pending = d.pending_transactions();
    Ok((d.finish().map_err(|e| e.to_string())?, pending))
}

fn show(a: &ArrayRef, row: usize) -> Option<String> {
    if a.is_null(row) {
        return None;
    }
    let f = ArrayFormatter::try_new(a.as_ref(), &FormatOptions::default()).unwrap();
    Some(f.value(row).to_string())
}

type Row = BTreeMap<String, Option<String>>;

/// The table state the changes lead to: each change applied in commit order, by
/// replica identity key (the whole row when the identity is FULL).
fn replay(changes: &Changes, table: &str) -> Vec<Row> {
    let Some(t) = changes.tables.get(table) else { return Vec::new() };
    let schema = &t.schema;
    let data: Vec<usize> =
        (0..schema.fields().len()).filter(|&i| schema.field(i).metadata().contains_key("pg.type_oid")).collect();
    let keys: Vec<usize> = data.iter().copied().filter(|&i| schema.field(i).metadata()["pg.key"] == "true").collect();
    let keys = if keys.is_empty() { data.clone() } else { keys };
    let mut state: BTreeMap<Vec<Option<String>>, Vec<Option<String>>> = BTreeMap::new();
    let mut rows: Vec<(i64, i64, RecordBatch, usize)> = Vec::new();
    for b in &t.batches {
        let commit = b.column_by_name("_commit_lsn").unwrap().as_primitive::<arrow_array::types::Int64Type>().clone();
        let seq = b.column_by_name("_seq").unwrap().as_primitive::<arrow_array::types::Int64Type>().clone();
        for r in 0..b.num_rows() {
            rows.push((commit.value(r), seq.value(r), b.clone(), r));
        }
    }
    rows.sort_by_key(|r| (r.0, r.1));
    for (_, _, b, r) in rows {
        let op = b.column_by_name("_op").unwrap().as_string::<i32>().value(r).to_string();
        let values: Vec<Option<String>> = data.iter().map(|&i| show(b.column(i), r)).collect();
        let before = b.column_by_name("_before").unwrap().as_struct().clone();
        let old: Option<Vec<Option<String>>> =
            (!before.is_null(r)).then(|| (0..data.len()).map(|j| show(before.column(j), r)).collect());
        let key_of = |v: &[Option<String>]| -> Vec<Option<String>> {
            keys.iter().map(|k| v[data.iter().position(|d| d == k).unwrap()].clone()).collect()
        };
        let old_key = old.as_deref().map(key_of).unwrap_or_else(|| key_of(&values));
        match op.as_str() {
            "insert" => {
                state.insert(key_of(&values), values);
            }
            "update" => {
                let previous = state.remove(&old_key);
                let unchanged = b.column_by_name("_unchanged").unwrap().as_list::<i32>().value(r);
                let mut values = values;
                for name in unchanged.as_string::<i32>().iter().flatten() {
                    let j = data.iter().position(|&i| schema.field(i).name() == name).unwrap();
                    values[j] = previous.as_ref().expect("an unchanged value of a row we have")[j].clone();
                }
                state.insert(key_of(&values), values);
            }
            "delete" => {
                assert!(state.remove(&old_key).is_some(), "{table}: delete of a row we do not have: {old_key:?}");
            }
            other => panic!("{other}"),
        }
    }
    state
        .into_values()
        .map(|v| data.iter().zip(v).map(|(&i, x)| (schema.field(i).name().clone(), x)).collect())
        .collect()
}

fn tx_facts(facts: &Value) -> Vec<(String, &Value)> {
    facts
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, v)| k.starts_with("tx_") && v.get("xid").is_some())
        .map(|(k, v)| (k.clone(), v))
        .collect()
}

fn check(c: &Capture) -> Result<usize, String> {
    let mut compared = 0;
    let special = if c.name.starts_with("types") { SpecialValues::Text } else { SpecialValues::Error };
    let (changes, pending) = decode(c, special)?;
    let facts = &c.json["facts"];
    let tx = &changes.transactions;
    let xids = tx.column_by_name("xid").unwrap().as_primitive::<arrow_array::types::Int64Type>();
    let outcomes = tx.column_by_name("outcome").unwrap().as_string::<i32>();
    let ts = tx.column_by_name("commit_ts").unwrap().as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    let changes_col = tx.column_by_name("changes").unwrap().as_primitive::<arrow_array::types::Int64Type>();
    // Transactions: outcome and commit time as the server reported them.
    for (name, f) in tx_facts(facts) {
        let xid = f["xid"].as_i64().unwrap();
        let rows: Vec<usize> = (0..tx.num_rows()).filter(|&r| xids.value(r) == xid).collect();
        let committed: Vec<usize> = rows.iter().copied().filter(|&r| outcomes.value(r).ends_with("committed")).collect();
        match f["status"].as_str() {
            Some("committed") => {
                for &r in &committed {
                    let expected = f["commit_time_pg_us"].as_i64().unwrap() + PG_EPOCH;
                    if ts.value(r) != expected && c.json["workload"] != "origin" {
                        return Err(format!("{name} (xid {xid}): commit_ts {} but the server says {expected}", ts.value(r)));
                    }
                }
            }
            Some("aborted") if !committed.is_empty() => {
                return Err(format!("{name} (xid {xid}) aborted but came out as {}", outcomes.value(committed[0])));
            }
            _ => {}
        }
    }
    // Every row change that came out is counted by its transaction.
    let rows_out: usize = changes.tables.values().map(|t| t.num_rows()).sum();
    let counted: i64 = (0..tx.num_rows()).map(|r| changes_col.value(r)).sum();
    if rows_out as i64 != counted {
        return Err(format!("{rows_out} rows out, transactions count {counted}"));
    }
    let complete = pending == 0;
    // Table contents, where the server reported them.
    if let Some(final_rows) = facts.get("final_rows").and_then(|v| v.as_array()).filter(|_| complete) {
        let mut expected: BTreeMap<String, BTreeSet<Row>> = BTreeMap::new();
        for r in final_rows {
            let row: Row = r["r"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                .collect();
            expected.entry(format!("public.{}", r["tbl"].as_str().unwrap())).or_default().insert(row);
        }
        for (table, rows) in expected {
            let got: BTreeSet<Row> = replay(&changes, &table).into_iter().collect();
            if got != rows {
                return Err(format!("{table}: replayed {got:?}, the server has {rows:?}"));
            }
            compared += 1;
        }
    }
    for (fact, table) in [("big_rows", "public.big"), ("orders_rows", "public.orders")] {
        let Some(f) = facts.get(fact).filter(|_| complete) else { continue };
        let rows = replay(&changes, table);
        let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_deref().unwrap().parse().unwrap()).collect();
        let summary = (ids.len() as i64, ids.iter().min().copied(), ids.iter().max().copied());
        let expected = (f["n"].as_i64().unwrap(), f["min_id"].as_i64(), f["max_id"].as_i64());
        if summary != expected {
            return Err(format!("{table}: replayed (n, min, max) = {summary:?}, the server has {expected:?}"));
        }
        compared += 1;
        if let Some(extra) = f.get("with_extra").and_then(|v| v.as_i64()) {
            let n = rows.iter().filter(|r| r.get("extra").is_some_and(|v| v.is_some())).count() as i64;
            if n != extra {
                return Err(format!("{table}: {n} rows with extra, the server has {extra}"));
            }
        }
    }
    if let Some(after) = facts.get("toast_after_updates").and_then(|v| v.as_array()).filter(|_| complete) {
        let rows = replay(&changes, "public.toasty");
        for f in after {
            let id = f["id"].to_string();
            let row = rows.iter().find(|r| r["id"].as_deref() == Some(id.as_str())).ok_or(format!("toasty row {id} missing"))?;
            let len = |c: &str| row[c].as_ref().map_or(0, |v| v.len()) as i64;
            if len("ext") != f["ext_length"].as_i64().unwrap() || len("cmp") != f["cmp_length"].as_i64().unwrap() {
                return Err(format!("toasty {id}: ext/cmp lengths {}/{} differ from the server's", len("ext"), len("cmp")));
            }
            if row["counter"].as_deref() != Some(f["counter"].to_string().as_str()) {
                return Err(format!("toasty {id}: counter {:?}", row["counter"]));
            }
            compared += 1;
        }
    }
    // Messages: transactional ones of rolled-back transactions never come out.
    if let Some(m) = facts.get("msg_tx_in_rolled_back") {
        let prefixes = changes.messages.column_by_name("prefix").unwrap().as_string::<i32>().clone();
        let contents = changes.messages.column_by_name("content").unwrap().as_binary::<i32>().clone();
        let content = m["content"].as_str().unwrap_or_default().as_bytes();
        if (0..prefixes.len()).any(|i| prefixes.value(i) == m["prefix"].as_str().unwrap() && contents.value(i) == content) {
            return Err("a message of a rolled-back transaction came out".into());
        }
    }
    Ok(compared)
}

#[test]
fn golden_captures() {
    let captures = load_all();
    if captures.is_empty() {
        eprintln!("no golden captures in {}; skipping", captures_dir().display());
        return;
    }
    let mut failures = Vec::new();
    let mut compared = 0;
    for c in &captures {
        match check(c) {
            // Known limit of the type decoders (src/types, TypeOptions::array_ndims): a
            // column of one-dimensional lists cannot take a 2-D array value.
            Err(e) if c.name.starts_with("types") && e.contains("-dimensional array in a column") => {
                eprintln!("{}: known limit of array columns: {e}", c.name)
            }
            Err(e) => failures.push(format!("{}: {e}", c.name)),
            Ok(n) => compared += n,
        }
    }
    eprintln!(
        "{} golden captures decoded, {} failed; {compared} tables replayed and compared with the server's rows",
        captures.len(),
        failures.len()
    );
    assert!(compared > 20, "only {compared} table states compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Corrupted streams (bytes flipped, messages cut short, dropped or repeated)
/// give errors, never a panic, and the decoder's accounting stays sound.
#[test]
fn corrupted_captures_never_panic() {
    let captures = load_all();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut errors = 0;
    for c in captures.iter().filter(|c| c.messages.len() < 3000) {
        for round in 0..4 {
            let mut options = DecoderOptions::default();
            options.types.binary = c.json["options"]["binary"] == "true";
            options.batch_size = 5;
            options.memory_limit = 2048;
            let mut d = Decoder::new(options);
            for (lsn, m) in &c.messages {
                let mut m = m.clone();
                let r = next();
                match (round, r % 23) {
                    (_, 0) if !m.is_empty() => {
                        let i = (next() as usize) % m.len();
                        m[i] ^= 1 << (next() % 8);
                    }
                    (_, 1) => m.truncate((next() as usize) % (m.len() + 1)),
                    (_, 2) => continue,
                    (1, 3) => {
                        let _ = d.push(*lsn, &Buffer::from(m.clone()));
                    }
                    _ => {}
                }
                match d.push(*lsn, &Buffer::from(m)) {
                    Ok(()) => {}
                    Err(pgoutput_arrow::DecodeError::Stopped(_)) => break,
                    Err(_) => errors += 1,
                }
                if r % 11 == 0 {
                    let _ = d.flush();
                }
                let _ = (d.safe_lsn(), d.buffered_bytes(), d.spilled_bytes(), d.pending_transactions());
            }
            let _ = d.finish();
        }
    }
    eprintln!("corrupted captures: {errors} errors reported, no panic");
}
