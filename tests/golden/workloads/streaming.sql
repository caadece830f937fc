-- @description Streaming of in-progress transactions (logical_decoding_work_mem = 64kB).
-- @description Session a runs a large transaction that is streamed in chunks (Stream Start
-- @description / Stop) while session b commits a small one in between; inside it, a
-- @description savepoint with enough changes to be streamed is rolled back (Stream Abort
-- @description with subxid != xid), another savepoint is kept, ALTER TABLE adds a column
-- @description mid-stream (a new Relation inside the stream), and it commits (Stream
-- @description Commit). Then a large transaction rolls back: decoded after the fact (as
-- @description here, by the SQL functions), PostgreSQL 15 streams it empty and aborts it
-- @description (Stream Start, Stop, Abort with subxid = xid) while 16+ knows it aborted and
-- @description sends nothing; stream_abort.sql captures the live case. Without streaming (v1 option sets) the
-- @description committed transaction arrives whole at its commit and the aborted ones not
-- @description at all.
-- @option_sets v1-text, v2-stream, v3-twophase-binary, v4-parallel

CREATE TABLE big (id int PRIMARY KEY, payload text);
CREATE TABLE small (id int PRIMARY KEY, note text);
CREATE PUBLICATION golden FOR TABLE big, small;

-- @slots

-- @session a
BEGIN;
-- @fact tx_streamed
SELECT * FROM golden_tx();
INSERT INTO big SELECT g, 'r' || g FROM generate_series(1, 600) g;
-- @fact msg_in_stream
SELECT 'golden/stream' AS prefix, 'inside a streamed transaction' AS content,
       pg_logical_emit_message(true, 'golden/stream', 'inside a streamed transaction') AS lsn;

-- @session b
BEGIN;
-- @fact tx_interleaved
SELECT * FROM golden_tx();
INSERT INTO small VALUES (1, 'committed while the streamed transaction is open');
COMMIT;

-- @session a
SAVEPOINT rolled_back;
INSERT INTO big SELECT g, 'x' || g FROM generate_series(1001, 1600) g;
-- @fact subxact_rolled_back
SELECT * FROM golden_subxact();
ROLLBACK TO SAVEPOINT rolled_back;
SAVEPOINT kept;
INSERT INTO big VALUES (2001, 'in a released savepoint');
-- @fact subxact_kept
SELECT * FROM golden_subxact();
RELEASE SAVEPOINT kept;
ALTER TABLE big ADD COLUMN extra int;
INSERT INTO big SELECT g, 'y' || g, g FROM generate_series(3001, 3400) g;
COMMIT;

-- @session main
BEGIN;
-- @fact tx_streamed_aborted
SELECT * FROM golden_tx();
INSERT INTO big SELECT g, 'z' || g, 0 FROM generate_series(5001, 5600) g;
ROLLBACK;

-- @fact big_rows
SELECT count(*) AS n, min(id) AS min_id, max(id) AS max_id, count(extra) AS with_extra FROM big;
-- @facts relations
SELECT * FROM golden_relations();
-- @facts columns
SELECT * FROM golden_columns();
