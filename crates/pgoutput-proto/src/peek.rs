//! What a message is, read from its first bytes without parsing it whole: the kind's
//! name, and the relation a row change belongs to. For callers that sort or route
//! messages (the canonical rebuild of shuffled transactions, SQL helpers) and must not
//! pay for a full parse of every change.

use crate::types::RelationId;

/// The snake_case name of a message kind byte (`b'I'` → `"insert"`, `b'S'` →
/// `"stream_start"`), None for a byte no protocol version uses.
pub fn kind_name(kind: u8) -> Option<&'static str> {
    Some(match kind {
        b'B' => "begin",
        b'C' => "commit",
        b'O' => "origin",
        b'R' => "relation",
        b'Y' => "type",
        b'I' => "insert",
        b'U' => "update",
        b'D' => "delete",
        b'T' => "truncate",
        b'M' => "message",
        b'S' => "stream_start",
        b'E' => "stream_stop",
        b'c' => "stream_commit",
        b'A' => "stream_abort",
        b'b' => "begin_prepare",
        b'P' => "prepare",
        b'K' => "commit_prepared",
        b'r' => "rollback_prepared",
        b'p' => "stream_prepare",
        _ => return None,
    })
}

/// The relation id of an Insert, Update or Delete (`in_stream`: sent inside Stream
/// Start … Stop, where the xid comes first). None for other kinds and for a message too
/// short to hold one; the rest of the message is not checked.
#[inline]
pub fn change_relation_id(data: &[u8], in_stream: bool) -> Option<RelationId> {
    if !matches!(data.first()?, b'I' | b'U' | b'D') {
        return None;
    }
    let at = if in_stream { 5 } else { 1 };
    let bytes = data.get(at..at + 4)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Whether an Insert sent outside a stream block carries its values in binary ('b') or
/// text ('t') format, from its first value cell; None when every cell is null or
/// unchanged, or for another message.
pub fn insert_is_binary(data: &[u8]) -> Option<bool> {
    // 'I', relation id, 'N', number of columns, then the cells.
    if data.first()? != &b'I' || data.get(5)? != &b'N' {
        return None;
    }
    let mut at = 8;
    while let Some(&kind) = data.get(at) {
        match kind {
            b'b' => return Some(true),
            b't' => return Some(false),
            b'n' | b'u' => at += 1,
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_relation_ids() {
        assert_eq!(kind_name(b'p'), Some("stream_prepare"));
        assert_eq!(kind_name(b'z'), None);
        let insert = [b'I', 0, 0, 0x40, 0, b'N', 0, 0];
        assert_eq!(change_relation_id(&insert, false), Some(16384));
        assert_eq!(change_relation_id(&[b'I', 0, 0], false), None);
        assert_eq!(change_relation_id(&[b'B', 0, 0, 0, 1], false), None);
        assert_eq!(insert_is_binary(&[b'I', 0, 0, 0x40, 0, b'N', 0, 2, b'n', b'b', 0, 0, 0, 0]), Some(true));
        assert_eq!(insert_is_binary(&[b'I', 0, 0, 0x40, 0, b'N', 0, 1, b't', 0, 0, 0, 0]), Some(false));
        assert_eq!(insert_is_binary(&[b'I', 0, 0, 0x40, 0, b'N', 0, 1, b'n']), None);
    }
}
