//! Built-in type OIDs and what the catalog says about them.

use super::oid_table::BUILTIN_TYPES;

pub const BOOL: u32 = 16;
pub const BYTEA: u32 = 17;
pub const CHAR: u32 = 18;
pub const NAME: u32 = 19;
pub const INT8: u32 = 20;
pub const INT2: u32 = 21;
pub const INT2VECTOR: u32 = 22;
pub const INT4: u32 = 23;
pub const TEXT: u32 = 25;
pub const OID: u32 = 26;
pub const TID: u32 = 27;
pub const XID: u32 = 28;
pub const CID: u32 = 29;
pub const OIDVECTOR: u32 = 30;
pub const JSON: u32 = 114;
pub const XML: u32 = 142;
pub const POINT: u32 = 600;
pub const LSEG: u32 = 601;
pub const PATH: u32 = 602;
pub const BOX: u32 = 603;
pub const ACLITEM: u32 = 1033;
pub const POLYGON: u32 = 604;
pub const LINE: u32 = 628;
pub const CIDR: u32 = 650;
pub const FLOAT4: u32 = 700;
pub const FLOAT8: u32 = 701;
pub const CIRCLE: u32 = 718;
pub const MACADDR8: u32 = 774;
pub const MONEY: u32 = 790;
pub const MACADDR: u32 = 829;
pub const INET: u32 = 869;
pub const BPCHAR: u32 = 1042;
pub const VARCHAR: u32 = 1043;
pub const DATE: u32 = 1082;
pub const TIME: u32 = 1083;
pub const TIMESTAMP: u32 = 1114;
pub const TIMESTAMPTZ: u32 = 1184;
pub const INTERVAL: u32 = 1186;
pub const TIMETZ: u32 = 1266;
pub const BIT: u32 = 1560;
pub const VARBIT: u32 = 1562;
pub const NUMERIC: u32 = 1700;
pub const REFCURSOR: u32 = 1790;
pub const UUID: u32 = 2950;
pub const TXID_SNAPSHOT: u32 = 2970;
pub const PG_LSN: u32 = 3220;
pub const TSVECTOR: u32 = 3614;
pub const JSONB: u32 = 3802;
pub const JSONPATH: u32 = 4072;
pub const INT4RANGE: u32 = 3904;
pub const NUMRANGE: u32 = 3906;
pub const TSRANGE: u32 = 3908;
pub const TSTZRANGE: u32 = 3910;
pub const DATERANGE: u32 = 3912;
pub const INT8RANGE: u32 = 3926;
pub const INT4MULTIRANGE: u32 = 4451;
pub const NUMMULTIRANGE: u32 = 4532;
pub const TSMULTIRANGE: u32 = 4533;
pub const TSTZMULTIRANGE: u32 = 4534;
pub const DATEMULTIRANGE: u32 = 4535;
pub const INT8MULTIRANGE: u32 = 4536;
pub const PG_SNAPSHOT: u32 = 5038;
pub const XID8: u32 = 5069;

fn lookup(oid: u32) -> Option<&'static (u32, &'static str, u32)> {
    BUILTIN_TYPES.binary_search_by_key(&oid, |t| t.0).ok().map(|i| &BUILTIN_TYPES[i])
}

/// The PostgreSQL name of a built-in type OID (e.g. 23 -> "int4"), None if not built in.
pub fn builtin_type_name(oid: u32) -> Option<&'static str> {
    lookup(oid).map(|t| t.1)
}

/// The element type of a built-in array type. int2vector and oidvector are left out:
/// their text output is not an array literal ("1 2 3"), so they are rendered as text.
pub(crate) fn array_element(oid: u32) -> Option<u32> {
    match oid {
        INT2VECTOR | OIDVECTOR => None,
        _ => lookup(oid).map(|t| t.2).filter(|&e| e != 0),
    }
}

/// The array type whose elements are `elem`.
pub(crate) fn array_of(elem: u32) -> Option<u32> {
    BUILTIN_TYPES.iter().find(|t| t.2 == elem && t.0 != INT2VECTOR && t.0 != OIDVECTOR).map(|t| t.0)
}

/// The delimiter between array elements in text form (pg_type.typdelim): ';' for box only.
pub(crate) fn array_delimiter(elem: u32) -> u8 {
    if elem == BOX {
        b';'
    } else {
        b','
    }
}

/// The built-in type a Type message names, for a column whose own OID is not built in.
/// PostgreSQL's Type message carries the name of the *base* type of a domain, with an
/// empty namespace for pg_catalog (logicalrep_write_typ in proto.c): a domain over int4
/// arrives as "int4" (or "pg_catalog.int4"), and its values come in int4's formats.
pub(crate) fn builtin_by_name(name: &str) -> Option<u32> {
    let name = name.strip_prefix("pg_catalog.").unwrap_or(name);
    if name.contains('.') {
        return None;
    }
    BUILTIN_TYPES.iter().find(|t| t.1 == name).map(|t| t.0)
}
