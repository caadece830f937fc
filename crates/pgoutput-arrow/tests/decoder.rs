//! The decoder on hand-built pgoutput streams: output model, transaction
//! assembly (interleaved streams, savepoints, aborts, two-phase), schema changes,
//! TOAST, old tuples, errors, spilling and zero copy.

mod common;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_buffer::Buffer;
use arrow_schema::DataType;
use common::*;
use pgoutput_arrow::{DecodeError, Decoder, DecoderOptions, EmitMode, Output, SpecialValues};

const TS: i64 = 800_000_000_000_000; // 2025-05-08 in PostgreSQL's epoch

fn one_table_stream() -> Stream {
    let mut s = Stream::new();
    s.begin(700, 0x5000, TS);
    s.relation(16384, "public", "t", b'd', &[("id", INT4, -1, true), ("v", TEXT, -1, false)]);
    s.insert(16384, &[t("1"), t("hello")]);
    s.update(16384, None, &[t("1"), t("a value longer than twelve bytes")]);
    s.delete(16384, b'K', &[t("1"), C::N]);
    s.commit(0x5000, 0x5010, TS);
    s
}

#[test]
fn rows_columns_and_metadata() {
    let s = one_table_stream();
    let c = decode(&s);
    assert_eq!(
        table_rows(&c, "public.t", &["id", "v", "_op", "_lsn", "_commit_lsn", "_xid", "_seq"]),
        vec![
            "1|hello|insert|4128|20480|700|2",
            "1|a value longer than twelve bytes|update|4144|20480|700|3",
            "1|∅|delete|4160|20480|700|4",
        ]
    );
    let table = &c.tables["public.t"];
    let schema = &table.schema;
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        ["id", "v", "_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before", "_unchanged", "_special"]
    );
    let id = schema.field_with_name("id").unwrap();
    assert_eq!(id.data_type(), &DataType::Int32);
    assert_eq!(id.metadata()["pg.type_oid"], "23");
    assert_eq!(id.metadata()["pg.type_name"], "int4");
    assert_eq!(id.metadata()["pg.typmod"], "-1");
    assert_eq!(id.metadata()["pg.key"], "true");
    assert_eq!(schema.field_with_name("v").unwrap().metadata()["pg.key"], "false");
    assert_eq!(schema.metadata()["pg.relation_id"], "16384");
    assert_eq!(schema.metadata()["pg.replica_identity"], "default");
    assert_eq!(schema.metadata()["pg.table"], "public.t");
    assert_eq!(
        schema.field_with_name("_commit_ts").unwrap().data_type(),
        &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("UTC".into()))
    );
    let batch = &table.batches[0];
    let ts = batch.column_by_name("_commit_ts").unwrap().as_primitive::<TimestampMicrosecondType>();
    assert_eq!(ts.value(0), TS + 946_684_800_000_000);
    // The transaction.
    assert_eq!(
        rows(std::slice::from_ref(&c.transactions), &["xid", "begin_lsn", "commit_lsn", "end_lsn", "outcome", "streamed", "changes"]),
        vec!["700|4096|20480|20496|committed|false|3"]
    );
}

/// A user type named like a built-in one ("public.int8") is not decoded as the built-in
/// type; a domain, whose Type message names its pg_catalog base type, is.
#[test]
fn user_type_named_like_a_builtin() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.type_msg(16_400, "public", "int8");
    s.type_msg(16_401, "", "int4");
    s.relation(1, "public", "t", b'd', &[("kind", 16_400, -1, false), ("n", 16_401, -1, false)]);
    s.insert(1, &[t("happy"), t("42")]);
    s.commit(0x100, 0x110, TS);
    let c = decode(&s);
    assert_eq!(table_rows(&c, "public.t", &["kind", "n"]), vec!["happy|42"]);
    let schema = &c.tables["public.t"].schema;
    assert_eq!(schema.field_with_name("kind").unwrap().metadata()["pg.type_name"], "public.int8");
    assert_eq!(schema.field_with_name("n").unwrap().data_type(), &DataType::Int32);
}

#[test]
fn namespace_empty_is_pg_catalog() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "", "pg_thing", b'n', &[("x", INT4, -1, false)]);
    s.insert(1, &[t("5")]);
    s.commit(0x100, 0x110, TS);
    let c = decode(&s);
    assert_eq!(table_rows(&c, "pg_catalog.pg_thing", &["x"]), vec!["5"]);
    assert_eq!(c.tables["pg_catalog.pg_thing"].schema.metadata()["pg.replica_identity"], "nothing");
}

/// Streamed transactions interleaved with each other and with one sent whole:
/// rows come out in commit order.
#[test]
fn commit_order_across_interleaved_streams() {
    let mut s = Stream::new();
    let cols: &[Col<'_>] = &[("id", INT4, -1, true)];
    s.relation(1, "public", "a", b'd', cols);
    s.stream_start(100, true);
    s.relation(1, "public", "a", b'd', cols); // re-sent in the stream: same version
    s.insert(1, &[t("1")]);
    s.insert(1, &[t("2")]);
    s.stream_stop();
    s.stream_start(200, true);
    s.relation(1, "public", "a", b'd', cols);
    s.insert(1, &[t("10")]);
    s.stream_stop();
    s.begin(300, 0x9000, TS);
    s.insert(1, &[t("20")]);
    s.commit(0x9000, 0x9010, TS);
    s.stream_start(100, false);
    s.insert(1, &[t("3")]);
    s.stream_stop();
    s.stream_commit(200, 0x9100, 0x9110, TS + 1);
    s.stream_commit(100, 0x9200, 0x9210, TS + 2);
    let c = decode(&s);
    assert_eq!(
        table_rows(&c, "public.a", &["id", "_xid", "_commit_lsn"]),
        vec!["20|300|36864", "10|200|37120", "1|100|37376", "2|100|37376", "3|100|37376"]
    );
    assert_eq!(c.table_versions["public.a"].len(), 1);
    let t = &c.tables["public.a"].batches[0];
    // _commit_lsn then _seq orders them as they came out.
    let commit = col_i64(t, "_commit_lsn");
    let seq = col_i64(t, "_seq");
    let mut keys: Vec<_> = commit.iter().zip(&seq).collect();
    let sorted = {
        let mut k = keys.clone();
        k.sort();
        k
    };
    assert_eq!(keys, sorted);
    keys.dedup();
    assert_eq!(keys.len(), 5);
    assert_eq!(
        rows(std::slice::from_ref(&c.transactions), &["xid", "outcome", "streamed", "changes"]),
        vec!["300|committed|false|1", "200|committed|true|1", "100|committed|true|3"]
    );
}

/// ROLLBACK TO SAVEPOINT inside a streamed transaction: Stream Abort with the
/// subtransaction's xid drops only the changes that carry it.
#[test]
fn savepoint_rollback_within_stream() {
    for limit in [usize::MAX, 1] {
        let mut s = Stream::new();
        s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
        s.stream_start(500, true);
        s.insert_sub(None, 1, &[t("1")]);
        s.insert_sub(Some(501), 1, &[t("2")]);
        s.insert_sub(Some(502), 1, &[t("3")]);
        s.insert_sub(Some(501), 1, &[t("22")]);
        s.stream_stop();
        s.stream_abort(500, 501);
        s.stream_start(500, false);
        s.insert_sub(Some(503), 1, &[t("4")]);
        s.stream_stop();
        s.stream_abort(500, 503); // rolled back too, after more chunks
        s.stream_start(500, false);
        s.insert_sub(Some(504), 1, &[t("5")]);
        s.stream_stop();
        s.stream_commit(500, 0x9000, 0x9010, TS);
        let c = decode_with(&s, DecoderOptions { memory_limit: limit, ..Default::default() });
        assert_eq!(table_rows(&c, "public.a", &["id", "_xid"]), vec!["1|500", "3|500", "5|500"], "memory_limit {limit}");
        assert_eq!(rows(std::slice::from_ref(&c.transactions), &["xid", "changes"]), vec!["500|3"]);
    }
}

#[test]
fn aborted_stream_and_unknown_abort() {
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
    s.stream_start(600, true);
    s.insert(1, &[t("1")]);
    s.message(true, 0x700, "p", b"lost");
    s.stream_stop();
    s.stream_abort_parallel(600, 600, 0x8000, TS);
    // PostgreSQL 18 reports aborts of transactions it never streamed.
    s.stream_abort(999, 999);
    s.stream_abort(998, 997);
    s.begin(601, 0x9000, TS);
    s.insert(1, &[t("2")]);
    s.commit(0x9000, 0x9010, TS);
    let c = decode(&s);
    assert_eq!(table_rows(&c, "public.a", &["id"]), vec!["2"]);
    assert_eq!(c.messages.num_rows(), 0);
    assert_eq!(
        rows(std::slice::from_ref(&c.transactions), &["xid", "outcome", "end_lsn", "streamed", "changes"]),
        vec!["600|aborted|32768|true|0", "601|committed|36880|false|1"]
    );
}

/// A Relation message inside an aborted streamed transaction does not change the
/// definition other transactions see.
#[test]
fn relation_in_aborted_stream_is_forgotten() {
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
    s.stream_start(600, true);
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true), ("added", TEXT, -1, false)]);
    s.insert(1, &[t("1"), t("x")]);
    s.stream_stop();
    s.begin(601, 0x9000, TS);
    s.insert(1, &[t("2")]);
    s.commit(0x9000, 0x9010, TS);
    s.stream_abort(600, 600);
    s.begin(602, 0x9100, TS);
    s.insert(1, &[t("3")]);
    s.commit(0x9100, 0x9110, TS);
    let c = decode(&s);
    assert_eq!(table_rows(&c, "public.a", &["id"]), vec!["2", "3"]);
    assert_eq!(c.table_versions["public.a"].len(), 1);
    assert!(c.tables["public.a"].schema.field_with_name("added").is_err());
}

#[test]
fn two_phase_commit_and_rollback() {
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
    s.begin_prepare(700, "g1", 0xA000, 0xA010, TS);
    s.insert(1, &[t("7")]);
    s.prepare(700, "g1", 0xA000, 0xA010, TS);
    s.begin_prepare(701, "g2", 0xA100, 0xA110, TS);
    s.insert(1, &[t("8")]);
    s.prepare(701, "g2", 0xA100, 0xA110, TS);
    // A streamed transaction prepared with Stream Prepare.
    s.stream_start(702, true);
    s.insert(1, &[t("9")]);
    s.stream_stop();
    s.stream_prepare(702, "g3", 0xA200, 0xA210, TS);
    s.begin(703, 0xA300, TS);
    s.insert(1, &[t("10")]);
    s.commit(0xA300, 0xA310, TS);
    s.commit_prepared(700, "g1", 0xB000, 0xB010, TS + 5);
    s.rollback_prepared(701, "g2", 0xA110, 0xB110, TS + 6);
    s.commit_prepared(702, "g3", 0xB200, 0xB210, TS + 7);
    let mut d = Decoder::new(DecoderOptions::default());
    let n = s.messages.len();
    for (i, (lsn, m)) in s.messages.iter().enumerate() {
        d.push(*lsn, &Buffer::from(m.clone())).unwrap();
        if i == n - 4 {
            // After the non-prepared commit: the prepared ones hold the safe LSN back.
            d.flush().unwrap();
            assert_eq!(d.pending_transactions(), 3);
            assert_eq!(d.safe_lsn(), 0xA000);
        }
    }
    d.flush().unwrap();
    assert_eq!(d.safe_lsn(), 0xB210);
    assert_eq!(d.pending_transactions(), 0);
    let c = d.finish().unwrap();
    assert_eq!(
        table_rows(&c, "public.a", &["id", "_xid", "_commit_lsn"]),
        vec!["10|703|41728", "7|700|45056", "9|702|45568"]
    );
    assert_eq!(
        rows(std::slice::from_ref(&c.transactions), &["xid", "gid", "outcome", "streamed", "changes"]),
        vec![
            "703|∅|committed|false|1",
            "700|g1|prepared-committed|false|1",
            "701|g2|prepared-rolled-back|false|0",
            "702|g3|prepared-committed|true|1",
        ]
    );
}

#[test]
fn truncate_and_messages() {
    let mut s = Stream::new();
    s.message(false, 0x50, "audit", b"outside");
    s.begin(800, 0x9000, TS);
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
    s.relation(2, "sales", "b", b'd', &[("id", INT4, -1, true)]);
    s.truncate(&[1, 2], true, true);
    s.message(true, 0x8F00, "app", b"\x00\x01inside");
    s.commit(0x9000, 0x9010, TS);
    s.begin(801, 0x9100, TS);
    s.truncate(&[2], false, false);
    s.commit(0x9100, 0x9110, TS);
    let c = decode(&s);
    assert_eq!(
        rows(std::slice::from_ref(&c.truncates), &["relations", "cascade", "restart_identity", "_commit_lsn", "_xid"]),
        vec!["[public.a, sales.b]|true|true|36864|800", "[sales.b]|false|false|37120|801"]
    );
    assert_eq!(
        rows(std::slice::from_ref(&c.messages), &["prefix", "content", "transactional", "_lsn", "_commit_lsn", "_xid", "_seq"]),
        vec!["audit|6f757473696465|false|80|∅|∅|0", "app|0001696e73696465|true|36608|36864|800|5"]
    );
    // Tables announced but without rows are there, empty.
    assert_eq!(c.tables["sales.b"].num_rows(), 0);
}

#[test]
fn schema_change_unified() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("a", TEXT, -1, false), ("c", TEXT, -1, false)]);
    s.insert(1, &[t("1"), t("x"), t("42")]);
    s.commit(0x100, 0x110, TS);
    s.begin(2, 0x200, TS);
    // ALTER id TYPE int8, ADD b int4, c TYPE int4
    s.relation(
        1,
        "public",
        "t",
        b'd',
        &[("id", INT8, -1, true), ("a", TEXT, -1, false), ("c", INT4, -1, false), ("b", INT4, -1, false)],
    );
    s.insert(1, &[t("2"), t("y"), t("43"), t("5")]);
    s.commit(0x200, 0x210, TS);
    s.begin(3, 0x300, TS);
    // DROP a
    s.relation(1, "public", "t", b'd', &[("id", INT8, -1, true), ("c", INT4, -1, false), ("b", INT4, -1, false)]);
    s.insert(1, &[t("3"), t("44"), t("6")]);
    s.update(1, Some((b'K', &[t("3"), C::N, C::N])), &[t("4"), t("44"), t("6")]);
    s.commit(0x300, 0x310, TS);
    let c = decode(&s);
    let table = &c.tables["public.t"];
    let fields: Vec<(String, DataType)> =
        table.schema.fields().iter().take(4).map(|f| (f.name().clone(), f.data_type().clone())).collect();
    assert_eq!(
        fields,
        vec![
            ("id".to_string(), DataType::Int64),
            ("c".to_string(), DataType::Utf8),
            ("b".to_string(), DataType::Int32),
            ("a".to_string(), DataType::Utf8),
        ]
    );
    assert_eq!(table.schema.field_with_name("c").unwrap().metadata()["pg.unified"], "text");
    assert_eq!(table.schema.field(4).name(), "_op");
    assert_eq!(
        table_rows(&c, "public.t", &["id", "c", "b", "a", "_op"]),
        vec!["1|42|∅|x|insert", "2|43|5|y|insert", "3|44|6|∅|insert", "4|44|6|∅|update"]
    );
    // _before follows the unified columns.
    let before = table.batches[2].column_by_name("_before").unwrap().as_struct();
    assert_eq!(before.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(), ["id", "c", "b", "a"]);
    assert_eq!(before.column(0).as_primitive::<Int64Type>().value(1), 3);
    let versions = &c.table_versions["public.t"];
    assert_eq!(versions.iter().map(|v| v.version).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(versions[0].schema.field(0).data_type(), &DataType::Int32);
    assert_eq!(versions[2].schema.fields().len(), 3 + 9);
    assert_eq!(versions[1].batches[0].num_rows(), 1);
}

#[test]
fn unchanged_toast_is_not_null() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("big", TEXT, -1, false), ("n", INT4, -1, false)]);
    s.update(1, None, &[t("1"), C::U, t("1")]);
    s.update(1, None, &[t("2"), C::N, C::N]);
    s.update(1, None, &[t("3"), C::U, C::U]);
    s.insert(1, &[t("4"), C::N, C::N]);
    s.commit(0x100, 0x110, TS);
    let c = decode(&s);
    assert_eq!(
        table_rows(&c, "public.t", &["id", "big", "n", "_unchanged"]),
        vec!["1|∅|1|[big]", "2|∅|∅|[]", "3|∅|∅|[big, n]", "4|∅|∅|[]"]
    );
    let unchanged = c.tables["public.t"].batches[0].column_by_name("_unchanged").unwrap().clone();
    assert_eq!(unchanged.null_count(), 0);
}

#[test]
fn before_for_old_key_and_old_row() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "k", b'd', &[("id", INT4, -1, true), ("v", TEXT, -1, false)]);
    s.relation(2, "public", "f", b'f', &[("id", INT4, -1, false), ("v", TEXT, -1, false)]);
    s.update(1, Some((b'K', &[t("1"), C::N])), &[t("2"), t("new")]);
    s.update(1, None, &[t("2"), t("newer")]);
    s.delete(1, b'K', &[t("2"), C::N]);
    s.update(2, Some((b'O', &[t("1"), t("old")])), &[t("1"), t("new")]);
    s.delete(2, b'O', &[t("1"), t("new")]);
    s.commit(0x100, 0x110, TS);
    let c = decode(&s);
    let before = |table: &str| -> Vec<String> {
        let b: &RecordBatch = &c.tables[table].batches[0];
        let st: &StructArray = b.column_by_name("_before").unwrap().as_struct();
        (0..st.len())
            .map(|i| {
                if st.is_null(i) {
                    return "null".to_string();
                }
                let id = st.column(0).as_primitive::<Int32Type>();
                let v = st.column(1).as_string::<i32>();
                format!(
                    "{}/{}",
                    if id.is_null(i) { "∅".to_string() } else { id.value(i).to_string() },
                    if v.is_null(i) { "∅" } else { v.value(i) }
                )
            })
            .collect()
    };
    assert_eq!(before("public.k"), ["1/∅", "null", "2/∅"]);
    assert_eq!(before("public.f"), ["1/old", "1/new"]);
    assert_eq!(table_rows(&c, "public.k", &["id", "v", "_op"]), ["2|new|update", "2|newer|update", "2|∅|delete"]);
    assert_eq!(table_rows(&c, "public.f", &["id", "v", "_op"]), ["1|new|update", "1|new|delete"]);
    assert_eq!(c.tables["public.f"].schema.metadata()["pg.replica_identity"], "full");
}

#[test]
fn stream_ending_mid_transaction_emits_nothing_of_it() {
    let mut s = one_table_stream();
    s.begin(701, 0x6000, TS);
    s.insert(16384, &[t("9"), t("never committed")]);
    let mut d = Decoder::new(DecoderOptions::default());
    push_all(&mut d, &s);
    assert_eq!(d.pending_transactions(), 1);
    assert_eq!(d.safe_lsn(), 0, "rows still in the builders are not handed out");
    d.flush().unwrap();
    assert_eq!(d.safe_lsn(), 0x5010);
    let outputs = d.take_ready();
    let rows: usize = outputs
        .iter()
        .map(|o| match o {
            Output::Table { name, version: 1, batch } if name == "public.t" => batch.num_rows(),
            _ => 0,
        })
        .sum();
    assert_eq!(rows, 3, "the row of the open transaction stays out");
    let c = d.finish().unwrap();
    assert!(c.tables["public.t"].batches.is_empty(), "taken batches are not in finish()");
    assert_eq!(c.transactions.num_rows(), 0);
}

#[test]
fn batches_are_cut_at_batch_size() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true)]);
    for i in 0..10 {
        s.insert(1, &[t(&i.to_string())]);
    }
    s.commit(0x100, 0x110, TS);
    let mut d = Decoder::new(DecoderOptions { batch_size: 3, ..Default::default() });
    push_all(&mut d, &s);
    let sizes: Vec<usize> = d
        .take_ready()
        .iter()
        .filter_map(|o| match o {
            Output::Table { batch, .. } => Some(batch.num_rows()),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, [3, 3, 3]);
    d.flush().unwrap();
    assert_eq!(d.take_ready().len(), 2); // the last row and the transaction
}

#[test]
fn push_array_decodes_the_same() {
    let s = one_table_stream();
    let (lsns, data) = s.as_array();
    let mut d = Decoder::new(DecoderOptions::default());
    d.push_array(&lsns, &data).unwrap();
    let a = d.finish().unwrap();
    let b = decode(&s);
    let cols = ["id", "v", "_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before", "_unchanged"];
    assert_eq!(table_rows(&a, "public.t", &cols), table_rows(&b, "public.t", &cols));
    // Large binary and view arrays too.
    let large = arrow_array::LargeBinaryArray::from_iter_values(s.messages.iter().map(|m| m.1.as_slice()));
    let mut d = Decoder::new(DecoderOptions::default());
    d.push_array(&lsns, &large).unwrap();
    assert_eq!(table_rows(&d.finish().unwrap(), "public.t", &cols), table_rows(&b, "public.t", &cols));
    let view = arrow_array::BinaryViewArray::from_iter_values(s.messages.iter().map(|m| m.1.as_slice()));
    let mut d = Decoder::new(DecoderOptions::default());
    d.push_view_array(&lsns, &view).unwrap();
    assert_eq!(table_rows(&d.finish().unwrap(), "public.t", &cols), table_rows(&b, "public.t", &cols));
    // Mismatched lengths are refused.
    let mut d = Decoder::new(DecoderOptions::default());
    assert!(matches!(d.push_array(&lsns[1..], &data), Err(DecodeError::Input(_))));
}

#[test]
fn spilled_transactions_decode_the_same() {
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true), ("v", TEXT, -1, false)]);
    s.stream_start(10, true);
    for i in 0..300 {
        s.insert_sub(Some(if i % 7 == 0 { 11 } else { 10 }), 1, &[t(&i.to_string()), t(&"x".repeat(i % 40))]);
    }
    s.stream_stop();
    s.begin(20, 0x8000, TS);
    for i in 0..50 {
        s.insert(1, &[t(&(1000 + i).to_string()), t("whole")]);
    }
    s.commit(0x8000, 0x8010, TS);
    s.stream_start(10, false);
    for i in 300..400 {
        s.insert_sub(Some(12), 1, &[t(&i.to_string()), t("later chunk, some longer text")]);
    }
    s.stream_stop();
    s.stream_abort(10, 11);
    s.stream_commit(10, 0x9000, 0x9010, TS);
    let cols = ["id", "v", "_xid", "_seq", "_commit_lsn"];
    let expected = table_rows(&decode(&s), "public.a", &cols);
    assert_eq!(expected.len(), 50 + 400 - 300 / 7 - 1);
    let dir = tempfile::tempdir().unwrap();
    let mut d = Decoder::new(DecoderOptions {
        memory_limit: 2000,
        spill_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    });
    let mut max_spilled = 0;
    for (lsn, m) in &s.messages {
        d.push(*lsn, &Buffer::from(m.clone())).unwrap();
        assert!(d.buffered_bytes() <= 2000);
        max_spilled = max_spilled.max(d.spilled_bytes());
    }
    assert!(max_spilled > 10_000, "spilled {max_spilled}");
    assert_eq!(d.spilled_bytes(), 0);
    assert_eq!(table_rows(&d.finish().unwrap(), "public.a", &cols), expected);
}

#[test]
fn arrived_mode_emits_before_commit() {
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
    s.stream_start(10, true);
    s.insert_sub(None, 1, &[t("1")]);
    s.insert_sub(Some(11), 1, &[t("2")]);
    s.stream_stop();
    let mut d = Decoder::new(DecoderOptions { emit: EmitMode::Arrived, ..Default::default() });
    push_all(&mut d, &s);
    d.flush().unwrap();
    let out = d.take_ready();
    let batches: Vec<RecordBatch> = out
        .into_iter()
        .filter_map(|o| match o {
            Output::Table { batch, .. } => Some(batch),
            _ => None,
        })
        .collect();
    assert_eq!(rows(&batches, &["id", "_status", "_xid", "_subxid", "_commit_lsn"]), ["1|in-progress|10|10|∅", "2|in-progress|10|11|∅"]);
    let mut s2 = Stream::new();
    s2.stream_abort(10, 11);
    s2.stream_commit(10, 0x9000, 0x9010, TS);
    push_all(&mut d, &s2);
    let c = d.finish().unwrap();
    assert_eq!(
        rows(std::slice::from_ref(&c.transactions), &["xid", "outcome", "changes"]),
        ["11|subtransaction-aborted|0", "10|committed|2"]
    );
}

#[test]
fn errors_name_what_and_where() {
    // A change for a relation never announced.
    let mut d = Decoder::new(DecoderOptions::default());
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.insert(42, &[t("1")]);
    let (lsn, m) = &s.messages[1];
    d.push(s.messages[0].0, &Buffer::from(s.messages[0].1.clone())).unwrap();
    let e = d.push(*lsn, &Buffer::from(m.clone())).unwrap_err();
    assert!(matches!(e, DecodeError::UnknownRelation { relation_id: 42, lsn: 0x1010 }), "{e:?}");
    assert!(e.to_string().contains("relation id 42 at LSN 0/1010"), "{e}");

    // Protocol errors leave the decoder usable.
    let mut s = Stream::new();
    s.commit(0x100, 0x110, TS);
    s.stream_commit(77, 0x100, 0x110, TS);
    s.stream_stop();
    s.raw(b"Z");
    s.raw(b"B\x00");
    let mut d = Decoder::new(DecoderOptions::default());
    let errors: Vec<String> = s
        .messages
        .iter()
        .map(|(lsn, m)| d.push(*lsn, &Buffer::from(m.clone())).unwrap_err().to_string())
        .collect();
    assert_eq!(errors[0], "message #0 (Commit) at LSN 0/1000: Commit without a Begin before it");
    assert_eq!(
        errors[1],
        "message #1 (Stream Commit) at LSN 0/1010: Stream Commit for transaction 77, which no Stream Start opened"
    );
    assert!(errors[2].contains("Stream Stop outside a stream block"));
    assert!(errors[3].starts_with("message #3 at LSN 0/1030: unknown message kind 'Z'"), "{}", errors[3]);
    assert!(errors[4].contains("offset 1"), "{}", errors[4]);
    push_all(&mut d, &one_table_stream());
    assert_eq!(d.finish().unwrap().tables["public.t"].num_rows(), 3);

    // A tuple that does not fit its relation.
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true)]);
    s.insert(1, &[t("1"), t("2")]);
    let mut d = Decoder::new(DecoderOptions::default());
    let results: Vec<_> = s.messages.iter().map(|(lsn, m)| d.push(*lsn, &Buffer::from(m.clone()))).collect();
    let e = results[2].as_ref().unwrap_err().to_string();
    assert!(e.contains("a tuple of 2 values for public.t") && e.contains("announced 1 columns"), "{e}");

    // A value its type cannot hold: table, column, LSN, offset; the decoder stops.
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("n", INT4, -1, false)]);
    s.insert(1, &[t("1"), t("not a number")]);
    s.commit(0x100, 0x110, TS);
    let mut d = Decoder::new(DecoderOptions::default());
    let results: Vec<_> = s.messages.iter().map(|(lsn, m)| d.push(*lsn, &Buffer::from(m.clone()))).collect();
    // A transaction sent whole is decoded as it arrives: the Insert fails.
    match results[2].as_ref().unwrap_err() {
        DecodeError::Value { table, column, lsn, index, offset, .. } => {
            assert_eq!((table.as_str(), column.as_str(), *lsn, *index, *offset), ("public.t", "n", 0x1020, 2, 19));
        }
        other => panic!("{other:?}"),
    }
    assert!(results[2].as_ref().unwrap_err().to_string().contains("column \"n\" of public.t in message #2 at LSN 0/1020"));
    assert!(matches!(results[3], Err(DecodeError::Stopped(_))));
    assert!(matches!(d.flush(), Err(DecodeError::Stopped(_))));
}

/// How many bytes the output allocates for text values, against the bytes of
/// those values: with views on, the values stay in the input buffer.
#[test]
fn zero_copy_measurement() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "docs", b'd', &[("id", INT4, -1, true), ("body", TEXT, -1, false)]);
    let mut value_bytes = 0usize;
    let n = 20_000;
    for i in 0..n {
        let body = format!("{i:08} {}", "lorem ipsum dolor sit amet ".repeat(1 + i % 8));
        value_bytes += body.len();
        s.insert(1, &[C::B((i as i32).to_be_bytes().to_vec()), C::T(body.into_bytes())]);
    }
    s.commit(0x100, 0x110, TS);
    let (lsns, data) = s.as_array();
    let input = data.values().as_slice().as_ptr_range();
    let input = input.start as usize..input.end as usize;
    let allocated = |views: bool| -> (usize, usize) {
        let mut d = Decoder::new(DecoderOptions {
            types: pgoutput_arrow::TypeOptions { views, ..Default::default() },
            ..Default::default()
        });
        d.push_array(&lsns, &data).unwrap();
        let c = d.finish().unwrap();
        let (mut own, mut shared) = (0, 0);
        for b in &c.tables["public.docs"].batches {
            let col = b.column_by_name("body").unwrap().to_data();
            let mut bufs: Vec<&Buffer> = col.buffers().iter().collect();
            if let Some(nulls) = col.nulls() {
                bufs.push(nulls.buffer());
            }
            for buf in bufs {
                let p = buf.as_ptr() as usize;
                if input.contains(&p) {
                    shared += buf.len();
                } else {
                    own += buf.capacity();
                }
            }
        }
        (own, shared)
    };
    let (own_views, shared_views) = allocated(true);
    let (own_plain, _) = allocated(false);
    eprintln!(
        "zero copy: {n} text values, {value_bytes} bytes of values; allocated for the column: \
         views {own_views} bytes ({:.1}% of the values, input buffer referenced: {shared_views} bytes), \
         without views {own_plain} bytes ({:.1}%)",
        100.0 * own_views as f64 / value_bytes as f64,
        100.0 * own_plain as f64 / value_bytes as f64
    );
    assert!(own_views * 4 < value_bytes, "views allocate {own_views} for {value_bytes} bytes of values");
    assert!(own_plain >= value_bytes);
}

/// A flush while a transaction sent whole is open (its Commit not arrived yet, as
/// when a walsender's read ends mid-transaction): its rows come out at the Commit,
/// once, after those committed before it.
#[test]
fn flush_inside_a_transaction() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true)]);
    s.insert(1, &[t("1")]);
    s.commit(0x100, 0x110, TS);
    s.begin(2, 0x200, TS + 1);
    s.insert(1, &[t("2")]);
    s.truncate(&[1], false, false);
    s.insert(1, &[t("3")]);
    let split1 = s.messages.len();
    s.insert(1, &[t("4")]);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("x", TEXT, -1, false)]);
    s.insert(1, &[t("5"), t("x")]);
    let split2 = s.messages.len();
    s.insert(1, &[t("6"), t("y")]);
    s.commit(0x200, 0x210, TS + 1);
    let mut d = Decoder::new(DecoderOptions::default());
    let mut taken: Vec<Output> = Vec::new();
    for (i, (lsn, m)) in s.messages.iter().enumerate() {
        if i == split1 || i == split2 {
            d.flush().unwrap();
            assert_eq!(d.safe_lsn(), 0x110, "the open transaction is not handed out");
            taken.extend(d.take_ready());
        }
        d.push(*lsn, &Buffer::from(m.clone())).unwrap();
    }
    d.flush().unwrap();
    assert_eq!(d.safe_lsn(), 0x210);
    taken.extend(d.take_ready());
    let truncates: Vec<RecordBatch> = taken
        .iter()
        .filter_map(|o| match o {
            Output::Truncates(batch) => Some(batch.clone()),
            _ => None,
        })
        .collect();
    let tables: Vec<(u32, RecordBatch)> = taken
        .into_iter()
        .filter_map(|o| match o {
            Output::Table { version, batch, .. } => Some((version, batch)),
            _ => None,
        })
        .collect();
    let v1: Vec<RecordBatch> = tables.iter().filter(|t| t.0 == 1).map(|t| t.1.clone()).collect();
    let v2: Vec<RecordBatch> = tables.iter().filter(|t| t.0 == 2).map(|t| t.1.clone()).collect();
    assert_eq!(rows(&v1, &["id", "_commit_lsn", "_commit_ts"]).len(), 4);
    assert_eq!(
        rows(&v1, &["id", "_xid", "_commit_lsn", "_seq"]),
        ["1|1|256|2", "2|2|512|5", "3|2|512|7", "4|2|512|8"]
    );
    assert_eq!(rows(&v2, &["id", "x", "_xid", "_commit_lsn"]), ["5|x|2|512", "6|y|2|512"]);
    // The Truncate between rows 2 and 3 waits for the Commit and comes out once, with
    // the number that orders it between them.
    assert_eq!(rows(&truncates, &["relations", "_xid", "_commit_lsn", "_seq"]), ["[public.t]|2|512|6"]);
}

/// A transaction sent whole that grows past the batch size waits as messages
/// (which may spill), not as rows; batches keep their size.
#[test]
fn large_whole_transaction_with_spill() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("v", TEXT, -1, false)]);
    for i in 0..1000 {
        s.insert(1, &[t(&i.to_string()), t("some text that takes room")]);
    }
    s.commit(0x100, 0x110, TS);
    let mut d = Decoder::new(DecoderOptions { batch_size: 100, memory_limit: 4000, ..Default::default() });
    let mut spilled = 0;
    for (lsn, m) in &s.messages {
        d.push(*lsn, &Buffer::from(m.clone())).unwrap();
        spilled = spilled.max(d.spilled_bytes());
    }
    assert!(spilled > 0);
    d.flush().unwrap();
    let batches: Vec<RecordBatch> = d
        .take_ready()
        .into_iter()
        .filter_map(|o| match o {
            Output::Table { batch, .. } => Some(batch),
            _ => None,
        })
        .collect();
    assert!(batches.iter().all(|b| b.num_rows() == 100), "{:?}", batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>());
    let ids: Vec<String> = rows(&batches, &["id"]);
    assert_eq!(ids, (0..1000).map(|i| i.to_string()).collect::<Vec<_>>());
}

#[test]
fn arrived_mode_statuses() {
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
    s.begin(5, 0x500, TS);
    s.insert(1, &[t("1")]);
    s.commit(0x500, 0x510, TS);
    s.begin_prepare(6, "g", 0x600, 0x610, TS);
    s.insert(1, &[t("2")]);
    s.truncate(&[1], false, false);
    s.prepare(6, "g", 0x600, 0x610, TS);
    s.commit_prepared(6, "g", 0x700, 0x710, TS + 1);
    let c = decode_with(&s, DecoderOptions { emit: EmitMode::Arrived, ..Default::default() });
    assert_eq!(
        table_rows(&c, "public.a", &["id", "_status", "_xid", "_commit_lsn", "_subxid"]),
        ["1|committed|5|1280|∅", "2|prepared|6|∅|∅"]
    );
    assert_eq!(rows(std::slice::from_ref(&c.truncates), &["relations", "_status", "_xid"]), ["[public.a]|prepared|6"]);
    assert_eq!(
        rows(std::slice::from_ref(&c.transactions), &["xid", "gid", "outcome", "changes"]),
        ["5|∅|committed|1", "6|g|prepared|1", "6|g|prepared-committed|1"]
    );
}

/// The changes of `direct_path_decodes_as_the_other_paths`, in transactions sent whole or,
/// with `streamed`, each as one stream block committed at once.
fn mixed_workload(binary: bool, streamed: bool) -> Stream {
    let int = |v: i32| if binary { b(&v.to_be_bytes()) } else { t(&v.to_string()) };
    let big = |v: i64| if binary { b(&v.to_be_bytes()) } else { t(&v.to_string()) };
    let txt = |v: &str| if binary { b(v.as_bytes()) } else { t(v) };
    let a_v1: &[Col<'_>] = &[("id", INT4, -1, true), ("v", TEXT, -1, false), ("n", INT8, -1, false)];
    let a_v2: &[Col<'_>] = &[("id", INT4, -1, true), ("v", TEXT, -1, false), ("n", INT8, -1, false), ("w", INT4, -1, false)];
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', a_v1);
    s.relation(2, "public", "b", b'f', &[("id", INT8, -1, true), ("filler", BPCHAR, 88, false)]);
    let mut xid = 100;
    let mut txn = |s: &mut Stream, body: &dyn Fn(&mut Stream)| {
        xid += 1;
        let lsn = 0x10_0000 * xid as u64;
        if streamed {
            s.stream_start(xid, true);
            body(s);
            s.stream_stop();
            s.stream_commit(xid, lsn, lsn + 0x10, TS + xid as i64);
        } else {
            s.begin(xid, lsn, TS + xid as i64);
            body(s);
            s.commit(lsn, lsn + 0x10, TS + xid as i64);
        }
    };
    txn(&mut s, &|s| {
        s.insert(1, &[int(1), txt("one"), big(10)]);
        s.insert(2, &[big(1), txt(&"x".repeat(88))]);
        s.insert(1, &[int(2), C::N, big(20)]);
        s.update(1, None, &[int(1), txt("one, a value longer than twelve bytes"), big(11)]);
        s.update(1, Some((b'K', &[int(2), C::N, C::N])), &[int(3), txt("moved"), big(30)]);
        s.update(2, Some((b'O', &[big(1), txt(&"x".repeat(88))])), &[big(1), txt(&"y".repeat(88))]);
        s.delete(2, b'O', &[big(1), txt(&"y".repeat(88))]);
    });
    txn(&mut s, &|s| {
        s.update(1, None, &[int(1), C::U, big(12)]);
        s.delete(1, b'K', &[int(3), C::N, C::N]);
        s.insert(2, &[big(2), txt("short")]);
    });
    // A new definition of "a" between transactions, sent again inside a transaction.
    s.relation(1, "public", "a", b'd', a_v2);
    txn(&mut s, &|s| {
        s.insert(1, &[int(4), txt("four"), big(40), int(400)]);
        s.insert(2, &[big(3), txt("three")]);
        s.relation(1, "public", "a", b'd', a_v2);
        s.insert(1, &[int(5), txt("five"), big(50), C::N]);
    });
    // "b" again with a column of another type but as many columns: its rows must not go
    // to the builder of the first definition.
    s.relation(2, "public", "b", b'f', &[("id", INT8, -1, true), ("filler", TEXT, -1, false)]);
    // A Truncate waits for the Commit; the rows around it go to their builders.
    txn(&mut s, &|s| {
        s.insert(2, &[big(4), txt("before the truncate")]);
        s.truncate(&[2], false, false);
        s.insert(2, &[big(5), txt("after the truncate")]);
        s.insert(1, &[int(6), txt("six"), big(60), int(600)]);
    });
    // More rows than a batch holds (batch_size 4 below).
    txn(&mut s, &|s| {
        for i in 0..11 {
            s.insert(1, &[int(100 + i), txt(&format!("row {i} of a long transaction")), big(i as i64), int(i)]);
            s.update(2, None, &[big(i as i64), txt("updated")]);
        }
    });
    txn(&mut s, &|s| {
        s.insert(1, &[int(7), txt("seven"), big(70), C::N]);
    });
    s
}

/// The default options but `time` as Time64, where `24:00:00` is a special value (the
/// default, text, holds it).
fn time64() -> DecoderOptions {
    let mut options = DecoderOptions::default();
    options.types.time = pgoutput_arrow::TimeType::Time64;
    options
}

fn decode_array(s: &Stream, options: DecoderOptions) -> pgoutput_arrow::Changes {
    let (lsns, data) = s.as_array();
    let mut d = Decoder::new(options);
    d.push_array(&lsns, &data).unwrap_or_else(|e| panic!("{e}"));
    d.finish().unwrap_or_else(|e| panic!("{e}"))
}

/// The columns of every table, but the Arrived mode's own, as strings: the unified
/// tables, then each version of each table with its Arrow types.
fn all_rows(c: &pgoutput_arrow::Changes, skip: &[&str]) -> Vec<(String, Vec<String>)> {
    let show = |name: String, batches: &[RecordBatch]| {
        let schema = batches[0].schema();
        let cols: Vec<&str> = schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .filter(|n| !["_status", "_subxid"].contains(n) && !skip.contains(n))
            .collect();
        let types: Vec<String> = cols.iter().map(|c| format!("{c}: {}", schema.field_with_name(c).unwrap().data_type())).collect();
        (format!("{name} [{}]", types.join(", ")), rows(batches, &cols))
    };
    let tables = c.tables.iter().map(|(name, table)| show(name.clone(), &table.batches));
    let versions = c.table_versions.iter().flat_map(|(name, versions)| {
        versions.iter().filter(|v| !v.batches.is_empty()).map(move |v| show(format!("{name} v{}", v.version), &v.batches))
    });
    tables.chain(versions).collect()
}

/// Changes of a transaction sent whole go to the builders by a short path (a Truncate
/// among them waits for the Commit, the rows after it do not; a builder it fills is cut,
/// its rows waiting for the Commit); the same changes decoded by the paths that cannot
/// take it (Arrived mode, a streamed copy, and the buffered replay of a transaction
/// whose cut rows passed half the memory limit) give the same tables and truncates.
#[test]
fn direct_path_decodes_as_the_other_paths() {
    let default_limit = DecoderOptions::default().memory_limit;
    for binary in [false, true] {
        let whole = mixed_workload(binary, false);
        for (batch_size, memory_limit) in [(4, default_limit), (4, 1000), (65536, default_limit)] {
            let opts = || DecoderOptions { batch_size, memory_limit, ..Default::default() };
            let direct = decode_array(&whole, opts());
            let expected = all_rows(&direct, &[]);
            assert_eq!(expected.len(), 2 + 4, "{expected:?}");
            assert_eq!(expected[0].1.len(), 21, "{expected:?}");
            // Pushed one message at a time (no zero copy), the same.
            assert_eq!(all_rows(&decode_with(&whole, opts()), &[]), expected);
            let arrived = decode_array(&whole, DecoderOptions { emit: EmitMode::Arrived, ..opts() });
            assert_eq!(all_rows(&arrived, &[]), expected, "binary {binary}, batch_size {batch_size}, limit {memory_limit}");
            let truncates = |c: &pgoutput_arrow::Changes, cols: &[&str]| rows(std::slice::from_ref(&c.truncates), cols);
            let cols = ["relations", "cascade", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq"];
            assert_eq!(truncates(&direct, &cols).len(), 1);
            assert_eq!(truncates(&arrived, &cols), truncates(&direct, &cols));
            // A streamed copy has other message numbers and LSNs (its Stream Start and Stop).
            let streamed = decode_array(&mixed_workload(binary, true), opts());
            assert_eq!(all_rows(&streamed, &["_seq", "_lsn"]), all_rows(&direct, &["_seq", "_lsn"]));
            let cols = ["relations", "cascade", "_commit_lsn", "_commit_ts", "_xid"];
            assert_eq!(truncates(&streamed, &cols), truncates(&direct, &cols));
            assert_eq!(
                rows(std::slice::from_ref(&streamed.transactions), &["xid", "commit_lsn", "commit_ts", "changes"]),
                rows(std::slice::from_ref(&direct.transactions), &["xid", "commit_lsn", "commit_ts", "changes"]),
            );
        }
    }
}

/// The errors of a change in a transaction sent whole, once its table's builder is made
/// (where the short path would take it): the same text as in Arrived mode, and the
/// decoder goes on (or stops) as it does there.
#[test]
fn direct_path_errors_as_the_other_paths() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown relation", {
            let mut s = Stream::new();
            s.insert(42, &[t("1"), t("x")]);
            s.messages[0].1.clone()
        }),
        ("too many values", {
            let mut s = Stream::new();
            s.insert(1, &[t("1"), t("x"), t("extra")]);
            s.messages[0].1.clone()
        }),
        ("too few old values", {
            let mut s = Stream::new();
            s.update(1, Some((b'O', &[t("1")])), &[t("1"), t("x")]);
            s.messages[0].1.clone()
        }),
        ("truncated", {
            let mut s = Stream::new();
            s.insert(1, &[t("1"), t("some text")]);
            let m = &s.messages[0].1;
            m[..m.len() - 3].to_vec()
        }),
        ("trailing byte", {
            let mut s = Stream::new();
            s.delete(1, b'K', &[t("1"), C::N]);
            let mut m = s.messages[0].1.clone();
            m.push(0);
            m
        }),
        ("value", {
            let mut s = Stream::new();
            s.insert(1, &[t("not a number"), t("x")]);
            s.messages[0].1.clone()
        }),
        ("utf-8", {
            let mut s = Stream::new();
            s.insert(1, &[t("9"), C::T(b"bad \xff byte in a long value".to_vec())]);
            s.messages[0].1.clone()
        }),
    ];
    for (what, bad) in cases {
        let mut s = Stream::new();
        s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("v", TEXT, -1, false)]);
        s.begin(9, 0x9000, TS);
        s.insert(1, &[t("1"), t("first")]);
        s.raw(&bad);
        s.insert(1, &[t("2"), t("after")]);
        s.commit(0x9000, 0x9010, TS);
        let run = |emit: EmitMode| {
            let (lsns, data) = s.as_array();
            let mut d = Decoder::new(DecoderOptions { emit, ..Default::default() });
            let results: Vec<String> = (0..lsns.len())
                .map(|i| match d.push_array(&lsns[i..i + 1], &data.slice(i, 1)) {
                    Ok(()) => "ok".to_string(),
                    Err(e) => e.to_string(),
                })
                .collect();
            let tables = d.finish().map(|c| all_rows(&c, &[])).map_err(|e| e.to_string());
            (results, tables)
        };
        let (direct, direct_tables) = run(EmitMode::Committed);
        let (arrived, arrived_tables) = run(EmitMode::Arrived);
        assert_ne!(direct[3], "ok", "{what}");
        assert_eq!(direct, arrived, "{what}");
        assert_eq!(direct_tables, arrived_tables, "{what}");
    }
}

/// The Transactions table keeps an origin, its LSN and a gid on their rows only.
#[test]
fn transactions_origin_and_gid_on_their_rows() {
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
    for xid in 800..804 {
        s.begin(xid, 0xC000 + xid as u64, TS);
        if xid % 2 == 1 {
            s.origin("node_b", 0x7700 + xid as u64);
        }
        s.insert(1, &[t(&xid.to_string())]);
        s.commit(0xC000 + xid as u64, 0xC010 + xid as u64, TS);
    }
    s.begin_prepare(804, "g4", 0xD000, 0xD010, TS);
    s.prepare(804, "g4", 0xD000, 0xD010, TS);
    s.commit_prepared(804, "g4", 0xD100, 0xD110, TS);
    let c = decode(&s);
    assert_eq!(
        rows(std::slice::from_ref(&c.transactions), &["xid", "origin", "origin_lsn", "gid", "commit_lsn", "begin_lsn"]),
        vec![
            "800|∅|∅|∅|49952|4112",
            "801|node_b|31265|∅|49953|4160",
            "802|∅|∅|∅|49954|4224",
            "803|node_b|31267|∅|49955|4272",
            "804|∅|∅|g4|53504|4336",
        ]
    );
}

/// Without views a utf8 column holds at most 2 GiB per array (32-bit offsets): 2.2 GB of
/// 1 MiB values come out in batches cut by their bytes, not a panic, every row once.
/// Logical messages' contents likewise.
#[test]
fn batches_are_cut_by_bytes_before_offsets_overflow() {
    const ROWS: u64 = 2200;
    let value = "x".repeat(1 << 20);
    let mut s = Stream::new();
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("v", TEXT, -1, false)]);
    s.insert(1, &[t("1"), t(&value)]);
    s.message(true, 0x90, "p", value.as_bytes());
    let buffer = |i: usize| Buffer::from(s.messages[i].1.clone());
    let (relation, insert, message) = (buffer(0), buffer(1), buffer(2));
    let types = pgoutput_arrow::TypeOptions { views: false, ..Default::default() };
    let mut d = Decoder::new(DecoderOptions { types, ..Default::default() });
    let (mut rows, mut messages, mut batches) = (0u64, 0u64, 0);
    let mut drain = |d: &mut Decoder| {
        for o in d.take_ready() {
            match o {
                Output::Table { batch, .. } => {
                    let v = batch.column_by_name("v").unwrap().as_string::<i32>();
                    assert!(v.value_data().len() <= (300 << 20), "a batch of {} bytes", v.value_data().len());
                    assert!((0..v.len()).all(|i| v.value(i).len() == 1 << 20));
                    rows += batch.num_rows() as u64;
                    batches += 1;
                }
                Output::Messages(batch) => messages += batch.num_rows() as u64,
                _ => {}
            }
        }
    };
    for i in 0..ROWS {
        let lsn = 0x1000 * (i + 1);
        let mut txn = Stream::new();
        txn.begin(i as u32 + 1, lsn + 0x100, TS);
        txn.commit(lsn + 0x100, lsn + 0x110, TS);
        d.push(lsn, &Buffer::from(txn.messages[0].1.clone())).unwrap();
        if i == 0 {
            d.push(lsn, &relation).unwrap();
        }
        d.push(lsn + 0x10, &insert).unwrap();
        d.push(lsn + 0x20, &message).unwrap();
        d.push(lsn + 0x100, &Buffer::from(txn.messages[1].1.clone())).unwrap();
        drain(&mut d);
    }
    d.flush().unwrap();
    drain(&mut d);
    assert_eq!((rows, messages), (ROWS, ROWS));
    assert!(batches >= 8, "{batches} batches");
}

/// Issue 13, reproduction 1: a column added and later dropped, with rows of an older
/// definition after a newer one (the identical definition comes back): one table, in
/// commit order, no "target schema is not superset" error.
#[test]
fn added_then_dropped_column_unifies_in_commit_order() {
    let mut s = Stream::new();
    let v1: &[Col<'_>] = &[("id", INT4, -1, true), ("a", INT4, -1, false)];
    let v2: &[Col<'_>] = &[("id", INT4, -1, true), ("a", INT4, -1, false), ("b", TEXT, -1, false)];
    let v3: &[Col<'_>] = &[("id", INT4, -1, true), ("a", INT8, -1, false), ("b", TEXT, -1, false)];
    for (xid, (def, cells)) in [
        (v1, vec![t("1"), t("1")]),
        (v2, vec![t("2"), t("2"), t("x")]),
        (v1, vec![t("3"), t("3")]),
        (v3, vec![t("5"), t("5"), t("y")]),
        (v1, vec![t("6"), t("6")]),
    ]
    .into_iter()
    .enumerate()
    {
        let lsn = 0x100 * (xid as u64 + 1);
        s.begin(xid as u32 + 1, lsn, TS);
        s.relation(1, "public", "t", b'd', def);
        s.insert(1, &cells);
        s.commit(lsn, lsn + 0x10, TS);
    }
    let c = decode(&s);
    let table = &c.tables["public.t"];
    assert_eq!(table_rows(&c, "public.t", &["id", "a", "b"]), ["1|1|∅", "2|2|x", "3|3|∅", "5|5|y", "6|6|∅"]);
    // The last definition (v1's a int4) unified with v3's int8 keeps int8.
    assert_eq!(table.schema.field_with_name("a").unwrap().data_type(), &DataType::Int64);
}

/// A renamed column stays one column under its newest name, in the middle and at the end.
#[test]
fn renamed_columns_stay_one_column() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("a", INT4, -1, false), ("z", TEXT, -1, false)]);
    s.insert(1, &[t("1"), t("10"), t("p")]);
    s.commit(0x100, 0x110, TS);
    s.begin(2, 0x200, TS);
    // RENAME a TO a_renamed (before a kept column); RENAME z TO z2 (at the end, same type).
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("a_renamed", INT4, -1, false), ("z2", TEXT, -1, false)]);
    s.insert(1, &[t("2"), t("20"), t("q")]);
    s.commit(0x200, 0x210, TS);
    s.begin(3, 0x300, TS);
    // DROP z2, ADD n int4: a different type at the end is a new column, not a rename.
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("a_renamed", INT4, -1, false), ("n", INT4, -1, false)]);
    s.insert(1, &[t("3"), t("30"), t("7")]);
    s.commit(0x300, 0x310, TS);
    let c = decode(&s);
    let names: Vec<&str> =
        c.tables["public.t"].schema.fields().iter().map(|f| f.name().as_str()).take_while(|n| !n.starts_with('_')).collect();
    assert_eq!(names, ["id", "a_renamed", "n", "z2"]);
    assert_eq!(table_rows(&c, "public.t", &["id", "a_renamed", "z2", "n"]), ["1|10|p|∅", "2|20|q|∅", "3|30|∅|7"]);
}

/// Two versions of a column with no common lossless type (a dropped column re-added under
/// its name with another type): utf8 with PostgreSQL's text of each value.
#[test]
fn incompatible_versions_fall_back_to_postgresql_text() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("b", 1184, -1, false)]);
    s.insert(1, &[t("1"), t("2024-01-02 03:04:05.5+00")]);
    s.commit(0x100, 0x110, TS);
    s.begin(2, 0x200, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("b", 1007, -1, false)]);
    s.insert(1, &[t("2"), t("{1,NULL,3}")]);
    s.commit(0x200, 0x210, TS);
    let c = decode(&s);
    let b = c.tables["public.t"].schema.field_with_name("b").unwrap().clone();
    assert_eq!(b.data_type(), &DataType::Utf8);
    assert_eq!(b.metadata()["pg.unified"], "text");
    assert_eq!(table_rows(&c, "public.t", &["id", "b"]), ["1|2024-01-02 03:04:05.5+00", "2|{1,NULL,3}"]);
}

/// Issue 13, reproduction 2: values PostgreSQL accepts that no Arrow value of the column's
/// type holds decode with the default options: null in the column, PostgreSQL's text in
/// `_special` (text and binary cells alike), also for old values in `_before`.
#[test]
fn special_values_kept_in_special_column_by_default() {
    const TIME: u32 = 1083;
    const NUMERIC: u32 = 1700;
    const TIMESTAMP: u32 = 1114;
    let typmod_5_2 = ((5 << 16) | 2) + 4;
    let cols: &[Col<'_>] = &[("id", INT4, -1, true), ("t", TIME, -1, false), ("n", NUMERIC, typmod_5_2, false), ("ts", TIMESTAMP, -1, false)];
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "u", b'f', cols);
    s.insert(1, &[t("1"), t("24:00:00"), t("NaN"), t("294276-01-01 00:00:00")]);
    s.insert(1, &[t("2"), t("12:00:00"), t("1.50"), t("2024-01-01 00:00:00")]);
    // Binary cells: time 24:00:00 = 86400000000 µs; numeric NaN = ndigits 0, weight 0, sign 0xC000, dscale 0.
    let day: i64 = 86_400_000_000;
    s.insert(1, &[t("3"), b(&day.to_be_bytes()), b(&[0, 0, 0, 0, 0xC0, 0, 0, 0]), C::N]);
    s.delete(1, b'O', &[t("1"), t("24:00:00"), t("NaN"), t("294276-01-01 00:00:00")]);
    s.commit(0x100, 0x110, TS);
    let c = decode_with(&s, time64());
    assert_eq!(
        table_rows(&c, "public.u", &["id", "t", "n", "ts", "_special"]),
        [
            "1|∅|∅|∅|{t: 24:00:00, n: NaN, ts: 294276-01-01 00:00:00}",
            "2|12:00:00|1.50|2024-01-01T00:00:00|∅",
            "3|∅|∅|∅|{t: 24:00:00, n: NaN}",
            "1|∅|∅|∅|{t: 24:00:00, n: NaN, ts: 294276-01-01 00:00:00, _before.t: 24:00:00, _before.n: NaN, _before.ts: 294276-01-01 00:00:00}",
        ]
    );
    // The opt-in policies stay: "error" stops, "null" loses the value.
    let mut options = time64();
    options.types.special_values = SpecialValues::Error;
    let mut d = Decoder::new(options);
    let err = s.messages.iter().find_map(|(lsn, m)| d.push(*lsn, &Buffer::from(m.clone())).err());
    assert!(err.is_some_and(|e| e.to_string().contains("24:00:00")));
}

/// Found by the randomized tester (seeds 302 and 2043): under REPLICA IDENTITY FULL, an array
/// column settled at depth 1 kept a 2-D value in `_special`; the old row of its update then
/// made the `_before` column learn depth 2 (first a failed batch, "column types must match
/// schema types"; then a `_before` column that unifying made text beside a 1-D column). The
/// old values' column takes its column's depth: the 2-D old value is a special value there
/// too, in every batch cut (one batch, or the update in a batch after the inserts').
#[test]
fn old_row_array_of_another_depth_than_its_column() {
    const INT4_ARRAY: u32 = 1007;
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'f', &[("id", INT4, -1, true), ("a", INT4_ARRAY, -1, true)]);
    s.insert(1, &[t("1"), t("{1}")]);
    s.insert(1, &[t("2"), t("{{1,2},{3,4}}")]);
    s.update(1, Some((b'O', &[t("2"), t("{{1,2},{3,4}}")])), &[t("2"), t("{5}")]);
    s.commit(0x100, 0x110, TS);
    for batch_size in [65536, 2] {
        let c = decode_with(&s, DecoderOptions { batch_size, ..Default::default() });
        assert_eq!(
            table_rows(&c, "public.t", &["id", "a", "_special"]),
            ["1|[1]|∅", "2|∅|{a: {{1,2},{3,4}}}", "2|[5]|{_before.a: {{1,2},{3,4}}}"],
            "batch_size {batch_size}"
        );
        for batch in c.table_versions["public.t"][0].batches.iter().chain(&c.tables["public.t"].batches) {
            let before = batch.column_by_name("_before").unwrap().as_struct();
            let a = before.column_by_name("a").unwrap();
            assert_eq!(a.data_type(), batch.column_by_name("a").unwrap().data_type(), "batch_size {batch_size}");
        }
    }
}

/// Found by the randomized tester (seed 302): a special value of a column renamed later kept
/// the old name as its `_special` key, so no column of the unified table had it.
#[test]
fn special_values_follow_a_renamed_column() {
    const TIME: u32 = 1083;
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'f', &[("id", INT4, -1, true), ("t", TIME, -1, false)]);
    s.insert(1, &[t("1"), t("24:00:00")]);
    s.update(1, Some((b'O', &[t("1"), t("24:00:00")])), &[t("1"), t("24:00:00")]);
    s.commit(0x100, 0x110, TS);
    s.begin(2, 0x200, TS);
    s.relation(1, "public", "t", b'f', &[("id", INT4, -1, true), ("t_renamed", TIME, -1, false)]);
    s.insert(1, &[t("2"), t("24:00:00")]);
    s.commit(0x200, 0x210, TS);
    let c = decode_with(&s, time64());
    assert_eq!(
        table_rows(&c, "public.t", &["id", "t_renamed", "_special"]),
        [
            "1|∅|{t_renamed: 24:00:00}",
            "1|∅|{t_renamed: 24:00:00, _before.t_renamed: 24:00:00}",
            "2|∅|{t_renamed: 24:00:00}"
        ]
    );
    // Each version as decoded keeps the names of its time.
    assert_eq!(rows(&c.table_versions["public.t"][0].batches, &["_special"])[0], "{t: 24:00:00}");
}

/// Found by the randomized tester (seed 558): an unchanged TOAST value of a column renamed
/// later was listed in `_unchanged` under the old name, so a replay of the unified table
/// lost the value.
#[test]
fn unchanged_toast_follows_a_renamed_column() {
    let mut s = Stream::new();
    s.begin(1, 0x100, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("big", TEXT, -1, false), ("n", INT4, -1, false)]);
    s.update(1, None, &[t("1"), C::U, t("2")]);
    s.commit(0x100, 0x110, TS);
    s.begin(2, 0x200, TS);
    s.relation(1, "public", "t", b'd', &[("id", INT4, -1, true), ("big2", TEXT, -1, false), ("n", INT4, -1, false)]);
    s.update(1, None, &[t("1"), C::U, t("3")]);
    s.commit(0x200, 0x210, TS);
    let c = decode(&s);
    assert_eq!(table_rows(&c, "public.t", &["id", "n", "_unchanged"]), ["1|2|[big2]", "1|3|[big2]"]);
    assert_eq!(rows(&c.table_versions["public.t"][0].batches, &["_unchanged"]), ["[big]"]);
}
