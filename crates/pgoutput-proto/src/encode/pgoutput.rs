//! pgoutput messages written as PostgreSQL 18 sends them ("Logical Replication Message
//! Formats", section 54.9), for callers that must rebuild a stream: the canonical
//! rebuild of shuffled transactions (a Relation or Type message moved into another
//! transaction, a Stream Start … Stop around merged chunks) and a relation's schema
//! asked of the decoder before any data is seen.

use crate::types::{Relation, TypeInfo, Xid};

fn cstr(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

/// A Relation message ('R'). `relation.xid` is written when present (inside Stream
/// Start … Stop).
pub fn relation(relation: &Relation<'_>, buf: &mut Vec<u8>) {
    buf.push(b'R');
    if let Some(xid) = relation.xid {
        buf.extend_from_slice(&xid.to_be_bytes());
    }
    buf.extend_from_slice(&relation.id.to_be_bytes());
    cstr(buf, relation.namespace);
    cstr(buf, relation.name);
    buf.push(relation.replica_identity.as_char() as u8);
    // The parser refuses more than i16::MAX columns; PostgreSQL allows 1600.
    let count = i16::try_from(relation.columns.len()).unwrap_or(i16::MAX);
    buf.extend_from_slice(&count.to_be_bytes());
    for column in relation.columns.iter().take(count as usize) {
        buf.push(column.is_key as u8);
        cstr(buf, column.name);
        buf.extend_from_slice(&column.type_oid.to_be_bytes());
        buf.extend_from_slice(&column.type_modifier.to_be_bytes());
    }
}

/// A Type message ('Y'). `ty.xid` is written when present (inside Stream Start … Stop).
pub fn type_info(ty: &TypeInfo<'_>, buf: &mut Vec<u8>) {
    buf.push(b'Y');
    if let Some(xid) = ty.xid {
        buf.extend_from_slice(&xid.to_be_bytes());
    }
    buf.extend_from_slice(&ty.oid.to_be_bytes());
    cstr(buf, ty.namespace);
    cstr(buf, ty.name);
}

/// A Stream Start message ('S') of top-level transaction `xid`.
pub fn stream_start(xid: Xid, first_segment: bool, buf: &mut Vec<u8>) {
    buf.push(b'S');
    buf.extend_from_slice(&xid.to_be_bytes());
    buf.push(first_segment as u8);
}

/// A Stream Stop message ('E').
pub fn stream_stop(buf: &mut Vec<u8>) {
    buf.push(b'E');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Column, Message, ReplicaIdentity};
    use crate::parse_message;

    #[test]
    fn encoded_messages_parse_back() {
        let rel = Relation {
            xid: Some(7),
            id: 16384,
            namespace: "public",
            name: "t",
            replica_identity: ReplicaIdentity::Full,
            columns: vec![
                Column { is_key: true, name: "id", type_oid: 23, type_modifier: -1 },
                Column { is_key: false, name: "v", type_oid: 1043, type_modifier: 14 },
            ],
        };
        let mut buf = Vec::new();
        relation(&rel, &mut buf);
        assert_eq!(parse_message(&buf, true).unwrap(), Message::Relation(rel.clone()));
        buf.clear();
        relation(&Relation { xid: None, ..rel.clone() }, &mut buf);
        assert_eq!(parse_message(&buf, false).unwrap(), Message::Relation(Relation { xid: None, ..rel }));

        let ty = TypeInfo { xid: None, oid: 16390, namespace: "public", name: "mood" };
        buf.clear();
        type_info(&ty, &mut buf);
        assert_eq!(parse_message(&buf, false).unwrap(), Message::Type(ty));

        buf.clear();
        stream_start(9, true, &mut buf);
        assert!(matches!(parse_message(&buf, false).unwrap(), Message::StreamStart(s) if s.xid == 9 && s.first_segment));
        buf.clear();
        stream_stop(&mut buf);
        assert_eq!(parse_message(&buf, true).unwrap(), Message::StreamStop);
    }
}
