//! Dates, timestamps, timestamptz and intervals (and arrays of them) printed by PostgreSQL 18
//! under every DateStyle, field order, IntervalStyle and several TimeZones: each text, read
//! with its group's `date_order` and `timezone`, gives the same Arrow value as the binary
//! send format of the same value (which no setting changes).
//!
//! The vectors are in tests/data/style_vectors.json, written by gen_style_vectors.py.

use arrow_array::ArrayRef;
use pgoutput_arrow::types::{ColumnBuilder, DateOrder, PgColumnType, TypeOptions};
use serde_json::Value;

fn groups() -> Vec<Value> {
    let path = format!("{}/tests/data/style_vectors.json", env!("CARGO_MANIFEST_DIR"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("style_vectors.json")).unwrap();
    v["groups"].as_array().unwrap().clone()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

fn oids(ty: &str) -> (u32, u32) {
    match ty {
        "date" => (1082, 1182),
        "timestamp" => (1114, 1115),
        "timestamptz" => (1184, 1185),
        "interval" => (1186, 1187),
        _ => panic!("{ty}"),
    }
}

fn options(group: &Value, with_zone: bool) -> TypeOptions {
    let mut opts = TypeOptions { views: false, learn_array_ndims: false, ..TypeOptions::default() };
    if let Some(order) = group.get("date_order").and_then(Value::as_str) {
        opts.date_order = order.parse().unwrap();
    }
    if with_zone {
        opts.timezone = group.get("TimeZone").and_then(Value::as_str).map(|z| z.parse().unwrap());
    }
    opts
}

/// One value decoded alone: Ok(array of one), or the error (special or malformed).
fn decode(oid: u32, opts: &TypeOptions, bytes: &[u8], binary: bool) -> Result<ArrayRef, pgoutput_arrow::ValueError> {
    let mut b = ColumnBuilder::new(&PgColumnType { oid, typmod: -1, type_name: None }, opts);
    if binary {
        b.append_binary(bytes, None)?;
    } else {
        b.append_text(bytes, None)?;
    }
    Ok(b.finish())
}

fn label(group: &Value) -> String {
    ["type", "DateStyle", "TimeZone", "IntervalStyle"]
        .iter()
        .filter_map(|k| group.get(*k).and_then(Value::as_str).map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_style_gives_the_binary_value() {
    let mut checked = 0;
    for group in groups() {
        let (scalar, array) = oids(group["type"].as_str().unwrap());
        let opts = options(&group, true);
        for v in group["values"].as_array().unwrap() {
            let oid = if v.get("array").is_some() { array } else { scalar };
            let text = v["text"].as_str().unwrap();
            let from_binary = decode(oid, &opts, &hex(v["binary"].as_str().unwrap()), true);
            let from_text = decode(oid, &opts, text.as_bytes(), false);
            match (&from_text, &from_binary) {
                (Ok(t), Ok(b)) => assert_eq!(t, b, "{}: text {text:?}", label(&group)),
                // A value no Arrow value holds (date 5874897-12-31) is special both ways.
                (Err(t), Err(b)) => assert!(t.special && b.special, "{}: {text:?}: {t} / {b}", label(&group)),
                _ => panic!("{}: text {text:?} gave {from_text:?}, binary gave {from_binary:?}", label(&group)),
            }
            checked += 1;
        }
    }
    assert!(checked > 1500, "only {checked} values");
}

/// A zone abbreviation says no offset: without `timezone` it is an error naming it (never a
/// guessed instant), except UTC, GMT and numeric abbreviations, which are their offsets.
#[test]
fn an_abbreviation_without_timezone_is_an_error() {
    let (mut refused, mut read) = (0, 0);
    for group in groups().into_iter().filter(|g| g["type"] == "timestamptz") {
        let opts = options(&group, false);
        for v in group["values"].as_array().unwrap().iter().filter(|v| v.get("array").is_none()) {
            let text = v["text"].as_str().unwrap();
            let zone = text.trim_end_matches(" BC").rsplit(' ').next().unwrap();
            let lettered = !group["DateStyle"].as_str().unwrap().starts_with("ISO")
                && zone.chars().all(|c| c.is_ascii_alphabetic())
                && !["UTC", "GMT", "infinity"].contains(&zone);
            let result = decode(1184, &opts, text.as_bytes(), false);
            if lettered {
                let e = result.expect_err(text);
                assert!(e.message.contains(zone) && e.message.contains("timezone="), "{e}");
                refused += 1;
            } else {
                let expect = decode(1184, &opts, &hex(v["binary"].as_str().unwrap()), true);
                assert_eq!(result.ok(), expect.ok(), "{}: {text:?}", label(&group));
                read += 1;
            }
        }
    }
    assert!(refused > 100 && read > 100, "refused {refused}, read {read}");
}

/// A day above 12 in the month's place says the order was the other one: an error that says
/// so, not a date.
#[test]
fn the_wrong_date_order_is_caught_where_the_text_shows_it() {
    let mut caught = 0;
    for group in groups().into_iter().filter(|g| g["type"] == "date") {
        let style = group["DateStyle"].as_str().unwrap();
        if style.starts_with("ISO") || style.starts_with("German") {
            continue;
        }
        let printed = group["date_order"].as_str().unwrap().parse::<DateOrder>().unwrap();
        let wrong = if printed == DateOrder::Dmy { DateOrder::Mdy } else { DateOrder::Dmy };
        let opts = TypeOptions { date_order: wrong, ..TypeOptions::default() };
        let v = &group["values"][0]; // 2026-11-25: day 25
        let e = decode(1082, &opts, v["text"].as_str().unwrap().as_bytes(), false).expect_err(style);
        assert!(e.message.contains("date_order"), "{e}");
        caught += 1;
    }
    assert_eq!(caught, 6);
}

#[test]
fn timezone_and_order_names() {
    assert_eq!("dmy".parse::<DateOrder>(), Ok(DateOrder::Dmy));
    assert!("DYM".parse::<DateOrder>().unwrap_err().contains("MDY, DMY or YMD"));
    let tz: pgoutput_arrow::TimeZoneName = "america/new_york".parse().unwrap();
    assert_eq!(tz.name(), "America/New_York");
    assert!("Mars/Olympus".parse::<pgoutput_arrow::TimeZoneName>().unwrap_err().contains("Mars/Olympus"));
}

/// Text that is of no style is refused with a message naming the styles.
#[test]
fn malformed_text_is_refused() {
    let opts = TypeOptions::default();
    for (oid, text) in [
        (1082, "2026/11/25"),
        (1082, "13/25/2026"),
        (1082, "31.02.2026"),
        (1114, "Thu Nov 25 10:00:00 2026"), // 2026-11-25 is a Wednesday
        (1114, "11/25/2026 10:00:00 EST"),  // timestamp has no zone
        (1184, "11/25/2026 10:00:00"),      // timestamptz has one
        (1186, "@ 1 fortnight"),
        (1186, "+1-2 3 +4:05:06"),
        (1186, "P1H"),
        (1186, "1-12"),
    ] {
        let e = decode(oid, &opts, text.as_bytes(), false).expect_err(text);
        assert!(!e.special && e.message.contains(text), "{text}: {e}");
    }
}
