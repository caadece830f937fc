-- @description INSERT, UPDATE and DELETE under each replica identity: DEFAULT (primary
-- @description key), FULL, USING INDEX and NOTHING; a key change (old key 'K'), a FULL old
-- @description row ('O'), NULLs, a multi-row INSERT, a single-statement transaction.
-- @publications golden, golden_insert_only

CREATE TABLE ri_default (id int PRIMARY KEY, name text, qty int);
CREATE TABLE ri_full (id int, name text, qty int);
ALTER TABLE ri_full REPLICA IDENTITY FULL;
CREATE TABLE ri_index (a int NOT NULL, b text NOT NULL, note text);
CREATE UNIQUE INDEX ri_index_ab ON ri_index (a, b);
ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_ab;
CREATE TABLE ri_nothing (id int, note text);
ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING;
CREATE PUBLICATION golden FOR TABLE ri_default, ri_full, ri_index;
-- A table without a replica identity may publish inserts only.
CREATE PUBLICATION golden_insert_only FOR TABLE ri_nothing WITH (publish = 'insert');

-- @slots

BEGIN;
-- @fact tx_insert
SELECT * FROM golden_tx();
INSERT INTO ri_default VALUES (1, 'one', 10), (2, 'two', 20), (3, NULL, NULL);
INSERT INTO ri_full VALUES (1, 'one', 10), (2, 'two', 20);
INSERT INTO ri_index VALUES (1, 'x', 'first'), (2, 'y', NULL);
INSERT INTO ri_nothing VALUES (1, 'inserts are published');
COMMIT;

BEGIN;
-- @fact tx_update
SELECT * FROM golden_tx();
-- Key unchanged: new tuple only.
UPDATE ri_default SET qty = qty + 1 WHERE id = 1;
-- Key changed: old key ('K') with only the key column, then the new tuple.
UPDATE ri_default SET id = 20 WHERE id = 2;
-- FULL: the whole old row ('O').
UPDATE ri_full SET qty = 11 WHERE id = 1;
-- Index key unchanged, then changed ('K' with columns a and b).
UPDATE ri_index SET note = 'changed' WHERE a = 1;
UPDATE ri_index SET b = 'z' WHERE a = 2;
-- Not published (the publication of ri_nothing publishes inserts only).
UPDATE ri_nothing SET note = 'updates are not published';
COMMIT;

BEGIN;
-- @fact tx_delete
SELECT * FROM golden_tx();
DELETE FROM ri_default WHERE id = 3;
DELETE FROM ri_full WHERE id = 2;
DELETE FROM ri_index WHERE a = 1;
COMMIT;

-- One statement, its own transaction.
-- @fact tx_autocommit
WITH ins AS (INSERT INTO ri_default VALUES (4, 'autocommit', 40) RETURNING 1)
SELECT g.*, (SELECT count(*) FROM ins) AS inserted FROM golden_tx() g;

-- @facts relations
SELECT * FROM golden_relations();
-- @facts columns
SELECT * FROM golden_columns();
-- @facts final_rows
SELECT 'ri_default' AS tbl, r FROM golden_rows_as_text('ri_default', 'id') r
UNION ALL SELECT 'ri_full', r FROM golden_rows_as_text('ri_full', 'id') r
UNION ALL SELECT 'ri_index', r FROM golden_rows_as_text('ri_index', 'a') r;
