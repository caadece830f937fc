//! Every type, from PostgreSQL 18's text output and from its binary send format: both must
//! give the same Arrow array, equal to what PostgreSQL says the value is.
//!
//! The pairs are in tests/data/type_vectors.json, written by gen_type_vectors.py from a real
//! server (`SELECT typoutput(v), typsend(v)` for each value, plus independent expected
//! numbers such as `v - date '1970-01-01'`).


use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_buffer::Buffer;
use arrow_schema::DataType;
use pgoutput_arrow::types::{ColumnBuilder, PgColumnType, Source, SpecialValues, TypeOptions};
use serde_json::Value;

/// The vectors of PostgreSQL 18 (type_vectors.json) or 15 (type_vectors_pg15.json).
fn vectors(file: &str) -> Value {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect(file)).expect("valid JSON")
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

#[derive(Clone)]
struct Val {
    text: String,
    binary: Vec<u8>,
    class: Option<String>,
    expect: Option<String>,
}

#[derive(Clone)]
struct Case {
    label: String,
    ty: PgColumnType,
    ndims: usize,
    session_tz: bool,
    raw: bool,
    values: Vec<Val>,
}

fn cases(file: &str) -> Vec<Case> {
    let v = vectors(file);
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let session = c.get("session").cloned().unwrap_or(Value::Null);
            Case {
                label: format!("{} {}", c["type"].as_str().unwrap(), session),
                ty: PgColumnType {
                    oid: c["oid"].as_u64().unwrap() as u32,
                    typmod: c["typmod"].as_i64().unwrap() as i32,
                    type_name: Some(c["type_name"].as_str().unwrap().to_string()),
                },
                ndims: c.get("array_ndims").and_then(|n| n.as_u64()).unwrap_or(1) as usize,
                session_tz: session.get("TimeZone").is_some(),
                raw: c.get("unrendered").is_some() || c.get("unknown").is_some(),
                values: c["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| Val {
                        text: v["text"].as_str().unwrap().to_string(),
                        binary: hex(v["binary"].as_str().unwrap()),
                        class: v.get("class").and_then(|c| c.as_str()).map(String::from),
                        expect: v.get("expect").and_then(|c| c.as_str()).map(String::from),
                    })
                    .collect(),
            }
        })
        .collect()
}

fn strings(a: &ArrayRef) -> Vec<Option<String>> {
    match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().iter().map(|s| s.map(String::from)).collect(),
        DataType::Utf8View => a.as_string_view().iter().map(|s| s.map(String::from)).collect(),
        t => panic!("not a string array: {t}"),
    }
}

fn binaries(a: &ArrayRef) -> Vec<Option<Vec<u8>>> {
    match a.data_type() {
        DataType::Binary => a.as_binary::<i32>().iter().map(|s| s.map(<[u8]>::to_vec)).collect(),
        DataType::BinaryView => a.as_binary_view().iter().map(|s| s.map(<[u8]>::to_vec)).collect(),
        DataType::FixedSizeBinary(_) => a.as_fixed_size_binary().iter().map(|s| s.map(<[u8]>::to_vec)).collect(),
        t => panic!("not a binary array: {t}"),
    }
}

/// Builds the column from text and from binary under one set of options and checks them.
fn check_case(case: &Case, special: SpecialValues, views: bool) -> usize {
    let label = format!("{} [{special:?}, views={views}]", case.label);
    // The vectors' special intervals are those month_day_nano cannot hold (the struct, the
    // default, holds every interval: `interval_struct_holds_what_month_day_nano_cannot`).
    let opts = TypeOptions {
        special_values: special,
        views,
        binary: false,
        array_ndims: case.ndims,
        learn_array_ndims: false,
        interval: pgoutput_arrow::IntervalType::MonthDayNano,
        time: pgoutput_arrow::TimeType::Time64,
        ..TypeOptions::default()
    };
    let mut t = ColumnBuilder::new(&case.ty, &opts);
    let mut b = ColumnBuilder::new(&case.ty, &TypeOptions { binary: true, ..opts.clone() });
    let is_list = matches!(t.data_type(), DataType::List(_));
    let mut checked = 0;
    // Which rows hold an ordinary value (not an error, not a null made by the policy).
    let mut ordinary = Vec::new();
    for v in &case.values {
        let (before_t, before_b) = (t.len(), b.len());
        let rt = t.append_text(v.text.as_bytes(), None);
        let rb = b.append_binary(&v.binary, None);
        let special_class = v.class.is_some();
        match (&rt, &rb) {
            (Ok(()), Ok(())) => {}
            (Err(et), Err(eb)) => {
                assert!(special_class, "{label}: unexpected errors for {:?}: {et} / {eb}", v.text);
                assert_eq!((t.len(), b.len()), (before_t, before_b), "{label}: an error appended");
                t.append_null();
                b.append_null();
            }
            _ => panic!("{label}: text gave {rt:?}, binary gave {rb:?} for {:?}", v.text),
        }
        let err = rt.is_err();
        match (v.class.as_deref(), special) {
            (Some("special"), SpecialValues::Error) => assert!(err, "{label}: {:?} should be an error", v.text),
            (Some("special"), SpecialValues::Text) if !is_list => assert!(!err, "{label}: {:?}", v.text),
            (Some(_), SpecialValues::Null) => assert!(!err, "{label}: {:?} should be null", v.text),
            (Some("infinite"), _) => assert!(!err, "{label}: {:?}", v.text),
            _ => {}
        }
        ordinary.push(!(err || special_class && special == SpecialValues::Null));
        checked += 1;
    }
    let (at, ab) = (t.finish(), b.finish());
    assert_eq!(at.len(), case.values.len());
    assert_eq!(t.len(), 0, "finish resets");
    assert_eq!(at.data_type(), t.data_type(), "{label}: data_type() is the arrays' type");
    assert_eq!(ab.data_type(), b.data_type(), "{label}");
    if case.raw {
        // Not decoded: Utf8 of the text in text mode, Binary of the raw bytes in binary mode.
        assert_eq!(strings(&at), case.values.iter().map(|v| Some(v.text.clone())).collect::<Vec<_>>(), "{label}");
        assert_eq!(binaries(&ab), case.values.iter().map(|v| Some(v.binary.clone())).collect::<Vec<_>>(), "{label}");
        return checked;
    }
    assert_eq!(at.data_type(), ab.data_type(), "{label}: same type from text and binary");
    assert_eq!(at.as_ref(), ab.as_ref(), "{label}: text and binary give different arrays");
    // Nulls exactly where the policy makes them.
    for (i, v) in case.values.iter().enumerate() {
        if is_list && v.class.is_some() {
            continue; // the whole array or only an element may be the special value
        }
        let policy_null = v.class.is_some() && special == SpecialValues::Null && !at.is_valid(i);
        assert_eq!(at.is_null(i), !ordinary[i] || policy_null, "{label}: null at {:?}", v.text);
    }
    // The values are what PostgreSQL says.
    let ord = |i: usize| ordinary[i];
    match at.data_type() {
        DataType::Utf8 | DataType::Utf8View => {
            // Binary values rendered to text must print exactly as PostgreSQL does.
            for (i, ((s, r), v)) in strings(&at).iter().zip(strings(&ab)).zip(&case.values).enumerate() {
                if ord(i) {
                    assert_eq!(s.as_deref(), Some(v.text.as_str()), "{label}");
                    assert_eq!(r.as_deref(), Some(v.text.as_str()), "{label}: rendered from binary");
                }
            }
        }
        DataType::Binary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            for (i, ((s, r), v)) in binaries(&at).iter().zip(binaries(&ab)).zip(&case.values).enumerate() {
                if ord(i) {
                    assert_eq!(s.as_deref(), Some(v.binary.as_slice()), "{label}: decoded from text");
                    assert_eq!(r.as_deref(), Some(v.binary.as_slice()), "{label}");
                }
            }
        }
        DataType::Date32 => {
            let a = at.as_primitive::<Date32Type>();
            for (i, v) in case.values.iter().enumerate().filter(|(i, _)| ord(*i)) {
                let want = match (v.expect.as_deref(), v.text.as_str()) {
                    (Some(e), _) => e.parse().unwrap(),
                    (None, "infinity") => i32::MAX,
                    (None, "-infinity") => pgoutput_arrow::DATE32_NEG_INFINITY,
                    _ => panic!("{label}: no expectation for {}", v.text),
                };
                assert_eq!(a.value(i), want, "{label}: {}", v.text);
            }
        }
        DataType::Timestamp(_, tz) => {
            assert_eq!(tz.as_deref(), (case.ty.oid == 1184).then_some("UTC"));
            let a = at.as_primitive::<TimestampMicrosecondType>();
            for (i, v) in case.values.iter().enumerate().filter(|(i, _)| ord(*i)) {
                let want = match (v.expect.as_deref(), v.text.as_str()) {
                    (Some(e), _) => e.parse().unwrap(),
                    (None, "infinity") => i64::MAX,
                    (None, "-infinity") => pgoutput_arrow::TIMESTAMP_NEG_INFINITY,
                    _ => panic!("{label}: no expectation for {}", v.text),
                };
                assert_eq!(a.value(i), want, "{label}: {}", v.text);
            }
        }
        DataType::Time64(_) => {
            let a = at.as_primitive::<Time64MicrosecondType>();
            for (i, v) in case.values.iter().enumerate().filter(|(i, _)| ord(*i)) {
                assert_eq!(a.value(i), v.expect.as_ref().unwrap().parse::<i64>().unwrap(), "{label}");
            }
        }
        DataType::Struct(_) => {
            // An interval (IntervalType::Struct): PostgreSQL's fields as they are.
            let s = at.as_struct();
            let (months, days, micros) = (
                s.column(0).as_primitive::<arrow_array::types::Int32Type>(),
                s.column(1).as_primitive::<arrow_array::types::Int32Type>(),
                s.column(2).as_primitive::<arrow_array::types::Int64Type>(),
            );
            for (i, v) in case.values.iter().enumerate().filter(|(i, _)| ord(*i)) {
                let got = (months.value(i) as i64, days.value(i) as i64, micros.value(i));
                let want = match v.expect.as_deref() {
                    Some(e) => {
                        let e: Value = serde_json::from_str(e).unwrap();
                        (e[0].as_i64().unwrap(), e[1].as_i64().unwrap(), e[2].as_str().unwrap().parse().unwrap())
                    }
                    None if v.text == "infinity" => (i32::MAX as i64, i32::MAX as i64, i64::MAX),
                    None => (i32::MIN as i64, i32::MIN as i64, i64::MIN),
                };
                assert_eq!(got, want, "{label}: {}", v.text);
            }
        }
        DataType::Interval(_) => {
            let a = at.as_primitive::<IntervalMonthDayNanoType>();
            for (i, v) in case.values.iter().enumerate().filter(|(i, _)| ord(*i)) {
                let got = a.value(i);
                match v.expect.as_deref() {
                    Some(e) => {
                        let e: Value = serde_json::from_str(e).unwrap();
                        let micros: i64 = e[2].as_str().unwrap().parse().unwrap();
                        assert_eq!(
                            (got.months as i64, got.days as i64, got.nanoseconds),
                            (e[0].as_i64().unwrap(), e[1].as_i64().unwrap(), micros * 1000),
                            "{label}: {}",
                            v.text
                        );
                    }
                    None => {
                        let m = if v.text == "infinity" { i32::MAX } else { i32::MIN };
                        let n = if v.text == "infinity" { i64::MAX } else { i64::MIN };
                        assert_eq!((got.months, got.days, got.nanoseconds), (m, m, n), "{label}");
                    }
                }
            }
        }
        DataType::Decimal128(..) => {
            let a = at.as_primitive::<Decimal128Type>();
            for (i, v) in case.values.iter().enumerate().filter(|(i, _)| ord(*i)) {
                assert_eq!(a.value(i), v.expect.as_ref().unwrap().parse::<i128>().unwrap(), "{label}");
            }
        }
        DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::UInt32 => {
            let a = arrow_cast::cast(&at, &DataType::Utf8).unwrap();
            for (s, v) in strings(&a).iter().zip(&case.values) {
                assert_eq!(s.as_deref(), Some(v.text.as_str()), "{label}");
            }
        }
        DataType::Boolean => {
            let a = at.as_boolean();
            for (i, v) in case.values.iter().enumerate() {
                assert_eq!(a.value(i), v.text == "t", "{label}");
            }
        }
        DataType::Float32 | DataType::Float64 => {
            let single = at.data_type() == &DataType::Float32;
            let a = arrow_cast::cast(&at, &DataType::Float64).unwrap();
            let a = a.as_primitive::<Float64Type>();
            for (i, v) in case.values.iter().enumerate() {
                let want: f64 = match v.text.as_str() {
                    "NaN" => f64::NAN,
                    t if single => t.parse::<f32>().unwrap() as f64,
                    t => t.parse().unwrap(),
                };
                assert!(a.value(i) == want || (want.is_nan() && a.value(i).is_nan()), "{label}: {}", v.text);
                assert_eq!(a.value(i).is_sign_negative(), want.is_sign_negative(), "{label}: {}", v.text);
            }
        }
        DataType::List(_) => {
            // Elements: text mode gives PostgreSQL's own element values; binary must agree.
            let (lt, lb) = (at.as_list::<i32>(), ab.as_list::<i32>());
            assert_eq!(lt.offsets(), lb.offsets(), "{label}");
            assert_eq!(lt.values().as_ref(), lb.values().as_ref(), "{label}");
            if matches!(lt.values().data_type(), DataType::Utf8 | DataType::Utf8View) {
                assert_eq!(strings(lt.values()), strings(lb.values()), "{label}");
            }
        }
        t => panic!("{label}: unchecked type {t}"),
    }
    checked
}

#[test]
fn text_and_binary_give_the_same_values() {
    check_file("type_vectors.json");
}

#[test]
fn text_and_binary_give_the_same_values_pg15() {
    check_file("type_vectors_pg15.json");
}

fn check_file(file: &str) {
    let mut n = 0;
    let mut all = cases(file);
    // Arrays again as PostgreSQL's text (array_ndims 0): every shape fits, nothing is special.
    let as_text: Vec<Case> = all
        .iter()
        .filter(|c| c.label.contains("[]"))
        .map(|c| {
            let mut c = c.clone();
            c.label.push_str(" as text");
            c.ndims = 0;
            c.values.iter_mut().for_each(|v| v.class = None);
            c
        })
        .collect();
    assert!(as_text.len() > 20);
    all.extend(as_text);
    for case in all {
        for special in [SpecialValues::Error, SpecialValues::Null, SpecialValues::Text] {
            // Text renders binary timestamptz in UTC; other session zones print other text.
            if special == SpecialValues::Text && case.session_tz {
                continue;
            }
            for views in [true, false] {
                n += check_case(&case, special, views);
            }
        }
    }
    assert!(n > 1500, "only {n} values checked");
}

#[test]
fn text_policy_types_are_utf8_from_the_start() {
    for (oid, typmod) in [(1082, -1), (1083, -1), (1114, -1), (1184, -1), (1186, -1), (1700, (10 << 16 | 2) + 4)] {
        let ty = PgColumnType { oid, typmod, type_name: None };
        let opts = TypeOptions { special_values: SpecialValues::Text, views: false, ..Default::default() };
        assert_eq!(ColumnBuilder::new(&ty, &opts).data_type(), &DataType::Utf8, "{oid}");
        let opts = TypeOptions { time: pgoutput_arrow::TimeType::Time64, ..Default::default() };
        assert_ne!(ColumnBuilder::new(&ty, &opts).data_type(), &DataType::Utf8, "{oid}");
    }
}

#[test]
fn field_metadata() {
    let ty = PgColumnType { oid: 2950, typmod: -1, type_name: None };
    // The default is uuid_out's text, without an extension type.
    let f = ColumnBuilder::new(&ty, &TypeOptions::default()).field("id");
    assert_eq!(f.data_type(), &DataType::Utf8);
    assert!(!f.metadata().contains_key("ARROW:extension:name"));
    let opts = TypeOptions { uuid: pgoutput_arrow::UuidType::FixedSizeBinary, ..Default::default() };
    let f = ColumnBuilder::new(&ty, &opts).field("id");
    assert_eq!(f.name(), "id");
    assert!(f.is_nullable());
    assert_eq!(f.data_type(), &DataType::FixedSizeBinary(16));
    let md = f.metadata();
    assert_eq!(md["pg.type_oid"], "2950");
    assert_eq!(md["pg.type_name"], "uuid");
    assert_eq!(md["pg.typmod"], "-1");
    assert_eq!(md["ARROW:extension:name"], "arrow.uuid");
    let ty = PgColumnType { oid: 3802, typmod: -1, type_name: None };
    let f = ColumnBuilder::new(&ty, &TypeOptions::default()).field("doc");
    assert_eq!(f.data_type(), &DataType::Utf8);
    assert!(!f.metadata().contains_key("ARROW:extension:name"));
    assert_eq!(f.metadata()["pg.type_name"], "jsonb");
    let ty = PgColumnType { oid: 16_385, typmod: -1, type_name: Some("public.mood".into()) };
    let b = ColumnBuilder::new(&ty, &TypeOptions { binary: true, ..Default::default() });
    assert_eq!(b.data_type(), &DataType::Binary);
    assert_eq!(b.field("m").metadata()["pg.type_name"], "public.mood");
    let ty = PgColumnType { oid: 1700, typmod: (12 << 16 | 4) + 4, type_name: None };
    let f = ColumnBuilder::new(&ty, &TypeOptions::default()).field("amount");
    assert_eq!(f.data_type(), &DataType::Decimal128(12, 4));
    assert_eq!(f.metadata()["pg.typmod"], ((12 << 16 | 4) + 4).to_string());
    assert_eq!(pgoutput_arrow::types::builtin_type_name(23), Some("int4"));
    assert_eq!(pgoutput_arrow::types::builtin_type_name(1007), Some("_int4"));
    assert_eq!(pgoutput_arrow::types::builtin_type_name(16_385), None);
}

/// One input buffer holding several values, as a pgoutput message would.
fn buffer_with(values: &[&[u8]]) -> (Buffer, Vec<(usize, usize)>) {
    let mut bytes = b"header".to_vec();
    let mut spans = Vec::new();
    for v in values {
        spans.push((bytes.len(), v.len()));
        bytes.extend_from_slice(v);
        bytes.push(b'|');
    }
    (Buffer::from_vec(bytes), spans)
}

fn assert_points_into(a: &ArrayRef, buf: &Buffer) {
    let data = a.to_data();
    let blocks = &data.buffers()[1..];
    assert_eq!(blocks.len(), 1, "one data block: the input buffer");
    assert_eq!(blocks[0].as_ptr(), buf.as_ptr(), "the block is the input buffer itself");
}

#[test]
fn zero_copy_views_point_into_the_input() {
    let long = "a text value longer than twelve bytes".as_bytes();
    let cases: [(u32, bool, &[u8], usize); 5] = [
        (25, false, long, 0),                   // text, text mode
        (1043, true, long, 0),                  // varchar, binary mode
        (3802, true, b"\x01{\"k\": \"a longer json value\"}", 1), // jsonb binary: after the version byte
        (17, true, b"\x00\x01binary bytes longer than 12", 0),    // bytea binary
        (114, false, b"{\"json\": \"text longer than 12\"}", 0), // json text mode
    ];
    for (oid, binary, value, skip) in cases {
        let short: &[u8] = if skip == 1 { b"\x01short" } else { b"short" };
        let (buf, spans) = buffer_with(&[value, short, value]);
        let ty = PgColumnType { oid, typmod: -1, type_name: None };
        let mut b = ColumnBuilder::new(&ty, &TypeOptions { views: true, ..TypeOptions::default() });
        for &(off, len) in &spans {
            let bytes = &buf.as_slice()[off..off + len];
            let src = Source { buffer: &buf, buffer_id: 7, offset: off };
            if binary {
                b.append_binary(bytes, Some(src)).unwrap();
            } else {
                b.append_text(bytes, Some(src)).unwrap();
            }
        }
        let a = b.finish();
        assert_points_into(&a, &buf);
        let got: Vec<Vec<u8>> = match a.data_type() {
            DataType::Utf8View => a.as_string_view().iter().map(|s| s.unwrap().as_bytes().to_vec()).collect(),
            _ => a.as_binary_view().iter().map(|s| s.unwrap().to_vec()).collect(),
        };
        assert_eq!(got, vec![value[skip..].to_vec(), b"short".to_vec(), value[skip..].to_vec()]);
    }
    // Short values only: no block at all (they are inlined in the views).
    let (buf, spans) = buffer_with(&[b"tiny", b"small"]);
    let views = TypeOptions { views: true, ..TypeOptions::default() };
    let mut b = ColumnBuilder::new(&PgColumnType { oid: 25, typmod: -1, type_name: None }, &views);
    for &(off, len) in &spans {
        b.append_text(&buf.as_slice()[off..off + len], Some(Source { buffer: &buf, buffer_id: 1, offset: off }))
            .unwrap();
    }
    assert_eq!(b.finish().to_data().buffers().len(), 1);
}

#[test]
fn zero_copy_array_elements() {
    // text[] in binary mode: each element is a slice of the input.
    let long = b"an element longer than twelve bytes";
    let mut v = Vec::new();
    for x in [1i32, 0, 25, 2, 1] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    for _ in 0..2 {
        v.extend_from_slice(&(long.len() as i32).to_be_bytes());
        v.extend_from_slice(long);
    }
    let buf = Buffer::from_vec(v);
    let views = TypeOptions { views: true, ..TypeOptions::default() };
    let mut b = ColumnBuilder::new(&PgColumnType { oid: 1009, typmod: -1, type_name: None }, &views);
    b.append_binary(buf.as_slice(), Some(Source { buffer: &buf, buffer_id: 3, offset: 0 })).unwrap();
    let a = b.finish();
    let list = a.as_list::<i32>();
    assert_points_into(list.values(), &buf);
}

#[test]
fn invalid_utf8_is_an_error() {
    for views in [true, false] {
        let ty = PgColumnType { oid: 25, typmod: -1, type_name: None };
        let mut b = ColumnBuilder::new(&ty, &TypeOptions { views, ..Default::default() });
        let bad = b"valid start then \xff\xfe invalid bytes";
        let buf = Buffer::from_vec(bad.to_vec());
        let e = b.append_text(bad, Some(Source { buffer: &buf, buffer_id: 1, offset: 0 })).unwrap_err();
        assert!(e.message.contains("UTF-8"), "{e}");
        assert!(b.append_binary(b"\xc3", None).is_err());
        assert_eq!(b.len(), 0);
    }
}

#[test]
fn views_off_gives_plain_arrays() {
    let opts = TypeOptions { views: false, ..Default::default() };
    let b = ColumnBuilder::new(&PgColumnType { oid: 25, typmod: -1, type_name: None }, &opts);
    assert_eq!(b.data_type(), &DataType::Utf8);
    let b = ColumnBuilder::new(&PgColumnType { oid: 17, typmod: -1, type_name: None }, &opts);
    assert_eq!(b.data_type(), &DataType::Binary);
}

#[test]
fn domains_over_builtin_types_decode_as_the_base_type() {
    // PostgreSQL's Type message names a domain's base type: "int4" with an empty namespace.
    for name in ["int4", "pg_catalog.int4"] {
        let ty = PgColumnType { oid: 16_385, typmod: -1, type_name: Some(name.into()) };
        let mut b = ColumnBuilder::new(&ty, &TypeOptions::default());
        assert_eq!(b.data_type(), &DataType::Int32);
        b.append_binary(&42i32.to_be_bytes(), None).unwrap();
        b.append_text(b"43", None).unwrap();
        let f = b.field("p");
        assert_eq!(f.metadata()["pg.type_oid"], "16385");
        assert_eq!(f.metadata()["pg.type_name"], name);
        let a = b.finish();
        assert_eq!(a.as_primitive::<Int32Type>().values(), &[42, 43]);
    }
    // Not a built-in name: raw.
    let ty = PgColumnType { oid: 16_388, typmod: -1, type_name: Some("public.mood".into()) };
    assert_eq!(ColumnBuilder::new(&ty, &TypeOptions::default()).data_type(), &DataType::Utf8);
}

/// A small deterministic generator (xorshift64*), so that failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, v: &[u8]) -> Vec<u8> {
    let mut v = v.to_vec();
    for _ in 0..1 + rng.below(3) {
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => v.truncate(rng.below(v.len() + 1)),
            3 => {
                let i = rng.below(v.len() + 1);
                let pick = b"{}\",\\:-. 0\xff";
                v.insert(i, pick[rng.below(pick.len())]);
            }
            4 if v.len() >= 4 => {
                // A length or count field gone wrong.
                let i = rng.below(v.len() - 3);
                v[i..i + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xf0u8.wrapping_add(rng.below(16) as u8)]);
            }
            _ => v.extend_from_slice(&v.clone()[..rng.below(v.len() + 1)]),
        }
    }
    v
}

#[test]
fn no_panic_on_any_input() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut tried = 0;
    let cases = cases("type_vectors.json");
    for case in &cases {
        for special in [SpecialValues::Error, SpecialValues::Null, SpecialValues::Text] {
            for ndims in [1, 2] {
                let opts = TypeOptions { special_values: special, views: rng.below(2) == 0, binary: true, array_ndims: ndims, learn_array_ndims: false, ..TypeOptions::default() };
                let mut b = ColumnBuilder::new(&case.ty, &opts);
                for v in &case.values {
                    for _ in 0..12 {
                        let (t, bin) = (mutate(&mut rng, v.text.as_bytes()), mutate(&mut rng, &v.binary));
                        let before = b.len();
                        let r = b.append_text(&t, None);
                        assert_eq!(b.len(), before + r.is_ok() as usize, "{}: {t:?}", case.label);
                        let before = b.len();
                        let r = b.append_binary(&bin, None);
                        assert_eq!(b.len(), before + r.is_ok() as usize, "{}: {bin:?}", case.label);
                        tried += 2;
                    }
                }
                let n = b.len();
                let a = b.finish();
                assert_eq!(a.len(), n);
                a.to_data().validate_full().unwrap();
            }
        }
    }
    // Arbitrary bytes into every built-in type.
    for oid in 0..10_000u32 {
        if pgoutput_arrow::types::builtin_type_name(oid).is_none() {
            continue;
        }
        let mut b = ColumnBuilder::new(&PgColumnType { oid, typmod: -1, type_name: None }, &TypeOptions::default());
        for _ in 0..40 {
            let len = rng.below(40);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let _ = b.append_binary(&bytes, None);
            let _ = b.append_text(&bytes, None);
            tried += 2;
        }
        b.finish().to_data().validate_full().unwrap();
    }
    assert!(tried > 50_000, "{tried}");
}

#[test]
fn interval_struct_holds_what_month_day_nano_cannot() {
    let ty = PgColumnType { oid: 1186, typmod: -1, type_name: None };
    let mut b = ColumnBuilder::new(&ty, &TypeOptions::default());
    for text in [&b"3000000:00:00"[..], b"-178000000 years", b"1 mon -2 days +00:00:00.000001"] {
        b.append_text(text, None).unwrap();
    }
    b.append_null();
    let a = b.finish();
    let s = a.as_struct();
    let fields: Vec<(i32, i32, i64)> = (0..3)
        .map(|i| {
            (
                s.column(0).as_primitive::<Int32Type>().value(i),
                s.column(1).as_primitive::<Int32Type>().value(i),
                s.column(2).as_primitive::<Int64Type>().value(i),
            )
        })
        .collect();
    assert_eq!(fields, [(0, 0, 3_000_000 * 3_600_000_000), (-178_000_000 * 12, 0, 0), (1, -2, 1)]);
    assert!(a.is_null(3) && !a.is_null(0));
    let mdn = TypeOptions { interval: pgoutput_arrow::IntervalType::MonthDayNano, ..TypeOptions::default() };
    assert!(ColumnBuilder::new(&ty, &mdn).append_text(b"3000000:00:00", None).is_err());
}
