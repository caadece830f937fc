-- @description Streamed transactions that abort, read live over the walsender protocol
-- @description (START_REPLICATION) as a subscriber reads them, so that the server streams
-- @description the changes before it knows the outcome. A large transaction is streamed,
-- @description then rolled back (Stream Abort with subxid = xid; with streaming 'parallel'
-- @description it carries the abort LSN and time); a large subtransaction is streamed and
-- @description rolled back to its savepoint (subxid != xid) before the top-level commits.
-- @description Frames carry xid 0: the walsender protocol sends no xid beside a message.
-- @via walsender
-- @option_sets v2-stream, v3-twophase-binary, v4-parallel

CREATE TABLE big (id int PRIMARY KEY, payload text);
CREATE PUBLICATION golden FOR TABLE big;

-- @slots

BEGIN;
-- @fact tx_aborted
SELECT * FROM golden_tx();
INSERT INTO big SELECT g, 'a' || g FROM generate_series(1, 600) g;
-- Every walsender decodes (and so streams) the inserts before the rollback happens.
-- @sync
ROLLBACK;
-- @sync

BEGIN;
-- @fact tx_committed
SELECT * FROM golden_tx();
INSERT INTO big VALUES (1, 'kept');
SAVEPOINT doomed;
INSERT INTO big SELECT g, 'b' || g FROM generate_series(1001, 1600) g;
-- @fact subxact_doomed
SELECT * FROM golden_subxact();
-- @sync
ROLLBACK TO SAVEPOINT doomed;
INSERT INTO big VALUES (2, 'kept too');
COMMIT;

-- @fact big_rows
SELECT count(*) AS n, min(id) AS min_id, max(id) AS max_id FROM big;
-- @facts relations
SELECT * FROM golden_relations();
