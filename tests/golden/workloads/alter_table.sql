-- @description Schema changes between and inside transactions: each ALTER TABLE makes the
-- @description server send a new Relation message before the next change of the table (add,
-- @description retype, rename and drop a column; DDL between two inserts of one
-- @description transaction; a change of replica identity). Fact columns_<n> is the column
-- @description list after step n.

CREATE TABLE evolving (id int PRIMARY KEY, a text);
CREATE PUBLICATION golden FOR TABLE evolving;

-- @slots

-- @fact tx_1
WITH ins AS (INSERT INTO evolving VALUES (1, 'before any change') RETURNING 1)
SELECT g.*, (SELECT count(*) FROM ins) AS inserted FROM golden_tx() g;
-- @facts columns_1
SELECT * FROM golden_columns();

ALTER TABLE evolving ADD COLUMN b int DEFAULT 7;
-- @fact tx_2
WITH ins AS (INSERT INTO evolving VALUES (2, 'after ADD COLUMN b', 2) RETURNING 1)
SELECT g.*, (SELECT count(*) FROM ins) AS inserted FROM golden_tx() g;
-- @facts columns_2
SELECT * FROM golden_columns();

ALTER TABLE evolving ALTER COLUMN b TYPE bigint;
-- @fact tx_3
WITH ins AS (INSERT INTO evolving VALUES (3, 'after b becomes bigint', 3000000000) RETURNING 1)
SELECT g.*, (SELECT count(*) FROM ins) AS inserted FROM golden_tx() g;
-- @facts columns_3
SELECT * FROM golden_columns();

ALTER TABLE evolving RENAME COLUMN a TO a_renamed;
-- @fact tx_4
WITH ins AS (INSERT INTO evolving VALUES (4, 'after RENAME a', 4) RETURNING 1)
SELECT g.*, (SELECT count(*) FROM ins) AS inserted FROM golden_tx() g;
-- @facts columns_4
SELECT * FROM golden_columns();

ALTER TABLE evolving DROP COLUMN b;
-- @fact tx_5
WITH ins AS (INSERT INTO evolving VALUES (5, 'after DROP COLUMN b') RETURNING 1)
SELECT g.*, (SELECT count(*) FROM ins) AS inserted FROM golden_tx() g;
-- @facts columns_5
SELECT * FROM golden_columns();

-- DDL inside a transaction: a Relation before each insert.
BEGIN;
-- @fact tx_6
SELECT * FROM golden_tx();
INSERT INTO evolving VALUES (6, 'before ADD COLUMN c, same transaction');
ALTER TABLE evolving ADD COLUMN c text;
INSERT INTO evolving VALUES (7, 'after ADD COLUMN c, same transaction', 'c7');
COMMIT;
-- @facts columns_6
SELECT * FROM golden_columns();

ALTER TABLE evolving REPLICA IDENTITY FULL;
-- @fact tx_7
WITH upd AS (UPDATE evolving SET c = 'full identity' WHERE id = 7 RETURNING 1)
SELECT g.*, (SELECT count(*) FROM upd) AS updated FROM golden_tx() g;
-- @facts relations
SELECT * FROM golden_relations();
