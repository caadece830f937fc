-- @description A replication origin on a streamed and on a prepared transaction, as a
-- @description subscriber's apply worker replays them. The Origin message follows the first
-- @description Stream Start of the streamed one, inside the stream block and with commit LSN
-- @description 0 (pgoutput_stream_start), and Begin Prepare of the prepared one. Without
-- @description two_phase the prepared one arrives at COMMIT PREPARED as Begin, Origin, ...
-- @option_sets v2-stream, v3-twophase-binary, v4-parallel

SELECT pg_replication_origin_create('golden_origin');
CREATE TABLE from_elsewhere (id int PRIMARY KEY, v text);
CREATE PUBLICATION golden FOR TABLE from_elsewhere;

-- @slots

-- @fact origin
SELECT roident::bigint AS roident, roname FROM pg_replication_origin WHERE roname = 'golden_origin';
SELECT pg_replication_origin_session_setup('golden_origin');

-- Large enough to be streamed (logical_decoding_work_mem = 64kB).
BEGIN;
-- @fact tx_streamed
SELECT * FROM golden_tx();
-- @fact origin_xact_streamed
SELECT pg_replication_origin_xact_setup(l, t)::text AS setup, l AS origin_lsn, t AS origin_timestamp
FROM (VALUES ('1A/2B3C4D5E'::pg_lsn, '2024-01-02 03:04:05.123456+00'::timestamptz)) v(l, t);
INSERT INTO from_elsewhere SELECT g, 'replayed ' || g FROM generate_series(1, 800) g;
COMMIT;

BEGIN;
-- @fact tx_prepared
SELECT * FROM golden_tx();
-- @fact origin_xact_prepared
SELECT pg_replication_origin_xact_setup(l, t)::text AS setup, l AS origin_lsn, t AS origin_timestamp
FROM (VALUES ('1A/2B3C5000'::pg_lsn, '2024-01-02 03:04:06.5+00'::timestamptz)) v(l, t);
INSERT INTO from_elsewhere VALUES (1001, 'prepared under an origin');
PREPARE TRANSACTION 'golden-origin-gid';
-- @fact prepared
SELECT gid, transaction::text::bigint AS transaction, prepared
FROM pg_prepared_xacts WHERE gid = 'golden-origin-gid';
COMMIT PREPARED 'golden-origin-gid';

SELECT pg_replication_origin_session_reset();

-- @fact origin_progress
SELECT pg_replication_origin_progress('golden_origin', false) AS remote_lsn;
-- @facts relations
SELECT * FROM golden_relations();
