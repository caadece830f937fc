-- @description Column types. User types (an enum, an array of it, a domain, a composite)
-- @description are announced by Type messages ('Y') before the Relation that uses them.
-- @description Built-in types with ordinary and special values (NaN, +-Infinity, infinity
-- @description dates and timestamps, a BC date, 24:00:00, empty and NULL array elements,
-- @description non-ASCII text, zero bytes in bytea) and a row of NULLs; compare text mode
-- @description (v1-text) with binary mode (v1-binary). Fact rows_as_text holds each value
-- @description as the server's text output.

CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TYPE address AS (street text, number int);

CREATE TABLE user_typed (
    id int PRIMARY KEY,
    m mood,
    moods mood[],
    p posint,
    addr address
);

CREATE TABLE builtin_typed (
    id int PRIMARY KEY,
    b bool,
    i2 smallint,
    i4 int,
    i8 bigint,
    f4 real,
    f8 double precision,
    num numeric(12, 3),
    num_any numeric,
    txt text,
    vc varchar(10),
    ch char(3),
    by bytea,
    d date,
    t time,
    ttz timetz,
    ts timestamp,
    tstz timestamptz,
    iv interval,
    u uuid,
    j json,
    jb jsonb,
    ia int[],
    ta text[],
    ip inet,
    o oid
);

CREATE PUBLICATION golden FOR TABLE user_typed, builtin_typed;

-- @slots

BEGIN;
-- @fact tx_user_types
SELECT * FROM golden_tx();
INSERT INTO user_typed VALUES
    (1, 'happy', '{sad,ok}', 42, ROW('Main St', 7)),
    (2, 'sad', '{}', 1, ROW(NULL, NULL)),
    (3, NULL, '{happy,NULL}', NULL, NULL);
COMMIT;

BEGIN;
-- @fact tx_builtin_types
SELECT * FROM golden_tx();
INSERT INTO builtin_typed VALUES
    (1, true, 1, 2, 3, 1.5, 2.25, 12345.678, 1e-20, 'hello', 'varchar', 'ab', '\x0001ff',
     '2024-02-29', '12:34:56.789', '01:02:03+05:30', '2024-02-29 12:34:56.123456',
     '2024-02-29 12:34:56.123456+00', '1 year 2 mons 3 days 04:05:06.7', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
     '{"a": [1, 2.5, null]}', '{"b": {"c": true}}', '{1,2,3}', '{"x","y z",""}', '192.168.0.1/24', 12345),
    (2, false, -32768, -2147483648, -9223372036854775808, 'NaN', 'Infinity', -0.001, 'NaN', '', '', '',
     '\x', '0001-01-01 BC', '24:00:00', '00:00:00-12', '4713-01-01 00:00:00 BC',
     '1970-01-01 00:00:00+00', '-1 days -00:00:01', '00000000-0000-0000-0000-000000000000',
     '[]', '[]', '{}', '{NULL,"NULL"}', '::1', 0),
    (3, NULL, 32767, 2147483647, 9223372036854775807, '-Infinity', '-Infinity', 999999999.999, 'Infinity',
     E'tab\there, quote '' and "double", emoji 🐘, ünïcødé', 'ελληνικά', 'é', '\x00000000',
     'infinity', '00:00:00', '24:00:00+14', 'infinity', '-infinity', '0', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
     '"just a string"', 'null', '{{1,2},{3,4}}', '{"with,comma","with\"quote"}', '10.0.0.1', 4294967295),
    (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
COMMIT;

-- @facts types
SELECT * FROM golden_types();
-- @facts relations
SELECT * FROM golden_relations();
-- @facts columns
SELECT * FROM golden_columns();
-- @facts rows_as_text
SELECT 'user_typed' AS tbl, r FROM golden_rows_as_text('user_typed', 'id') r
UNION ALL SELECT 'builtin_typed', r FROM golden_rows_as_text('builtin_typed', 'id') r;
