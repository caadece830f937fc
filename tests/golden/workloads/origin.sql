-- @description Replication origins: a transaction replayed under a session origin (as a
-- @description subscriber's apply worker does) is preceded by an Origin message with the
-- @description origin's name and the remote commit LSN given by
-- @description pg_replication_origin_xact_setup; that call's timestamp also becomes the
-- @description commit timestamp. A transaction without an origin follows for contrast.

SELECT pg_replication_origin_create('golden_origin');
CREATE TABLE from_elsewhere (id int PRIMARY KEY, v text);
CREATE PUBLICATION golden FOR TABLE from_elsewhere;

-- @slots

-- @fact origin
SELECT roident::bigint AS roident, roname FROM pg_replication_origin WHERE roname = 'golden_origin';
SELECT pg_replication_origin_session_setup('golden_origin');

BEGIN;
-- @fact tx_with_origin
SELECT * FROM golden_tx();
-- @fact origin_xact
SELECT pg_replication_origin_xact_setup(l, t)::text AS setup, l AS origin_lsn, t AS origin_timestamp
FROM (VALUES ('1A/2B3C4D5E'::pg_lsn, '2024-01-02 03:04:05.123456+00'::timestamptz)) v(l, t);
INSERT INTO from_elsewhere VALUES (1, 'replayed from golden_origin');
COMMIT;

SELECT pg_replication_origin_session_reset();

BEGIN;
-- @fact tx_without_origin
SELECT * FROM golden_tx();
INSERT INTO from_elsewhere VALUES (2, 'local');
COMMIT;

-- @fact origin_progress
SELECT pg_replication_origin_progress('golden_origin', false) AS remote_lsn;
-- @facts relations
SELECT * FROM golden_relations();
