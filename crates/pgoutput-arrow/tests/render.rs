//! The text formats on the golden captures of real PostgreSQL 15 and 18 streams: every
//! change is one jsonl line of valid JSON with the documented keys in order, in commit
//! order, and the pretty format frames each transaction with BEGIN and COMMIT. (The exact
//! bytes of both formats on these captures are checked by tests/test_render.py.)

mod common;

use arrow_array::cast::AsArray;
use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use pgoutput_arrow::render::{first_changes, Format, Renderer};
use pgoutput_arrow::{Decoder, DecoderOptions, Output};
use common::Messages;
use serde_json::Value;

fn captures() -> Vec<(String, Messages)> {
    common::golden_captures().into_iter().map(|(name, _, messages)| (name, messages)).collect()
}

/// The decoder's groups: what `take_ready` hands out after every 11 messages.
fn groups(messages: &[(u64, Vec<u8>)]) -> Vec<Vec<Output>> {
    let mut d = Decoder::new(DecoderOptions::default());
    let mut out = Vec::new();
    for (i, (lsn, m)) in messages.iter().enumerate() {
        d.push(*lsn, &Buffer::from(m.clone())).unwrap();
        if i % 11 == 10 || i + 1 == messages.len() {
            d.flush().unwrap();
            out.push(d.take_ready());
        }
    }
    out
}

/// (text, changes) of the groups in `format`.
fn render(groups: &[Vec<Output>], format: Format) -> (String, usize) {
    let mut r = Renderer::new(format, 64);
    let mut out = Vec::new();
    let mut changes = 0;
    for g in groups {
        let mut tables: Vec<(&str, &RecordBatch)> = Vec::new();
        let (mut truncates, mut messages) = (Vec::new(), Vec::new());
        for o in g {
            match o {
                Output::Table { name, batch, .. } => tables.push((name.as_str(), batch)),
                Output::Truncates(b) => truncates.push(b),
                Output::Messages(b) => messages.push(b),
                _ => {}
            }
            if let Output::Truncates(b) = o {
                changes += b.column_by_name("relations").unwrap().as_list::<i32>().values().len();
            } else if let Output::Table { batch, .. } | Output::Messages(batch) = o {
                changes += batch.num_rows();
            }
        }
        // Written in small pieces, as the Python binding does.
        let mut group = r.group(&tables, &truncates, &messages).unwrap();
        loop {
            let limit = out.len() + 100;
            if r.write(&mut group, &mut out, limit) {
                break;
            }
        }
    }
    r.end_transaction(&mut out);
    (String::from_utf8(out).expect("UTF-8 output"), changes)
}

const KEYS: [&str; 10] = ["op", "schema", "table", "lsn", "commit_lsn", "commit_ts", "xid", "new", "old", "unchanged"];

#[test]
fn jsonl_of_every_golden_capture() {
    let mut total = 0;
    for (name, messages) in captures() {
        let (text, changes) = render(&groups(&messages), Format::Jsonl);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), changes, "{name}: one line per change");
        let mut last_commit = 0u64;
        for line in lines {
            let v: serde_json::Map<String, Value> =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {line}"));
            let extra = match v["op"].as_str().unwrap() {
                "truncate" => vec!["cascade", "restart_identity"],
                "message" => vec!["prefix", "content", "transactional"],
                _ => vec![],
            };
            let want: Vec<&str> = KEYS.iter().copied().chain(extra).collect();
            let mut keys: Vec<&str> = v.keys().map(String::as_str).collect();
            keys.sort_by_key(|k| want.iter().position(|w| w == k));
            assert_eq!(keys, want, "{name}: {line}");
            // In that order: each key's first appearance in the line comes after the previous.
            let at: Vec<usize> = want.iter().map(|k| line.find(&format!("\"{k}\": ")).unwrap()).collect();
            assert!(at.windows(2).all(|w| w[0] < w[1]), "{name}: key order: {line}");
            if let Some(c) = v["commit_lsn"].as_str() {
                let c = pgoutput_arrow::Lsn::from_ascii(c.as_bytes()).unwrap().0;
                assert!(c >= last_commit, "{name}: commit order: {line}");
                last_commit = c;
            }
        }
        total += changes;
    }
    assert!(total > 1000, "{total} changes");
}

#[test]
fn pretty_frames_each_transaction() {
    for (name, messages) in captures() {
        let (text, changes) = render(&groups(&messages), Format::Pretty);
        let begins = text.lines().filter(|l| l.starts_with("BEGIN ")).count();
        let commits = text.lines().filter(|l| l.starts_with("COMMIT ")).count();
        assert_eq!(begins, commits, "{name}");
        let lines = text.lines().count() - begins - commits;
        assert_eq!(lines, changes, "{name}: one line per change");
    }
}

/// A non-transactional message written just before a streamed transaction's commit: its
/// LSN (the end of its record) is the commit's LSN, and the transaction's changes came
/// earlier in the stream. It was decoded first, so it is written first, as test_decoding
/// prints it; a message just after the commit record ends is written after the changes.
#[test]
fn a_message_at_a_streamed_commits_lsn_goes_before_that_transaction() {
    use common::{t, Stream, INT4};
    let mut s = Stream::new();
    s.relation(1, "public", "a", b'd', &[("id", INT4, -1, true)]);
    s.stream_start(100, true);
    s.insert(1, &[t("1")]);
    s.message(true, 0x8000, "inside", b"x");
    s.stream_stop();
    s.message(false, 0x9000, "before", b"x");
    s.stream_commit(100, 0x9000, 0x9010, 0);
    s.message(false, 0x9018, "after", b"x");
    for format in [Format::Jsonl, Format::Pretty] {
        let (text, changes) = render(&groups(&s.messages), format);
        assert_eq!(changes, 4);
        let order: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("BEGIN") && !l.starts_with("COMMIT"))
            .map(|l| {
                let l = l.to_lowercase();
                ["before", "inside", "after", "insert"].into_iter().find(|w| l.contains(w)).unwrap_or("?")
            })
            .collect();
        assert_eq!(order, ["before", "insert", "inside", "after"], "{format:?}:\n{text}");
    }
    // --limit's cut: the same order.
    let outputs: Vec<Output> = groups(&s.messages).concat();
    let tables: Vec<&RecordBatch> =
        outputs.iter().filter_map(|o| if let Output::Table { batch, .. } = o { Some(batch) } else { None }).collect();
    let messages: Vec<&RecordBatch> =
        outputs.iter().filter_map(|o| if let Output::Messages(b) = o { Some(b) } else { None }).collect();
    assert_eq!((tables.len(), messages.len()), (1, 1));
    let prefixes = messages[0].column_by_name("prefix").unwrap().as_string::<i32>();
    let kept_prefixes = |kept: &[bool]| -> Vec<&str> {
        kept.iter().zip(prefixes.iter()).filter(|(k, _)| **k).map(|(_, p)| p.unwrap()).collect()
    };
    for (n, rows, kept) in [(1, false, vec!["before"]), (2, true, vec!["before"]), (3, true, vec!["before", "inside"])] {
        let (count, cut) = first_changes(&tables, &[], &messages, n).unwrap();
        let [t, _, m] = cut.unwrap();
        assert_eq!((count, t[0][0], kept_prefixes(&m[0])), (4, rows, kept), "first {n}");
    }
    assert_eq!(first_changes(&tables, &[], &messages, 4).unwrap(), (4, None));
}
