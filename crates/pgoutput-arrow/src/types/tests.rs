//! Unit tests of the column builders; the text/binary agreement with a real server is in
//! tests/types.rs.

use super::*;
use arrow_array::cast::AsArray;
use arrow_array::Array;

fn col(oid: u32, typmod: i32) -> ColumnBuilder {
    ColumnBuilder::new(&PgColumnType { oid, typmod, type_name: None }, &TypeOptions::default())
}

#[test]
fn int4_text_and_binary() {
    let mut b = col(23, -1);
    b.append_text(b"-42", None).unwrap();
    b.append_binary(&7i32.to_be_bytes(), None).unwrap();
    b.append_null();
    assert!(b.append_text(b"x", None).is_err());
    assert_eq!(b.len(), 3);
    let a = b.finish();
    let a = a.as_primitive::<arrow_array::types::Int32Type>();
    assert_eq!(a.value(0), -42);
    assert_eq!(a.value(1), 7);
    assert!(a.is_null(2));
}

/// `int4[]` (oid 1007) columns take the depth of their first non-empty array.
#[test]
fn list_depth_from_first_non_empty_array() {
    let mut b = col(1007, -1);
    b.append_null();
    b.append_text(b"{}", None).unwrap();
    assert_eq!(b.list_depth(), Some((1, true)));
    b.append_text(b"{{1,2},{3,NULL}}", None).unwrap();
    assert_eq!(b.list_depth(), Some((2, false)));
    assert!(b.take_retyped());
    let err = b.append_text(b"{5}", None).unwrap_err();
    assert!(err.message.contains("1-dimensional array in a column decoded as 2-dimensional"), "{}", err.message);
    assert_eq!(b.len(), 3);
    let a = b.finish();
    assert_eq!(a.data_type(), b.data_type());
    let outer = a.as_list::<i32>();
    assert!(outer.is_null(0));
    assert_eq!(outer.value_length(1), 0);
    let rows = outer.value(2);
    let inner = rows.as_list::<i32>();
    assert_eq!(inner.len(), 2);
    let last = inner.value(1);
    let last = last.as_primitive::<arrow_array::types::Int32Type>();
    assert_eq!((last.value(0), last.is_null(1)), (3, true));
}

/// Once a batch with rows came out, or with learning off, the depth stays.
#[test]
fn list_depth_fixed_after_a_batch_or_when_not_learning() {
    let mut b = col(1007, -1);
    b.append_null();
    b.finish();
    assert!(b.append_text(b"{{1}}", None).is_err());
    let opts = TypeOptions { learn_array_ndims: false, ..TypeOptions::default() };
    let mut b = ColumnBuilder::new(&PgColumnType { oid: 1007, typmod: -1, type_name: None }, &opts);
    assert!(b.append_text(b"{{1}}", None).is_err());
    // Depth 0 (text) never changes.
    let opts = TypeOptions { array_ndims: 0, ..TypeOptions::default() };
    let mut b = ColumnBuilder::new(&PgColumnType { oid: 1007, typmod: -1, type_name: None }, &opts);
    b.append_text(b"{{1}}", None).unwrap();
    assert_eq!(b.data_type(), &DataType::Utf8);
}

#[test]
fn parse_i64_agrees_with_str_parse() {
    let mut cases: Vec<String> = ["", "-", "+", "0", "-0", "+7", "007", "12a", " 1", "1 ", "--1", "99999999999999999"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for v in [i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1, 999_999_999_999_999_999, -999_999_999_999_999_999] {
        cases.push(v.to_string());
    }
    // 18, 19 and 20 digits around the limits, and past them.
    cases.extend(["100000000000000000", "9999999999999999999", "9223372036854775808", "-9223372036854775809"].map(String::from));
    cases.extend(["18446744073709551616", "-18446744073709551616", "99999999999999999999"].map(String::from));
    // Pseudo-random digit strings of 1 to 20 digits, a sign or none, now and then a byte
    // that is not a digit: both sides of the 18 digits parsed without overflow checks.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 1 + (x % 20) as usize;
        let mut c: String = ["", "-", "+"][(x >> 8) as usize % 3].to_string();
        let mut y = x;
        for i in 0..len {
            y = y.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let digit = (y >> 33) % 10;
            c.push(if i > 0 && (y >> 40).is_multiple_of(97) { '/' } else { char::from(b'0' + digit as u8) });
        }
        cases.push(c);
    }
    for c in &cases {
        assert_eq!(num::parse_i64(c.as_bytes()), c.parse::<i64>().ok(), "{c:?}");
    }
}

/// `DatetimeRange::Pandas`: dates within 0001-01-01..9999-12-31 and timestamps within
/// 1677-09-22..2262-04-10 stay typed, in text and binary; the others (±infinity, BC, past
/// 9999) are special values, whose text a `Keep` caller stores in `_special`.
#[test]
fn pandas_datetime_range() {
    let opts = TypeOptions { datetime_range: DatetimeRange::Pandas, ..TypeOptions::default() };
    let ty = |oid| PgColumnType { oid, typmod: -1, type_name: None };
    let mut date = ColumnBuilder::new(&ty(oid::DATE), &opts);
    for ok in ["0001-01-01", "9999-12-31", "2024-02-29"] {
        date.append_text(ok.as_bytes(), None).unwrap();
    }
    // 0001-01-01 and 9999-12-31 in the send format: days since 2000-01-01.
    date.append_binary(&(-730_119i32).to_be_bytes(), None).unwrap();
    date.append_binary(&2_921_939i32.to_be_bytes(), None).unwrap();
    for special in ["infinity", "-infinity", "0001-12-31 BC", "10000-01-01"] {
        let err = date.append_text(special.as_bytes(), None).unwrap_err();
        assert!(err.special && err.message.contains("pandas"), "{special}: {}", err.message);
    }
    for special in [i32::MAX, i32::MIN, -730_120, 2_921_940] {
        assert!(date.append_binary(&special.to_be_bytes(), None).unwrap_err().special, "{special}");
    }
    let a = date.finish();
    let a = a.as_primitive::<arrow_array::types::Date32Type>();
    assert_eq!(a.values().to_vec(), vec![-719_162, 2_932_896, 19_782, -719_162, 2_932_896]);

    let mut ts = ColumnBuilder::new(&ty(oid::TIMESTAMPTZ), &opts);
    ts.append_text(b"1677-09-22 00:00:00+00", None).unwrap();
    ts.append_text(b"2262-04-10 23:59:59.999999+00", None).unwrap();
    for special in ["1677-09-21 23:59:59.999999+00", "2262-04-11 00:00:00+00", "infinity", "-infinity",
                    "0044-03-15 12:00:00+00 BC", "9999-12-31 00:00:00+00"] {
        assert!(ts.append_text(special.as_bytes(), None).unwrap_err().special, "{special}");
    }
    assert!(ts.append_binary(&i64::MAX.to_be_bytes(), None).unwrap_err().special);
    let a = ts.finish();
    let a = a.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    assert_eq!(a.values().to_vec(), vec![-9_223_286_400_000_000, 9_223_286_399_999_999]);

    // The default keeps every value of the Arrow type.
    let mut date = col(oid::DATE, -1);
    date.append_text(b"0001-12-31 BC", None).unwrap();
    date.append_text(b"infinity", None).unwrap();
    let a = date.finish();
    assert_eq!(a.as_primitive::<arrow_array::types::Date32Type>().value(1), i32::MAX);
}
