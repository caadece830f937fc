-- @description TRUNCATE: one table, several tables at once, CASCADE over a foreign key and
-- @description RESTART IDENTITY (Truncate option bits 1 = cascade, 2 = restart identity).

CREATE TABLE parent (id int PRIMARY KEY);
CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent);
CREATE TABLE counters (id serial PRIMARY KEY, v int);
CREATE TABLE other (id int PRIMARY KEY);
CREATE PUBLICATION golden FOR TABLE parent, child, counters, other;

-- @slots

INSERT INTO parent VALUES (1), (2);
INSERT INTO child VALUES (10, 1), (20, 2);
INSERT INTO counters (v) VALUES (1), (2), (3);
INSERT INTO other VALUES (1);

BEGIN;
-- @fact tx_cascade
SELECT * FROM golden_tx();
-- Truncates child too: one Truncate message naming both, option cascade.
TRUNCATE parent CASCADE;
COMMIT;

BEGIN;
-- @fact tx_restart_identity
SELECT * FROM golden_tx();
TRUNCATE counters RESTART IDENTITY;
COMMIT;

INSERT INTO counters (v) VALUES (4);
INSERT INTO other VALUES (2);

BEGIN;
-- @fact tx_both
SELECT * FROM golden_tx();
TRUNCATE counters, other RESTART IDENTITY CASCADE;
COMMIT;

INSERT INTO other VALUES (3);

BEGIN;
-- @fact tx_plain
SELECT * FROM golden_tx();
TRUNCATE other;
COMMIT;

-- @facts relations
SELECT * FROM golden_relations();
