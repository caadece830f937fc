-- @description Logical decoding messages (pg_logical_emit_message): transactional ones
-- @description inside Begin/Commit, non-transactional ones (flags 0) on their own, even
-- @description when emitted inside a transaction that then rolls back. Messages are sent
-- @description only with the option messages 'true' (option sets v2 and up).

CREATE TABLE msg_log (id int PRIMARY KEY, note text);
CREATE PUBLICATION golden FOR TABLE msg_log;

-- @slots

-- @fact msg_nontx
SELECT 'golden/nontx' AS prefix, 'outside any transaction' AS content,
       pg_logical_emit_message(false, 'golden/nontx', 'outside any transaction') AS lsn;

BEGIN;
-- @fact tx_messages
SELECT * FROM golden_tx();
-- @fact msg_tx_text
SELECT 'golden/tx' AS prefix, 'inside a transaction' AS content,
       pg_logical_emit_message(true, 'golden/tx', 'inside a transaction') AS lsn;
INSERT INTO msg_log VALUES (1, 'between two messages');
-- @fact msg_tx_bytea
SELECT 'golden/bytes' AS prefix, '\x00ff10'::bytea AS content,
       pg_logical_emit_message(true, 'golden/bytes', '\x00ff10'::bytea) AS lsn;
COMMIT;

-- A transaction holding nothing but an empty message.
BEGIN;
-- @fact tx_message_only
SELECT * FROM golden_tx();
-- @fact msg_empty
SELECT 'golden/empty' AS prefix, '' AS content,
       pg_logical_emit_message(true, 'golden/empty', '') AS lsn;
COMMIT;

-- A rolled-back transaction: its transactional message and insert vanish, the
-- non-transactional message is still sent.
BEGIN;
-- @fact tx_rolled_back
SELECT * FROM golden_tx();
INSERT INTO msg_log VALUES (2, 'rolled back');
-- @fact msg_nontx_in_rolled_back
SELECT 'golden/nontx-rollback' AS prefix, 'survives the rollback' AS content,
       pg_logical_emit_message(false, 'golden/nontx-rollback', 'survives the rollback') AS lsn;
-- @fact msg_tx_in_rolled_back
SELECT 'golden/tx-rollback' AS prefix, 'vanishes with the rollback' AS content,
       pg_logical_emit_message(true, 'golden/tx-rollback', 'vanishes with the rollback') AS lsn;
ROLLBACK;

-- @facts relations
SELECT * FROM golden_relations();
