//! The changes of a group of batches, in commit order, as jsonl objects or pretty lines.

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;

use super::sources::{Meta, MessageSource, NamedColumn, StrList, TableSource, TruncateSource};
use super::text;
use super::value::{key, Column, Style};

/// The two text formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per change, JSON-safe values.
    Jsonl,
    /// `BEGIN xid`, one aligned line per change, `COMMIT lsn`: for a person.
    Pretty,
}

/// Writes groups of decoded batches as text, keeping what spans groups.
pub struct Renderer {
    format: Format,
    style: Style,
    /// Pretty: the transaction (xid, commit LSN) whose BEGIN was written and COMMIT not yet.
    open: Option<(Option<i64>, i64)>,
    /// Pretty: the width of the table names column so far (it only grows).
    width: usize,
    /// jsonl: the last commit time written, and its text.
    ts_text: (Option<i64>, Vec<u8>),
}

impl Renderer {
    /// `max_chars`: in the pretty format, text longer than this many characters is cut
    /// (and bytea longer than half as many bytes), saying how long it was.
    pub fn new(format: Format, max_chars: usize) -> Renderer {
        Renderer {
            format,
            style: Style { pretty: format == Format::Pretty, max_chars },
            open: None,
            width: 0,
            ts_text: (None, Vec::new()),
        }
    }

    /// Appends the changes of one group to `out`, in commit order: `tables` are
    /// (`schema.table`, batch of its changes), `truncates` and `messages` the decoder's
    /// batches of those. Returns the number of changes written.
    pub fn render(
        &mut self,
        tables: &[(&str, &RecordBatch)],
        truncates: &[&RecordBatch],
        messages: &[&RecordBatch],
        out: &mut Vec<u8>,
    ) -> Result<usize, ArrowError> {
        let mut group = self.group(tables, truncates, messages)?;
        self.write(&mut group, out, usize::MAX);
        Ok(group.events.len())
    }

    /// The changes of one group put in commit order, to be written by [`Renderer::write`]
    /// piece by piece.
    pub fn group(
        &mut self,
        tables: &[(&str, &RecordBatch)],
        truncates: &[&RecordBatch],
        messages: &[&RecordBatch],
    ) -> Result<Group, ArrowError> {
        let style = self.style;
        let tables: Vec<TableSource> =
            tables.iter().map(|(name, b)| TableSource::new(name, b, style)).collect::<Result<_, _>>()?;
        let truncates: Vec<TruncateSource> = truncates.iter().map(|b| TruncateSource::new(b)).collect::<Result<_, _>>()?;
        let messages: Vec<MessageSource> =
            messages.iter().map(|b| MessageSource::new(b, style)).collect::<Result<_, _>>()?;

        let mut events = Vec::new();
        for (s, t) in tables.iter().enumerate() {
            for row in 0..t.rows {
                events.push(Event { key: order_key(&t.meta, row, false), source: Source::Table(s as u32), row: row as u32, sub: 0 });
            }
        }
        for (s, t) in truncates.iter().enumerate() {
            for row in 0..t.rows {
                let key = order_key(&t.meta, row, false);
                for sub in t.relations.range(row) {
                    events.push(Event { key, source: Source::Truncate(s as u32), row: row as u32, sub: sub as u32 });
                }
            }
        }
        for (s, m) in messages.iter().enumerate() {
            for row in 0..m.rows {
                events.push(Event { key: order_key(&m.meta, row, true), source: Source::Message(s as u32), row: row as u32, sub: 0 });
            }
        }
        // Stable: changes with the same key keep the order above, as they came.
        events.sort_by_key(|e| e.key);

        if self.format == Format::Pretty {
            for e in &events {
                let len = match e.source {
                    Source::Table(s) => tables[s as usize].name_chars,
                    Source::Truncate(s) => truncates[s as usize].relations.get(e.sub as usize).chars().count(),
                    Source::Message(_) => 0,
                };
                self.width = self.width.max(len);
            }
        }
        Ok(Group { tables, truncates, messages, events, next: 0, specials: Vec::new() })
    }

    /// Writes the group's next changes to `out` until it holds `limit` bytes or more;
    /// returns whether every change of the group is written.
    pub fn write(&mut self, group: &mut Group, out: &mut Vec<u8>, limit: usize) -> bool {
        while group.next < group.events.len() {
            if out.len() >= limit {
                return false;
            }
            let e = &group.events[group.next];
            let (row, sub) = (e.row as usize, e.sub as usize);
            match e.source {
                Source::Table(s) => self.table_change(&mut group.tables[s as usize], row, &mut group.specials, out),
                Source::Truncate(s) => self.truncate(&group.truncates[s as usize], row, sub, out),
                Source::Message(s) => self.message(&mut group.messages[s as usize], row, out),
            }
            group.next += 1;
        }
        true
    }

    /// Pretty: the COMMIT line of the transaction still open (a live group ends with whole
    /// transactions, so it is shown without waiting for the next one).
    pub fn end_transaction(&mut self, out: &mut Vec<u8>) {
        if let Some((xid, commit)) = self.open.take() {
            out.extend_from_slice(b"COMMIT ");
            opt_int(out, xid, b"None");
            out.extend_from_slice(b"  lsn ");
            lsn(out, commit);
            out.push(b'\n');
        }
    }

    /// Pretty: BEGIN and COMMIT lines around the changes of each transaction.
    fn enter(&mut self, meta: &Meta, row: usize, out: &mut Vec<u8>) {
        let txn = meta.commit.get(row).map(|c| (meta.xid.get(row), c));
        if txn == self.open {
            return;
        }
        self.end_transaction(out);
        if let Some((xid, commit)) = txn {
            out.extend_from_slice(b"BEGIN ");
            opt_int(out, xid, b"None");
            out.extend_from_slice(b"  commit lsn ");
            lsn(out, commit);
            if let Some(ts) = meta.ts.get(row) {
                out.extend_from_slice(b"  ");
                text::iso_timestamp(out, ts as i128, true, b' ');
            }
            out.push(b'\n');
            self.open = txn;
        }
    }

    /// Pretty: `  0/16B3748  insert   public.t` (indented inside a transaction).
    fn head(&mut self, meta: &Meta, row: usize, op: &str, name: &str, out: &mut Vec<u8>) {
        self.enter(meta, row, out);
        if self.open.is_some() {
            out.extend_from_slice(b"  ");
        }
        let mut at = Vec::with_capacity(20);
        let lsn_text = match meta.lsn.get(row) {
            Some(l) => {
                lsn(&mut at, l);
                std::str::from_utf8(&at).unwrap_or("-")
            }
            None => "-",
        };
        pad_left(out, lsn_text, 12);
        out.extend_from_slice(b"  ");
        pad_right(out, op, 8);
        out.push(b' ');
        pad_right(out, name, self.width);
    }

    /// jsonl: the keys every change has, up to `xid`, after `{`.
    fn json_head(&mut self, meta: &Meta, row: usize, op: Option<&str>, name: &str, out: &mut Vec<u8>) {
        let (schema, table) = split_name(name);
        out.extend_from_slice(b"{\"op\": ");
        opt_str(out, op);
        out.extend_from_slice(b", \"schema\": ");
        opt_str(out, schema);
        out.extend_from_slice(b", \"table\": ");
        opt_str(out, table);
        out.extend_from_slice(b", \"lsn\": ");
        opt_lsn(out, meta.lsn.get(row));
        out.extend_from_slice(b", \"commit_lsn\": ");
        opt_lsn(out, meta.commit.get(row));
        out.extend_from_slice(b", \"commit_ts\": ");
        match meta.ts.get(row) {
            Some(ts) => {
                // Every change of a transaction has its commit time: formatted once.
                let cache = &mut self.ts_text;
                if cache.0 != Some(ts) {
                    cache.1.clear();
                    cache.1.push(b'"');
                    text::iso_timestamp(&mut cache.1, ts as i128, true, b'T');
                    cache.1.push(b'"');
                    cache.0 = Some(ts);
                }
                out.extend_from_slice(&cache.1);
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b", \"xid\": ");
        opt_int(out, meta.xid.get(row), b"null");
    }

    fn table_change(&mut self, t: &mut TableSource, row: usize, specials: &mut Vec<(String, String)>, out: &mut Vec<u8>) {
        let op = t.op.get(row);
        let is_delete = op == Some("delete");
        specials.clear();
        if let Some(special) = &t.special {
            for j in special.offsets[row] as usize..special.offsets[row + 1] as usize {
                if let (Some(k), Some(v)) = (special.keys.get(j), special.values.get(j)) {
                    specials.push((k.to_string(), v.to_string()));
                }
            }
        }
        let has_old = t.before.as_ref().is_some_and(|b| !b.is_null(row));
        match self.format {
            Format::Jsonl => {
                self.json_head(&t.meta, row, op, &t.name, out);
                out.extend_from_slice(b", \"new\": ");
                if is_delete {
                    out.extend_from_slice(b"null");
                } else {
                    write_values(&mut t.columns, row, specials, "", None, self.style, out);
                }
                out.extend_from_slice(b", \"old\": ");
                match &mut t.before {
                    Some(b) if has_old => write_values(&mut b.fields, row, specials, "_before.", None, self.style, out),
                    _ => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b", \"unchanged\": [");
                if let Some(u) = &t.unchanged {
                    for (n, j) in u.range(row).enumerate() {
                        if n > 0 {
                            out.extend_from_slice(b", ");
                        }
                        opt_str(out, u.values.get(j));
                    }
                }
                out.extend_from_slice(b"]}\n");
            }
            Format::Pretty => {
                let start = out.len();
                self.head(&t.meta, row, op.unwrap_or("None"), &t.name, out);
                out.extend_from_slice(b"  ");
                let unchanged = t.unchanged.as_ref().map(|u| (u, u.range(row)));
                if !is_delete {
                    write_values(&mut t.columns, row, specials, "", unchanged, self.style, out);
                }
                if let Some(b) = t.before.as_mut().filter(|_| has_old) {
                    if !is_delete {
                        out.extend_from_slice(b"  old: ");
                    }
                    write_values(&mut b.fields, row, specials, "_before.", None, self.style, out);
                }
                trim_end(out, start);
                out.push(b'\n');
            }
        }
    }

    fn truncate(&mut self, t: &TruncateSource, row: usize, sub: usize, out: &mut Vec<u8>) {
        let relation = t.relations.get(sub);
        let (cascade, restart) = (t.cascade.get(row), t.restart_identity.get(row));
        match self.format {
            Format::Jsonl => {
                self.json_head(&t.meta, row, Some("truncate"), relation, out);
                out.extend_from_slice(b", \"new\": null, \"old\": null, \"unchanged\": [], \"cascade\": ");
                opt_bool(out, cascade);
                out.extend_from_slice(b", \"restart_identity\": ");
                opt_bool(out, restart);
                out.extend_from_slice(b"}\n");
            }
            Format::Pretty => {
                self.head(&t.meta, row, "truncate", relation, out);
                let flags: Vec<&str> = [("cascade", cascade), ("restart identity", restart)]
                    .iter()
                    .filter(|(_, on)| *on == Some(true))
                    .map(|(f, _)| *f)
                    .collect();
                if !flags.is_empty() {
                    out.extend_from_slice(b"  (");
                    out.extend_from_slice(flags.join(", ").as_bytes());
                    out.push(b')');
                }
                out.push(b'\n');
            }
        }
    }

    fn message(&mut self, m: &mut MessageSource, row: usize, out: &mut Vec<u8>) {
        let prefix = m.prefix.get(row);
        match self.format {
            Format::Jsonl => {
                self.json_head(&m.meta, row, Some("message"), "", out);
                out.extend_from_slice(b", \"new\": null, \"old\": null, \"unchanged\": [], \"prefix\": ");
                opt_str(out, prefix);
                out.extend_from_slice(b", \"content\": ");
                m.content.write(row, out);
                out.extend_from_slice(b", \"transactional\": ");
                opt_bool(out, m.transactional.get(row));
                out.extend_from_slice(b"}\n");
            }
            Format::Pretty => {
                self.head(&m.meta, row, "message", "", out);
                out.extend_from_slice(b"  prefix=");
                text::pretty_str(out, prefix.unwrap_or(""), self.style.max_chars);
                out.extend_from_slice(b" content=");
                // The content as text when it is UTF-8, else as \x hex.
                match m.content_bytes(row).map(std::str::from_utf8) {
                    Some(Ok(s)) => text::pretty_str(out, s, self.style.max_chars),
                    _ => m.content.write(row, out),
                }
                if m.transactional.get(row) == Some(false) {
                    out.extend_from_slice(b"  (non-transactional)");
                }
                out.push(b'\n');
            }
        }
    }
}

/// Every row of `batch` as a JSON object of all its columns (same value rules as jsonl),
/// one per line.
pub fn rows_json(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    let style = Style { pretty: false, max_chars: usize::MAX };
    let schema = batch.schema();
    let mut columns: Vec<(Vec<u8>, Column)> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| Ok((key(f.name(), style), Column::new(c, Some(f), style)?)))
        .collect::<Result<_, ArrowError>>()?;
    for row in 0..batch.num_rows() {
        out.push(b'{');
        for (n, (k, c)) in columns.iter_mut().enumerate() {
            if n > 0 {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(k);
            c.write(row, out);
        }
        out.extend_from_slice(b"}\n");
    }
    Ok(())
}

/// The changes of one group in commit order, and how far they are written.
pub struct Group {
    tables: Vec<TableSource>,
    truncates: Vec<TruncateSource>,
    messages: Vec<MessageSource>,
    events: Vec<Event>,
    next: usize,
    /// Scratch: the special values of the row being written.
    specials: Vec<(String, String)>,
}

impl Group {
    /// The number of changes in the group.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

#[derive(Clone, Copy)]
enum Source {
    Table(u32),
    Truncate(u32),
    Message(u32),
}

/// Where a change goes among a group's: (LSN, which kind of LSN, `_seq`). A transaction's
/// changes go at its commit LSN. A non-transactional message goes at its own LSN, the end of
/// its record: that is where the next record starts, so at a commit's LSN the message was
/// decoded before that commit, and it goes first (a streamed transaction's changes came
/// earlier in the stream, with smaller `_seq`). Then the stream's order.
type Key = (i64, u8, i64);
const OUTSIDE_TRANSACTIONS: u8 = 0;
const IN_TRANSACTION: u8 = 1;

/// The [`Key`] of a row; `messages`: the batch is of logical decoding messages.
fn order_key(meta: &Meta, row: usize, messages: bool) -> Key {
    let seq = meta.seq.get(row).unwrap_or(0);
    match (meta.commit.get(row), meta.lsn.get(row)) {
        (None, Some(own)) if messages => (own, OUTSIDE_TRANSACTIONS, seq),
        (commit, _) => (commit.unwrap_or(0), IN_TRANSACTION, seq),
    }
}

/// Which rows of a group's batches are among its first `n` changes in the order the
/// [`Renderer`] writes them (a truncate counts once for each table it names, and is kept
/// or cut whole). `None` when the group has no more than `n` changes; the number of its
/// changes either way.
#[allow(clippy::type_complexity)]
pub fn first_changes(
    tables: &[&RecordBatch],
    truncates: &[&RecordBatch],
    messages: &[&RecordBatch],
    n: usize,
) -> Result<(usize, Option<[Vec<Vec<bool>>; 3]>), ArrowError> {
    let keys_of = |batches: &[&RecordBatch], messages: bool| -> Result<Vec<Vec<Key>>, ArrowError> {
        batches
            .iter()
            .map(|b| {
                let meta = Meta::new(b)?;
                Ok((0..b.num_rows()).map(|row| order_key(&meta, row, messages)).collect())
            })
            .collect()
    };
    let (table_keys, truncate_keys, message_keys) =
        (keys_of(tables, false)?, keys_of(truncates, false)?, keys_of(messages, true)?);
    let mut all: Vec<Key> = table_keys.iter().chain(&message_keys).flatten().copied().collect();
    for (b, keys) in truncates.iter().zip(&truncate_keys) {
        let relations = StrList::new(b.column_by_name("relations"))?;
        for (row, key) in keys.iter().enumerate() {
            all.extend(relations.range(row).map(|_| *key));
        }
    }
    if all.len() <= n {
        return Ok((all.len(), None));
    }
    let cut = match n {
        0 => None,
        _ => Some(*all.select_nth_unstable(n - 1).1),
    };
    let kept = |keys: Vec<Vec<Key>>| -> Vec<Vec<bool>> {
        keys.into_iter().map(|k| k.into_iter().map(|k| cut.is_some_and(|c| k <= c)).collect()).collect()
    };
    Ok((all.len(), Some([kept(table_keys), kept(truncate_keys), kept(message_keys)])))
}

struct Event {
    key: Key,
    source: Source,
    row: u32,
    /// A truncate's relation (each is a change of its own).
    sub: u32,
}

/// The object (JSON) or `name=value` list (pretty) of a row's columns: a column with a
/// special value (`specials`, keys with `prefix`) shows PostgreSQL's text in its place;
/// special values of columns not among them follow at the end. Pretty: `unchanged`
/// columns show as `<unchanged>`.
fn write_values(
    columns: &mut [NamedColumn],
    row: usize,
    specials: &[(String, String)],
    prefix: &str,
    unchanged: Option<(&StrList, std::ops::Range<usize>)>,
    style: Style,
    out: &mut Vec<u8>,
) {
    let (open, sep, close): (&[u8], &[u8], &[u8]) = if style.pretty { (b"", b" ", b"") } else { (b"{", b", ", b"}") };
    let special_of = |name: &str| {
        specials.iter().find(|(k, _)| k.strip_prefix(prefix).is_some_and(|rest| rest == name)).map(|(_, v)| v.as_str())
    };
    let is_unchanged = |name: &str| unchanged.as_ref().is_some_and(|(u, r)| r.clone().any(|j| u.values.get(j) == Some(name)));
    out.extend_from_slice(open);
    let mut n = 0;
    for (name, k, column) in columns.iter_mut() {
        if n > 0 {
            out.extend_from_slice(sep);
        }
        n += 1;
        out.extend_from_slice(k);
        if style.pretty && unchanged.is_some() && is_unchanged(name) {
            out.extend_from_slice(b"<unchanged>");
        } else if let Some(text) = (!specials.is_empty()).then(|| special_of(name)).flatten() {
            style.text(out, text);
        } else {
            column.write(row, out);
        }
    }
    for (k, v) in specials {
        let Some(name) = k.strip_prefix(prefix) else { continue };
        if (prefix.is_empty() && name.starts_with("_before.")) || columns.iter().any(|(c, _, _)| c == name) {
            continue;
        }
        if n > 0 {
            out.extend_from_slice(sep);
        }
        n += 1;
        out.extend_from_slice(&key(name, style));
        if style.pretty && is_unchanged(name) {
            out.extend_from_slice(b"<unchanged>");
        } else {
            style.text(out, v);
        }
    }
    out.extend_from_slice(close);
}


/// `schema.table` → (schema, table); a name without a dot (or with nothing after it) has
/// no schema. Empty parts are null.
fn split_name(name: &str) -> (Option<&str>, Option<&str>) {
    let (schema, table) = match name.split_once('.') {
        Some((s, t)) if !t.is_empty() => (s, t),
        Some((s, _)) => ("", s),
        None => ("", name),
    };
    ((!schema.is_empty()).then_some(schema), (!table.is_empty()).then_some(table))
}

fn opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => text::json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_int(out: &mut Vec<u8>, v: Option<i64>, null: &[u8]) {
    match v {
        Some(v) => text::int(out, v),
        None => out.extend_from_slice(null),
    }
}

fn opt_bool(out: &mut Vec<u8>, v: Option<bool>) {
    out.extend_from_slice(match v {
        Some(true) => b"true",
        Some(false) => b"false",
        None => b"null",
    });
}

/// `X/Y` as PostgreSQL writes an LSN (pgoutput_proto's `Lsn` display), without going
/// through `fmt` on the hot path.
fn lsn(out: &mut Vec<u8>, v: i64) {
    let v = v as u64;
    hex_digits(out, v >> 32);
    out.push(b'/');
    hex_digits(out, v & 0xFFFF_FFFF);
}

/// Uppercase hex without leading zeros.
fn hex_digits(out: &mut Vec<u8>, v: u64) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    let mut n = v;
    loop {
        i -= 1;
        buf[i] = HEX[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

fn opt_lsn(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(v) => {
            out.push(b'"');
            lsn(out, v);
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// `s` right-aligned in `width` characters.
fn pad_left(out: &mut Vec<u8>, s: &str, width: usize) {
    for _ in s.chars().count()..width {
        out.push(b' ');
    }
    out.extend_from_slice(s.as_bytes());
}

/// `s` left-aligned in `width` characters.
fn pad_right(out: &mut Vec<u8>, s: &str, width: usize) {
    out.extend_from_slice(s.as_bytes());
    for _ in s.chars().count()..width {
        out.push(b' ');
    }
}

/// Drops the whitespace that ends `out[start..]`, as Python's `str.rstrip()` does.
fn trim_end(out: &mut Vec<u8>, start: usize) {
    loop {
        let tail = &out[start..];
        // The last character begins at the last byte that is not a UTF-8 continuation byte.
        let Some(begin) = tail.iter().rposition(|&b| b & 0xC0 != 0x80) else { return };
        let Some(c) = std::str::from_utf8(&tail[begin..]).ok().and_then(|s| s.chars().next()) else { return };
        // Python's whitespace: Unicode White_Space and the separators U+001C..U+001F.
        if c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c) {
            out.truncate(start + begin);
        } else {
            return;
        }
    }
}
