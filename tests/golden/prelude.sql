-- Helpers that workloads call to record facts; capture.py runs this file before each
-- workload's setup (it creates functions only, so it adds nothing to the stream).

-- The current transaction as Begin/Commit will describe it: its 32-bit xid (what pgoutput
-- sends), the 64-bit xid with epoch, its start time (now(); the commit timestamp comes
-- later and is added by capture.py), and the WAL position so far.
CREATE FUNCTION golden_tx()
RETURNS TABLE (xid bigint, full_xid bigint, xact_start timestamptz, wal_lsn pg_lsn)
LANGUAGE sql VOLATILE AS $$
    SELECT txid_current() % 4294967296, txid_current(), now(), pg_current_wal_lsn()
$$;

-- The xid of the newest open subtransaction that has written (it holds a lock on its own
-- transactionid), beside the top-level xid: Stream Abort names a subtransaction by it.
CREATE FUNCTION golden_subxact()
RETURNS TABLE (subxid bigint, top_xid bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT max(transactionid::text::bigint), txid_current() % 4294967296
    FROM pg_locks
    WHERE locktype = 'transactionid' AND pid = pg_backend_pid()
      AND transactionid::text::bigint <> txid_current() % 4294967296
$$;

-- User tables with their OIDs and replica identity, as Relation messages carry them.
CREATE FUNCTION golden_relations()
RETURNS TABLE (relname name, nspname name, oid bigint, replident text)
LANGUAGE sql STABLE AS $$
    SELECT c.relname, n.nspname, c.oid::bigint, c.relreplident::text
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
      AND n.nspname NOT LIKE 'pg\_toast%'
    ORDER BY c.relname
$$;

-- Columns of user tables: name, type OID and typmod as Relation messages carry them.
CREATE FUNCTION golden_columns()
RETURNS TABLE (relname name, attnum int, attname name, atttypid bigint, atttypmod int,
               type text)
LANGUAGE sql STABLE AS $$
    SELECT c.relname, a.attnum::int, a.attname, a.atttypid::bigint, a.atttypmod,
           format_type(a.atttypid, a.atttypmod)
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p') AND n.nspname = 'public' AND a.attnum > 0
      AND NOT a.attisdropped
    ORDER BY c.relname, a.attnum
$$;

-- User-defined types, as Type messages carry them (OID, namespace, name). For a domain the
-- Type message has the domain's OID but its base type's namespace and name: base_* say
-- what those are.
CREATE FUNCTION golden_types()
RETURNS TABLE (typname name, nspname name, oid bigint, typtype text,
               base_typname name, base_nspname name)
LANGUAGE sql STABLE AS $$
    SELECT t.typname, n.nspname, t.oid::bigint, t.typtype::text, bt.typname, bn.nspname
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    LEFT JOIN pg_type bt ON bt.oid = t.typbasetype
    LEFT JOIN pg_namespace bn ON bn.oid = bt.typnamespace
    WHERE n.nspname = 'public' AND (t.typrelid = 0 OR t.typrelid IN (
        SELECT c.oid FROM pg_class c
        WHERE c.relkind = 'c' AND c.relnamespace = 'public'::regnamespace))
    ORDER BY t.typname
$$;

-- Every row of a table as {column: text output}: what text-mode tuples carry.
CREATE FUNCTION golden_rows_as_text(tbl regclass, order_by text)
RETURNS SETOF jsonb LANGUAGE plpgsql AS $$
DECLARE
    cols text;
BEGIN
    SELECT string_agg(format('%L, %I::text', attname, attname), ', ' ORDER BY attnum)
    INTO cols
    FROM pg_attribute WHERE attrelid = tbl AND attnum > 0 AND NOT attisdropped;
    RETURN QUERY EXECUTE format('SELECT jsonb_build_object(%s) FROM %s ORDER BY %s',
                                cols, tbl, order_by);
END
$$;

-- How many distinct out-of-line values a table's TOAST relation holds.
CREATE FUNCTION golden_toast_values(tbl regclass)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    toast regclass;
    n bigint;
BEGIN
    SELECT reltoastrelid::regclass INTO toast FROM pg_class WHERE oid = tbl;
    EXECUTE format('SELECT count(DISTINCT chunk_id) FROM %s', toast) INTO n;
    RETURN n;
END
$$;
