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
