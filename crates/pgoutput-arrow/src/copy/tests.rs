use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::Array;
use pgoutput_proto::{Column, ReplicaIdentity};

use super::*;
use crate::canonical::relation_schema;

const INT4: u32 = 23;
const TEXT: u32 = 25;
const INT8: u32 = 20;
const INT4_ARRAY: u32 = 1007;
const TSTZ: u32 = 1184;

fn relation(columns: &[(&'static str, u32)]) -> Relation<'static> {
    Relation {
        xid: None,
        id: 16400,
        namespace: "public",
        name: "t",
        replica_identity: ReplicaIdentity::Default,
        columns: columns
            .iter()
            .enumerate()
            .map(|(i, (name, oid))| Column { is_key: i == 0, name, type_oid: *oid, type_modifier: -1 })
            .collect(),
    }
}

fn header() -> Vec<u8> {
    let mut out = COPY_SIGNATURE.to_vec();
    out.extend_from_slice(&0i32.to_be_bytes());
    // A header extension of 3 bytes, which readers skip.
    out.extend_from_slice(&3i32.to_be_bytes());
    out.extend_from_slice(b"xyz");
    out
}

fn tuple(out: &mut Vec<u8>, fields: &[Option<Vec<u8>>]) {
    out.extend_from_slice(&(fields.len() as i16).to_be_bytes());
    for f in fields {
        match f {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }
}

fn int4_array(values: &[i32]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&1i32.to_be_bytes());
    v.extend_from_slice(&0i32.to_be_bytes());
    v.extend_from_slice(&(INT4 as i32).to_be_bytes());
    v.extend_from_slice(&(values.len() as i32).to_be_bytes());
    v.extend_from_slice(&1i32.to_be_bytes());
    for x in values {
        v.extend_from_slice(&4i32.to_be_bytes());
        v.extend_from_slice(&x.to_be_bytes());
    }
    v
}

const COLUMNS: &[(&str, u32)] = &[("id", INT4), ("name", TEXT), ("big", INT8), ("tags", INT4_ARRAY), ("at", TSTZ)];

/// Three rows of `COLUMNS`, with the trailer.
fn sample() -> Vec<u8> {
    let mut data = header();
    for i in 1..=3i32 {
        tuple(
            &mut data,
            &[
                Some(i.to_be_bytes().to_vec()),
                Some(format!("row {i} with a name longer than twelve bytes").into_bytes()),
                (i != 2).then(|| (i64::from(i) << 40).to_be_bytes().to_vec()),
                Some(int4_array(&[i, i * 10])),
                Some((i64::from(i) * 1_000_000).to_be_bytes().to_vec()),
            ],
        );
    }
    data.extend_from_slice(&(-1i16).to_be_bytes());
    data
}

fn position() -> SnapshotPosition {
    SnapshotPosition { lsn: 0x16_B374_D848, commit_ts: 0, first_seq: -100 }
}

fn decoder(options: &DecoderOptions) -> CopyDecoder {
    CopyDecoder::new(&relation(COLUMNS), &[], options, position()).unwrap()
}

fn decode_in_pieces(data: &[u8], cuts: &[usize]) -> Result<Vec<RecordBatch>, DecodeError> {
    let mut d = decoder(&DecoderOptions::default());
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&data.len())) {
        d.push(&data[start..cut])?;
        start = cut;
    }
    d.finish()
}

#[test]
fn rows_come_out_typed_as_the_stream_types_them() {
    let batches = decode_in_pieces(&sample(), &[]).unwrap();
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert_eq!(b.num_rows(), 3);
    let ids = b.column_by_name("id").unwrap().as_primitive::<Int32Type>();
    assert_eq!(ids.values(), &[1, 2, 3]);
    let names = arrow_cast::cast(b.column_by_name("name").unwrap(), &arrow_schema::DataType::Utf8).unwrap();
    assert_eq!(names.as_string::<i32>().value(1), "row 2 with a name longer than twelve bytes");
    let big = b.column_by_name("big").unwrap().as_primitive::<Int64Type>();
    assert!(big.is_null(1));
    assert_eq!(big.value(2), 3 << 40);
    let tags = b.column_by_name("tags").unwrap().as_list::<i32>();
    assert_eq!(tags.value(2).as_primitive::<Int32Type>().values(), &[3, 30]);
    let ops = b.column_by_name("_op").unwrap().as_string::<i32>();
    assert!(ops.iter().all(|o| o == Some("snapshot")));
    for col in ["_lsn", "_commit_lsn"] {
        let v = b.column_by_name(col).unwrap().as_primitive::<Int64Type>();
        assert!(v.iter().all(|l| l == Some(0x16_B374_D848)), "{col}");
    }
    let seq = b.column_by_name("_seq").unwrap().as_primitive::<Int64Type>();
    assert_eq!(seq.values(), &[-100, -99, -98]);
    assert_eq!(b.column_by_name("_before").unwrap().null_count(), 3);
    // The schema is the stream decoder's for a relation of this definition.
    let stream = relation_schema(&relation(COLUMNS), &[], DecoderOptions::default()).unwrap();
    let fields = |s: &arrow_schema::Schema| {
        s.fields().iter().map(|f| (f.name().clone(), f.data_type().clone())).collect::<Vec<_>>()
    };
    assert_eq!(fields(&b.schema()), fields(&stream));
}

#[test]
fn pieces_cut_anywhere_give_the_same_rows() {
    let data = sample();
    let whole = decode_in_pieces(&data, &[]).unwrap();
    for cut in 0..=data.len() {
        let split = decode_in_pieces(&data, &[cut]).unwrap();
        assert_eq!(split, whole, "cut at {cut}");
    }
    let bytes: Vec<usize> = (1..data.len()).collect();
    assert_eq!(decode_in_pieces(&data, &bytes).unwrap(), whole, "byte by byte");
}

#[test]
fn every_truncation_is_an_error_naming_where() {
    let data = sample();
    for end in 0..data.len() {
        let err = decode_in_pieces(&data[..end], &[]).unwrap_err().to_string();
        assert!(err.contains("truncated") && err.contains("COPY data of public.t"), "at {end}: {err}");
    }
}

#[test]
fn corrupt_data_is_an_error_never_a_panic() {
    let data = sample();
    // Every byte replaced by a few values: an error or rows, never a panic.
    for at in 0..data.len() {
        for v in [0u8, 0x7f, 0x80, 0xff] {
            let mut bad = data.clone();
            bad[at] = v;
            let _ = decode_in_pieces(&bad, &[at / 2]);
        }
    }
}

#[test]
fn malformed_parts_are_named() {
    let mut bad_sig = sample();
    bad_sig[0] = b'X';
    assert!(decode_in_pieces(&bad_sig, &[]).unwrap_err().to_string().contains("not binary COPY data"));

    let mut oids = sample();
    oids[12] = 1; // flags bit 16
    assert!(decode_in_pieces(&oids, &[]).unwrap_err().to_string().contains("OIDs"));

    let mut count = header();
    tuple(&mut count, &[Some(vec![0, 0, 0, 1])]);
    let err = decode_in_pieces(&count, &[]).unwrap_err().to_string();
    assert!(err.contains("row 1") && err.contains("a tuple of 1 fields"), "{err}");

    let mut length = header();
    length.extend_from_slice(&5i16.to_be_bytes());
    length.extend_from_slice(&(-7i32).to_be_bytes());
    let err = decode_in_pieces(&length, &[]).unwrap_err().to_string();
    assert!(err.contains("column \"id\"") && err.contains("field length of -7") && err.contains("byte offset 24"), "{err}");

    let mut width = header();
    tuple(&mut width, &[Some(vec![1, 2]), None, None, None, None]);
    width.extend_from_slice(&(-1i16).to_be_bytes());
    let err = decode_in_pieces(&width, &[]).unwrap_err().to_string();
    assert!(err.contains("column \"id\""), "{err}");

    let mut trailing = sample();
    trailing.push(0);
    assert!(decode_in_pieces(&trailing, &[]).unwrap_err().to_string().contains("after the trailer"));
}

#[test]
fn batches_are_cut_at_batch_size_and_an_error_stops_the_decoder() {
    let options = DecoderOptions { batch_size: 2, ..DecoderOptions::default() };
    let mut d = decoder(&options);
    d.push(&sample()).unwrap();
    assert_eq!(d.take_ready().iter().map(|b| b.num_rows()).collect::<Vec<_>>(), vec![2]);
    assert_eq!(d.finish().unwrap().iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    assert_eq!(d.rows(), 3);

    let mut d = decoder(&options);
    assert!(d.push(b"garbage!!!!!!!!!!!!!!!").is_err());
    assert!(matches!(d.push(&sample()), Err(DecodeError::Stopped(_))));
}

#[test]
fn text_mode_columns_of_unrendered_types_are_read_as_text() {
    // A type this crate does not decode (an enum, oid 70000): in a text-mode stream its
    // column holds PostgreSQL's text output, so COPY must select it as text.
    let rel = relation(&[("id", INT4), ("mood", 70000)]);
    let types = [TypeInfo { xid: None, oid: 70000, namespace: "public", name: "mood" }];
    let d = CopyDecoder::new(&rel, &types, &DecoderOptions::default(), position()).unwrap();
    assert_eq!(d.text_columns(), &[false, true]);
    let mut data = header();
    tuple(&mut data, &[Some(7i32.to_be_bytes().to_vec()), Some(b"happy".to_vec())]);
    data.extend_from_slice(&(-1i16).to_be_bytes());
    let mut d = d;
    d.push(&data).unwrap();
    let b = d.finish().unwrap().remove(0);
    let mood = arrow_cast::cast(b.column_by_name("mood").unwrap(), &arrow_schema::DataType::Utf8).unwrap();
    assert_eq!(mood.as_string::<i32>().value(0), "happy");
    // A binary-mode stream keeps such values as their send bytes: no text needed.
    let binary = DecoderOptions { types: crate::TypeOptions { binary: true, ..Default::default() }, ..Default::default() };
    let d = CopyDecoder::new(&rel, &types, &binary, position()).unwrap();
    assert_eq!(d.text_columns(), &[false, false]);
}
