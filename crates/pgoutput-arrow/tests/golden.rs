//! The decoder on the golden captures of real PostgreSQL 15 and 18 streams
//! (tests/golden/captures, made by tests/golden/capture.py): every capture decodes,
//! transactions have the outcome and commit time the server reported, and the
//! changes replayed into table state give the rows the server's SELECT returned.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use pgoutput_arrow::{Changes, Decoder, DecoderOptions, SpecialValues};
use serde_json::Value;

const PG_EPOCH: i64 = 946_684_800_000_000;

struct Capture {
    name: String,
    json: Value,
    messages: Vec<(u64, Vec<u8>)>,
}

fn load_all() -> Vec<Capture> {
    common::golden_captures()
        .into_iter()
        .map(|(name, path, messages)| {
            let json = serde_json::from_slice(&std::fs::read(path.with_extension("json")).unwrap()).unwrap();
            Capture { name, json, messages }
        })
        .collect()
}

fn decode(c: &Capture, special: SpecialValues) -> Result<(Changes, usize), String> {
    let mut options = DecoderOptions::default();
    options.types.binary = c.json["options"]["binary"] == "true";
    options.types.special_values = special;
    if c.name.starts_with("types") {
        // types.sql puts a 2-D array into a column whose first array is 1-D: a column of
        // PostgreSQL's array text holds every shape.
        options.types.array_ndims = 0;
        options.types.learn_array_ndims = false;
    }
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
                    if ts.value(r) != expected {
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
    check_transaction_facts(c, &changes)?;
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

/// The transactions table against what the workload did: replication origins and their
/// LSNs, two-phase gids and outcomes, and streamed aborts with their abort LSN and time.
fn check_transaction_facts(c: &Capture, changes: &Changes) -> Result<(), String> {
    let facts = &c.json["facts"];
    let options = &c.json["options"];
    let two_phase = options["two_phase"] == "true";
    let tx = &changes.transactions;
    let col = |name: &str| tx.column_by_name(name).unwrap().clone();
    let (xids, outcomes, gids, origins) = (col("xid"), col("outcome"), col("gid"), col("origin"));
    let (xids, outcomes) = (xids.as_primitive::<arrow_array::types::Int64Type>(), outcomes.as_string::<i32>());
    let (gids, origins) = (gids.as_string::<i32>(), origins.as_string::<i32>());
    let origin_lsns = col("origin_lsn");
    let origin_lsns = origin_lsns.as_primitive::<arrow_array::types::Int64Type>();
    let (end_lsns, streamed) = (col("end_lsn"), col("streamed"));
    let (end_lsns, streamed) = (end_lsns.as_primitive::<arrow_array::types::Int64Type>(), streamed.as_boolean());
    let ts = col("commit_ts");
    let ts = ts.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    let rows_of = |xid: i64| -> Vec<usize> { (0..tx.num_rows()).filter(|&r| xids.value(r) == xid).collect() };
    let text = |a: &arrow_array::StringArray, r: usize| (!a.is_null(r)).then(|| a.value(r).to_string());

    // Replication origins: the transaction replayed under one carries its name and LSN.
    if let Some(name) = facts["origin"]["roname"].as_str() {
        for (origin_fact, tx_fact) in
            [("origin_xact", "tx_with_origin"), ("origin_xact_streamed", "tx_streamed"), ("origin_xact_prepared", "tx_prepared")]
        {
            let (Some(o), Some(t)) = (facts.get(origin_fact), facts.get(tx_fact)) else { continue };
            let rows = rows_of(t["xid"].as_i64().unwrap());
            if rows.is_empty() {
                return Err(format!("{tx_fact} (xid {}) is not in the transactions table", t["xid"]));
            }
            for r in rows {
                let got = (text(origins, r), (!origin_lsns.is_null(r)).then(|| origin_lsns.value(r)));
                // A streamed transaction's Origin comes before its commit, without the LSN.
                let lsn = if tx_fact == "tx_streamed" { None } else { o["origin_lsn_int"].as_i64() };
                let expected = (Some(name.to_string()), lsn);
                if got != expected {
                    return Err(format!("{tx_fact}: origin {got:?}, the workload set {expected:?}"));
                }
            }
        }
        if let Some(t) = facts.get("tx_without_origin") {
            for r in rows_of(t["xid"].as_i64().unwrap()) {
                if !origins.is_null(r) || !origin_lsns.is_null(r) {
                    return Err(format!("tx_without_origin has origin {:?}", text(origins, r)));
                }
            }
        }
    }

    // Two-phase: with two_phase the gid and a prepared-* outcome; without it, a committed
    // prepared transaction is an ordinary commit and a rolled-back one never appears.
    for (name, f) in facts.as_object().unwrap().iter().filter(|(_, f)| f.get("gid").is_some()) {
        let gid = f["gid"].as_str().unwrap();
        let xid = f["transaction"].as_i64().unwrap();
        let status = facts
            .as_object()
            .unwrap()
            .values()
            .find(|t| t.get("xid").and_then(|x| x.as_i64()) == Some(xid))
            .and_then(|t| t["status"].as_str())
            .ok_or(format!("{name}: no transaction fact for xid {xid}"))?;
        let got: Vec<(String, Option<String>)> =
            rows_of(xid).into_iter().map(|r| (outcomes.value(r).to_string(), text(gids, r))).collect();
        let expected: Vec<(String, Option<String>)> = match (two_phase, status) {
            (true, "committed") => vec![("prepared-committed".into(), Some(gid.into()))],
            (true, _) => vec![("prepared-rolled-back".into(), Some(gid.into()))],
            (false, "committed") => vec![("committed".into(), None)],
            (false, _) => vec![],
        };
        if got != expected {
            return Err(format!("{name} (gid {gid:?}, xid {xid}, {status}): transactions {got:?}, expected {expected:?}"));
        }
    }

    // A streamed transaction rolled back: one `aborted` row; with streaming 'parallel'
    // (protocol 4) it carries the abort LSN and time, after the transaction began.
    if let Some(f) = facts.get("tx_aborted") {
        let rows = rows_of(f["xid"].as_i64().unwrap());
        let aborted: Vec<usize> = rows.iter().copied().filter(|&r| outcomes.value(r) == "aborted").collect();
        if aborted.len() != 1 || rows.len() != 1 || !streamed.value(aborted[0]) {
            return Err(format!("tx_aborted: transactions {rows:?}, expected one streamed `aborted` row"));
        }
        let r = aborted[0];
        if options["streaming"] == "parallel" {
            let began = f["xact_start_pg_us"].as_i64().unwrap() + PG_EPOCH;
            let after = f["wal_lsn_int"].as_i64().unwrap();
            if end_lsns.is_null(r) || end_lsns.value(r) <= after || ts.is_null(r) || ts.value(r) < began {
                return Err(format!(
                    "tx_aborted: abort LSN {:?} and time {:?}, expected after LSN {after} and time {began}",
                    (!end_lsns.is_null(r)).then(|| end_lsns.value(r)),
                    (!ts.is_null(r)).then(|| ts.value(r))
                ));
            }
        } else if !end_lsns.is_null(r) {
            return Err("tx_aborted: an abort LSN without streaming 'parallel'".into());
        }
    }
    Ok(())
}

#[test]
fn golden_captures() {
    let captures = load_all();
    assert!(captures.len() >= 80, "{} golden captures in tests/golden/captures", captures.len());
    let mut failures = Vec::new();
    let mut compared = 0;
    for c in &captures {
        match check(c) {
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
