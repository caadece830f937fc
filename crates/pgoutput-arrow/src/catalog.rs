//! The relation catalog: what each relation id means at each point of the stream.
//!
//! A Relation message takes effect from where it arrives. Inside a streamed
//! transaction it is that transaction's own (pgoutput tracks the schema it sent per
//! streamed transaction, and a subscriber applies it when it replays the stream at
//! commit): it goes to an overlay that becomes the global definition at Stream
//! Commit / Stream Prepare and disappears at Stream Abort. Identical definitions
//! share one version, so the schema that pgoutput re-sends at each session or
//! streamed transaction does not split a table into batches of one version each.

use std::collections::HashMap;
use std::sync::Arc;

use pgoutput_proto::{Oid, Relation, RelationId, ReplicaIdentity, Xid};

use crate::idmap::IdMap;
use crate::types::PgColumnType;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelColumn {
    pub name: String,
    pub ty: PgColumnType,
    pub is_key: bool,
    /// Which column of the table this is, across its versions (see [`column_ids`]): a
    /// renamed column keeps its id. Not part of the definition's identity.
    pub id: u32,
    /// The column's attnum when the reader told it (see [`Catalog::column_attnums`]).
    pub attnum: Option<i16>,
}

impl RelColumn {
    fn same(&self, other: &RelColumn) -> bool {
        let attnums_agree = match (self.attnum, other.attnum) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        self.name == other.name && self.ty == other.ty && self.is_key == other.is_key && attnums_agree
    }
}

/// One definition of a relation: an immutable schema version.
#[derive(Debug)]
pub(crate) struct RelVersion {
    pub relation_id: RelationId,
    /// "schema.table"; an empty namespace is pg_catalog.
    pub table: Arc<str>,
    /// Index of `table` among the table names seen.
    pub table_index: u32,
    /// 1, 2, ... per table name, in order of first appearance.
    pub version: u32,
    pub replica_identity: ReplicaIdentity,
    pub columns: Vec<RelColumn>,
}

impl RelVersion {
    fn same_definition(&self, relation_id: RelationId, table: &str, ri: ReplicaIdentity, columns: &[RelColumn]) -> bool {
        self.relation_id == relation_id
            && &*self.table == table
            && self.replica_identity == ri
            && self.columns.len() == columns.len()
            && self.columns.iter().zip(columns).all(|(a, b)| a.same(b))
    }
}

#[derive(Default)]
pub(crate) struct Catalog {
    versions: Vec<Arc<RelVersion>>,
    /// When each version last became the global definition of its relation (0: never).
    activated: Vec<u64>,
    activations: u64,
    global: IdMap<RelationId, u32>,
    /// Definitions sent inside streamed transactions, by top-level xid.
    overlays: IdMap<Xid, IdMap<RelationId, u32>>,
    /// Per table name: its index and the schema ids of its versions, oldest first.
    tables: HashMap<Arc<str>, (u32, Vec<u32>)>,
    /// Per table name: the next column id (see [`column_ids`]).
    next_column_id: HashMap<Arc<str>, u32>,
    table_names: Vec<Arc<str>>,
    /// Names of non-built-in types from Type messages.
    type_names: IdMap<Oid, String>,
    /// Per relation: each column name's attnum, as the reader learnt from pg_attribute.
    attnums: IdMap<RelationId, HashMap<String, i16>>,
}

/// "schema.table" as PostgreSQL names it; the Relation message leaves pg_catalog empty.
pub(crate) fn qualified_name(namespace: &str, name: &str) -> String {
    let namespace = if namespace.is_empty() { "pg_catalog" } else { namespace };
    format!("{namespace}.{name}")
}

/// Gives each column of a new definition the id of the same column in the previous
/// definition of the relation, or a new id from `next` (returned, advanced).
///
/// A Relation message names columns but carries no attnum, so which new column is which
/// old one is inferred from PostgreSQL's own rules: columns keep their relative order and
/// ADD COLUMN appends. So the new definition is a prefix of kept columns, paired in order
/// with a subsequence of the old ones (the others were dropped), followed by added columns.
/// Among the pairings that obey this, the one needing the fewest DDL statements wins:
/// a kept column costs one for a new name (RENAME) and one for a new type (ALTER TYPE),
/// a dropped or added column one each; on a tie, fewer kept columns (a drop plus an add
/// rather than a rename that also retypes).
/// What this cannot tell: a column dropped and another of the same type and name added at
/// the end between two Relation messages reads as the same column, and one of the same
/// type and another name as a rename.
pub(crate) fn column_ids(previous: &[RelColumn], columns: &mut [RelColumn], mut next: u32) -> u32 {
    let known = |cols: &[RelColumn]| cols.iter().all(|c| c.attnum.is_some());
    let matched = if !previous.is_empty() && known(previous) && known(columns) {
        // The catalog said which column each one is: no inference.
        columns.iter().map(|c| previous.iter().position(|p| p.attnum == c.attnum)).collect()
    } else {
        align(previous, columns)
    };
    for (c, m) in columns.iter_mut().zip(&matched) {
        c.id = match m {
            Some(i) => previous[*i].id,
            None => {
                next += 1;
                next - 1
            }
        };
    }
    next
}

/// For each new column, the old column it continues (see [`column_ids`]).
fn align(previous: &[RelColumn], columns: &[RelColumn]) -> Vec<Option<usize>> {
    let key = |c: &RelColumn| (c.name.to_string(), u64::from(c.ty.oid));
    let (previous, columns): (Vec<_>, Vec<_>) = (previous.iter().map(key).collect(), columns.iter().map(key).collect());
    align_columns(&previous, &columns)
}

/// For each column of a table's new definition (name, type: any key equal for equal
/// types), the column of its previous definition it continues, by [`column_ids`]'s rule
/// (relative order kept, ADD COLUMN appends, the fewest DDL statements): the same rule
/// for a sink that compares a table it keeps with a definition the stream sends after a
/// restart, when the decoder saw no earlier one.
pub fn align_columns<T: PartialEq>(previous: &[(String, T)], columns: &[(String, T)]) -> Vec<Option<usize>> {
    // Costs are (DDL statements, kept columns), compared in that order.
    type Cost = (u32, u32);
    const NONE: Cost = (u32::MAX, u32::MAX);
    let (m, l) = (columns.len(), previous.len());
    let pair = |n: &(String, T), o: &(String, T)| -> Cost { (u32::from(n.0 != o.0) + u32::from(n.1 != o.1), 1) };
    let add = |a: Cost, b: Cost| -> Cost {
        if a == NONE || b == NONE {
            NONE
        } else {
            (a.0 + b.0, a.1 + b.1)
        }
    };
    // best[i][j]: the cheapest pairing of new[..i] (all kept) into old[..j], the old
    // columns not paired being dropped; paired[i][j]: whether it pairs new[i-1] with old[j-1].
    let mut best = vec![vec![NONE; l + 1]; m + 1];
    let mut paired = vec![vec![false; l + 1]; m + 1];
    for (j, cost) in best[0].iter_mut().enumerate() {
        *cost = (j as u32, 0);
    }
    for i in 1..=m {
        for j in i..=l {
            let drop = add(best[i][j - 1], (1, 0));
            let keep = add(best[i - 1][j - 1], pair(&columns[i - 1], &previous[j - 1]));
            if keep < drop {
                best[i][j] = keep;
                paired[i][j] = true;
            } else {
                best[i][j] = drop;
            }
        }
    }
    // How many new columns are kept: the rest were added.
    let kept = (0..=m.min(l))
        .min_by_key(|&k| add(best[k][l], ((m - k) as u32, 0)))
        .unwrap_or(0);
    let mut matched = vec![None; m];
    let (mut i, mut j) = (kept, l);
    while i > 0 {
        if paired[i][j] {
            matched[i - 1] = Some(j - 1);
            i -= 1;
        }
        j -= 1;
    }
    matched
}

impl Catalog {
    pub fn type_message(&mut self, oid: Oid, namespace: &str, name: &str) {
        // As format_type would show it from a default search_path, where pg_catalog comes
        // first: a public type named like a built-in one ("public.inet") stays qualified,
        // so that it is never taken for the built-in type.
        let public_visible = namespace == "public" && crate::types::builtin_by_name(name).is_none();
        let shown = if namespace.is_empty() || namespace == "pg_catalog" || public_visible {
            name.to_string()
        } else {
            format!("{namespace}.{name}")
        };
        self.type_names.insert(oid, shown);
    }

    /// Tells which attnum each column name of `relation_id` has (from `pg_attribute`, by a
    /// reader with a connection to the server): the Relation messages that follow are
    /// matched to the earlier definitions by attnum, so that a rename is never taken for a
    /// drop plus an add, nor the reverse. Names the catalog no longer has (renamed or
    /// dropped since) leave that definition to the positional rule of [`column_ids`].
    pub fn column_attnums(&mut self, relation_id: RelationId, columns: impl IntoIterator<Item = (String, i16)>) {
        self.attnums.insert(relation_id, columns.into_iter().collect());
    }

    /// Takes a Relation message into account; `scope` is the top-level xid of the
    /// streamed transaction it arrived in. Returns the schema id now in force.
    pub fn relation(&mut self, rel: &Relation<'_>, scope: Option<Xid>) -> u32 {
        let table = qualified_name(rel.namespace, rel.name);
        let attnums = self.attnums.get(&rel.id);
        let columns: Vec<RelColumn> = rel
            .columns
            .iter()
            .map(|c| RelColumn {
                name: c.name.to_string(),
                ty: PgColumnType {
                    oid: c.type_oid,
                    typmod: c.type_modifier,
                    type_name: self.type_names.get(&c.type_oid).cloned(),
                },
                is_key: c.is_key,
                id: 0,
                attnum: attnums.and_then(|a| a.get(c.name).copied()),
            })
            .collect();
        let same = |v: &RelVersion| v.same_definition(rel.id, &table, rel.replica_identity, &columns);
        // The definition in force in this scope, then any earlier identical one.
        let existing = self
            .lookup(rel.id, scope)
            .filter(|&id| same(&self.versions[id as usize]))
            .or_else(|| {
                let (_, ids) = self.tables.get(table.as_str())?;
                ids.iter().rev().copied().find(|&id| same(&self.versions[id as usize]))
            });
        let schema_id = match existing {
            Some(id) => id,
            None => {
                let mut columns = columns;
                // Which columns of the definition before this one these are.
                let previous = self.lookup(rel.id, scope).or_else(|| {
                    let (_, ids) = self.tables.get(table.as_str())?;
                    ids.last().copied()
                });
                let previous = previous.map(|id| self.versions[id as usize].columns.as_slice()).unwrap_or(&[]);
                // Fresh ids continue after the previous definition's too: a relation
                // renamed (ALTER TABLE ... RENAME / SET SCHEMA) brings its columns' ids to a
                // name that has counted none yet, and a column added there must not take
                // the id of one it already has.
                let next = self.next_column_id.get(table.as_str()).copied().unwrap_or(0);
                let next = next.max(previous.iter().map(|c| c.id + 1).max().unwrap_or(0));
                let next = column_ids(previous, &mut columns, next);
                let schema_id = self.versions.len() as u32;
                let table: Arc<str> = Arc::from(table);
                self.next_column_id.insert(table.clone(), next);
                let next_index = self.table_names.len() as u32;
                let entry = self.tables.entry(table.clone()).or_insert_with(|| (next_index, Vec::new()));
                if entry.0 == next_index {
                    self.table_names.push(table.clone());
                }
                entry.1.push(schema_id);
                let version = entry.1.len() as u32;
                let table_index = entry.0;
                self.versions.push(Arc::new(RelVersion {
                    relation_id: rel.id,
                    table,
                    table_index,
                    version,
                    replica_identity: rel.replica_identity,
                    columns,
                }));
                self.activated.push(0);
                schema_id
            }
        };
        match scope {
            Some(xid) => {
                self.overlays.entry(xid).or_default().insert(rel.id, schema_id);
            }
            None => self.activate(rel.id, schema_id),
        }
        schema_id
    }

    fn activate(&mut self, relation_id: RelationId, schema_id: u32) {
        self.global.insert(relation_id, schema_id);
        self.activations += 1;
        self.activated[schema_id as usize] = self.activations;
    }

    /// The schema id of a relation as a change in `scope` sees it.
    pub fn lookup(&self, relation_id: RelationId, scope: Option<Xid>) -> Option<u32> {
        if let Some(xid) = scope.filter(|_| !self.overlays.is_empty()) {
            if let Some(id) = self.overlays.get(&xid).and_then(|o| o.get(&relation_id)) {
                return Some(*id);
            }
        }
        self.global.get(&relation_id).copied()
    }

    /// Counts the changes of the global definitions: a schema id found by `lookup` outside
    /// a stream stays right while this stays the same.
    pub fn activations(&self) -> u64 {
        self.activations
    }

    /// A streamed transaction committed (or prepared): its definitions become global.
    pub fn commit_scope(&mut self, xid: Xid) {
        if let Some(overlay) = self.overlays.remove(&xid) {
            let mut pairs: Vec<_> = overlay.into_iter().collect();
            pairs.sort_by_key(|&(_, schema_id)| schema_id);
            for (relation_id, schema_id) in pairs {
                self.activate(relation_id, schema_id);
            }
        }
    }

    /// A streamed transaction aborted: its definitions are forgotten.
    pub fn drop_scope(&mut self, xid: Xid) {
        self.overlays.remove(&xid);
    }

    pub fn version(&self, schema_id: u32) -> &Arc<RelVersion> {
        &self.versions[schema_id as usize]
    }

    pub fn table_count(&self) -> usize {
        self.table_names.len()
    }

    /// Every table name with the schema ids of its versions, oldest first.
    pub fn tables(&self) -> impl Iterator<Item = (&Arc<str>, &[u32])> {
        self.tables.iter().map(|(name, (_, ids))| (name, ids.as_slice()))
    }

    /// Whether a version was ever the global definition of its relation.
    pub fn was_active(&self, schema_id: u32) -> bool {
        self.activated[schema_id as usize] != 0
    }

    /// The version of a table that became the global definition last.
    pub fn newest(&self, ids: &[u32]) -> Option<u32> {
        ids.iter().copied().filter(|&id| self.was_active(id)).max_by_key(|&id| self.activated[id as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(spec: &[(&str, u32)]) -> Vec<RelColumn> {
        spec.iter()
            .map(|&(name, oid)| RelColumn {
                name: name.to_string(),
                ty: PgColumnType { oid, typmod: -1, type_name: None },
                is_key: false,
                id: 0,
                attnum: None,
            })
            .collect()
    }

    /// Ids of `new` after `old` (whose ids are 0, 1, 2, ...).
    fn ids(old: &[(&str, u32)], new: &[(&str, u32)]) -> Vec<u32> {
        let mut old = cols(old);
        let next = column_ids(&[], &mut old, 0);
        let mut new = cols(new);
        column_ids(&old, &mut new, next);
        new.iter().map(|c| c.id).collect()
    }

    const INT: u32 = 23;
    const TEXT: u32 = 25;

    #[test]
    fn same_names_keep_their_ids() {
        assert_eq!(ids(&[("id", INT), ("a", INT)], &[("id", INT), ("a", TEXT), ("b", INT)]), [0, 1, 2]);
    }

    #[test]
    fn a_new_name_before_a_kept_column_is_a_rename() {
        // RENAME a TO x (a column after it kept its name): whatever the types.
        assert_eq!(ids(&[("id", INT), ("a", INT), ("z", TEXT)], &[("id", INT), ("x", TEXT), ("z", TEXT)]), [0, 1, 2]);
        // DROP a, RENAME b TO x: the gap's column of the same type.
        assert_eq!(
            ids(&[("id", INT), ("a", INT), ("b", TEXT), ("z", INT)], &[("id", INT), ("x", TEXT), ("z", INT)]),
            [0, 2, 3]
        );
    }

    #[test]
    fn at_the_end_only_the_same_type_is_a_rename() {
        assert_eq!(ids(&[("id", INT), ("a", INT)], &[("id", INT), ("b", INT)]), [0, 1]);
        // DROP a (int), ADD b (text): a new column.
        assert_eq!(ids(&[("id", INT), ("a", INT)], &[("id", INT), ("b", TEXT)]), [0, 2]);
        // DROP a, ADD b text, ADD c int: after the first new column, the rest are new too.
        assert_eq!(ids(&[("id", INT), ("a", INT)], &[("id", INT), ("b", TEXT), ("c", INT)]), [0, 2, 3]);
    }

    #[test]
    fn a_kept_name_after_renamed_columns_is_a_new_column() {
        // Torture seed 558: RENAME c44 TO x, RENAME c46 TO y, DROP c43, ADD c43 text. The
        // new c43 comes after x and y, so it was added: x and y are the renamed columns.
        const PAIR: u32 = 16_390;
        const BYTEA: u32 = 17;
        assert_eq!(
            ids(
                &[("id", INT), ("c42", INT), ("c43", PAIR), ("c44", TEXT), ("c46", BYTEA)],
                &[("id", INT), ("c42", INT), ("x", TEXT), ("y", BYTEA), ("c43", TEXT)]
            ),
            [0, 1, 3, 4, 5]
        );
    }

    #[test]
    fn swapped_names_are_two_renames() {
        assert_eq!(ids(&[("id", INT), ("a", INT), ("b", TEXT)], &[("id", INT), ("b", INT), ("a", TEXT)]), [0, 1, 2]);
    }

    #[test]
    fn attnums_decide_when_every_column_has_one() {
        // DROP a, ADD b of the same type: the positional rule reads a rename, attnums do not.
        let with = |spec: &[(&str, i16)]| -> Vec<RelColumn> {
            let mut c = cols(&spec.iter().map(|&(n, _)| (n, INT)).collect::<Vec<_>>());
            for (c, &(_, a)) in c.iter_mut().zip(spec) {
                c.attnum = Some(a);
            }
            c
        };
        let mut v1 = with(&[("id", 1), ("a", 2)]);
        let next = column_ids(&[], &mut v1, 0);
        let mut v2 = with(&[("id", 1), ("b", 3)]);
        column_ids(&v1, &mut v2, next);
        assert_eq!(v2.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 2]);
        // A rename: the same attnum under another name.
        let mut v3 = with(&[("id", 1), ("c", 3)]);
        column_ids(&v2, &mut v3, 3);
        assert_eq!(v3.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 2]);
        // One column without an attnum: the positional rule for the whole definition.
        let mut v4 = with(&[("id", 1), ("d", 4)]);
        v4[1].attnum = None;
        column_ids(&v3, &mut v4, 3);
        assert_eq!(v4.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 2]);
    }

    #[test]
    fn dropped_columns_free_nothing() {
        // DROP a: the ids of the others stay, and the next new column gets a fresh id.
        let mut v1 = cols(&[("id", INT), ("a", INT), ("b", INT)]);
        let next = column_ids(&[], &mut v1, 0);
        let mut v2 = cols(&[("id", INT), ("b", INT)]);
        let next = column_ids(&v1, &mut v2, next);
        let mut v3 = cols(&[("id", INT), ("b", INT), ("a", TEXT)]);
        column_ids(&v2, &mut v3, next);
        assert_eq!(v2.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(v3.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 2, 3]);
    }
}
