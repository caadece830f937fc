-- @description Out-of-line (TOAST) values. Inserts carry them whole; an UPDATE that does
-- @description not touch them sends 'u' (unchanged TOAST) in their place. Column ext is
-- @description STORAGE EXTERNAL (out of line, uncompressed); column cmp is compressed (pglz)
-- @description and pushed out of line too by toast_tuple_target = 128. toasty_full has
-- @description REPLICA IDENTITY FULL, so its old rows are sent as well.

CREATE TABLE toasty (id int PRIMARY KEY, counter int, ext text, cmp text, small text);
ALTER TABLE toasty ALTER COLUMN ext SET STORAGE EXTERNAL;
ALTER TABLE toasty ALTER COLUMN cmp SET COMPRESSION pglz;
ALTER TABLE toasty SET (toast_tuple_target = 128);
CREATE TABLE toasty_full (id int PRIMARY KEY, counter int, ext text);
ALTER TABLE toasty_full ALTER COLUMN ext SET STORAGE EXTERNAL;
ALTER TABLE toasty_full REPLICA IDENTITY FULL;
CREATE PUBLICATION golden FOR TABLE toasty, toasty_full;
-- 2112 characters of hex: incompressible enough that pglz leaves it alone.
CREATE FUNCTION ext_value(seed int) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT string_agg(md5((seed * 1000 + i)::text), '' ORDER BY i) FROM generate_series(1, 66) i
$$;
-- 2112 characters with every 32 repeated once: pglz saves about half.
CREATE FUNCTION cmp_value(seed int) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT string_agg(repeat(md5((seed * 1000 + i)::text), 2), '' ORDER BY i)
    FROM generate_series(1, 33) i
$$;

-- @slots

BEGIN;
-- @fact tx_insert
SELECT * FROM golden_tx();
INSERT INTO toasty VALUES (1, 0, ext_value(1), cmp_value(1), 'small');
INSERT INTO toasty_full VALUES (1, 0, ext_value(2));
COMMIT;

-- @facts toast_after_insert
SELECT id, counter, length(ext) AS ext_length, md5(ext) AS ext_md5,
       pg_column_size(ext) AS ext_stored_size, pg_column_compression(ext) AS ext_compression,
       length(cmp) AS cmp_length, md5(cmp) AS cmp_md5, pg_column_size(cmp) AS cmp_stored_size,
       pg_column_compression(cmp) AS cmp_compression,
       golden_toast_values('toasty') AS out_of_line_values
FROM toasty ORDER BY id;

BEGIN;
-- @fact tx_update_untouched
SELECT * FROM golden_tx();
-- Neither TOAST column changes: both are sent as 'u'.
UPDATE toasty SET counter = counter + 1 WHERE id = 1;
-- FULL identity: the old row is sent too.
UPDATE toasty_full SET counter = counter + 1 WHERE id = 1;
COMMIT;

BEGIN;
-- @fact tx_update_one
SELECT * FROM golden_tx();
-- ext changes (sent whole), cmp does not ('u').
UPDATE toasty SET ext = ext_value(3), counter = counter + 1 WHERE id = 1;
COMMIT;

-- @facts toast_after_updates
SELECT id, counter, length(ext) AS ext_length, md5(ext) AS ext_md5,
       length(cmp) AS cmp_length, md5(cmp) AS cmp_md5, small
FROM toasty ORDER BY id;

BEGIN;
-- @fact tx_delete
SELECT * FROM golden_tx();
DELETE FROM toasty_full WHERE id = 1;
COMMIT;

-- @facts values
SELECT 1 AS seed, md5(ext_value(1)) AS ext_md5, md5(cmp_value(1)) AS cmp_md5
UNION ALL SELECT 2, md5(ext_value(2)), md5(cmp_value(2))
UNION ALL SELECT 3, md5(ext_value(3)), md5(cmp_value(3));
-- @facts relations
SELECT * FROM golden_relations();
-- @facts columns
SELECT * FROM golden_columns();
