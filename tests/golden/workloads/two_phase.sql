-- @description Two-phase commit. With two_phase (option sets v3 and v4, slot created with
-- @description two_phase) a prepared transaction is sent at PREPARE TRANSACTION (Begin
-- @description Prepare ... Prepare) and its fate later (Commit Prepared, Rollback
-- @description Prepared); a large one is first streamed and then ends in Stream Prepare.
-- @description Without two_phase a prepared transaction is sent as an ordinary one at
-- @description COMMIT PREPARED, and one rolled back is not sent at all.
-- @option_sets v1-text, v2-stream, v3-twophase-binary, v4-parallel

CREATE TABLE orders (id int PRIMARY KEY, item text);
CREATE PUBLICATION golden FOR TABLE orders;

-- @slots

BEGIN;
-- @fact tx_commit_prepared
SELECT * FROM golden_tx();
INSERT INTO orders VALUES (1, 'committed later');
PREPARE TRANSACTION 'golden-gid-commit';
-- @fact prepared_commit
SELECT gid, transaction::text::bigint AS transaction, prepared, owner, database
FROM pg_prepared_xacts WHERE gid = 'golden-gid-commit';
-- Another transaction commits between PREPARE and COMMIT PREPARED.
-- @fact tx_between
WITH ins AS (INSERT INTO orders VALUES (2, 'between prepare and commit prepared') RETURNING 1)
SELECT g.*, (SELECT count(*) FROM ins) AS inserted FROM golden_tx() g;
COMMIT PREPARED 'golden-gid-commit';

BEGIN;
-- @fact tx_rollback_prepared
SELECT * FROM golden_tx();
INSERT INTO orders VALUES (3, 'rolled back after prepare');
PREPARE TRANSACTION 'golden-gid-rollback';
-- @fact prepared_rollback
SELECT gid, transaction::text::bigint AS transaction, prepared
FROM pg_prepared_xacts WHERE gid = 'golden-gid-rollback';
ROLLBACK PREPARED 'golden-gid-rollback';

-- Large enough to be streamed before it is prepared: Stream Prepare.
BEGIN;
-- @fact tx_stream_prepared
SELECT * FROM golden_tx();
INSERT INTO orders SELECT g, 's' || g FROM generate_series(1001, 1800) g;
PREPARE TRANSACTION 'golden-gid-streamed';
-- @fact prepared_streamed
SELECT gid, transaction::text::bigint AS transaction, prepared
FROM pg_prepared_xacts WHERE gid = 'golden-gid-streamed';
COMMIT PREPARED 'golden-gid-streamed';

-- @fact orders_rows
SELECT count(*) AS n, min(id) AS min_id, max(id) AS max_id FROM orders;
-- @facts relations
SELECT * FROM golden_relations();
