-- Every program's keyspace in one table, and what each uses against its cap in another.
-- Row-level security confines every statement to the program named by the transaction's
-- `berm.program` setting, so a query that forgot its program filter still sees one
-- program's rows only; FORCE applies it to the tables' owner (bermd's role) too.

CREATE TABLE berm_kv (
    program text NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (program, key)
);

CREATE TABLE berm_kv_usage (
    program text PRIMARY KEY,
    keys bigint NOT NULL DEFAULT 0 CHECK (keys >= 0),
    bytes bigint NOT NULL DEFAULT 0 CHECK (bytes >= 0)
);

ALTER TABLE berm_kv ENABLE ROW LEVEL SECURITY;
ALTER TABLE berm_kv FORCE ROW LEVEL SECURITY;
CREATE POLICY berm_kv_one_program ON berm_kv
    USING (program = current_setting('berm.program', true))
    WITH CHECK (program = current_setting('berm.program', true));

ALTER TABLE berm_kv_usage ENABLE ROW LEVEL SECURITY;
ALTER TABLE berm_kv_usage FORCE ROW LEVEL SECURITY;
CREATE POLICY berm_kv_usage_one_program ON berm_kv_usage
    USING (program = current_setting('berm.program', true))
    WITH CHECK (program = current_setting('berm.program', true));

-- One function per operation: one round trip, one transaction (the statement's), with
-- `berm.program` set for that transaction only. Each also names its program in its own
-- WHERE clauses, so a role that bypasses row-level security still gets one program's rows.

CREATE FUNCTION berm_kv_get(p text, k bytea) RETURNS bytea
LANGUAGE plpgsql AS $$
DECLARE
    stored bytea;
BEGIN
    PERFORM set_config('berm.program', p, true);
    SELECT value INTO stored FROM berm_kv WHERE program = p AND key = k;
    RETURN stored;
END
$$;

-- Keys from `lo` (inclusive) to `hi` (exclusive; NULL: no upper bound), in byte order.
CREATE FUNCTION berm_kv_list(p text, lo bytea, hi bytea) RETURNS SETOF bytea
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('berm.program', p, true);
    RETURN QUERY SELECT key FROM berm_kv
        WHERE program = p AND key >= lo AND (hi IS NULL OR key < hi)
        ORDER BY key;
END
$$;

-- Stores `v` under `k` unless the keyspace's total (keys, values and `per_key` bytes per
-- key) would pass `max_total`: then raises SQLSTATE BK001 with the total it would have
-- been. The usage row is locked first, so concurrent writers on any replica are counted
-- one after another.
CREATE FUNCTION berm_kv_put(p text, k bytea, v bytea, per_key bigint, max_total bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    used bigint;
    old bigint;
    total bigint;
BEGIN
    PERFORM set_config('berm.program', p, true);
    INSERT INTO berm_kv_usage (program) VALUES (p) ON CONFLICT (program) DO NOTHING;
    SELECT bytes INTO used FROM berm_kv_usage WHERE program = p FOR UPDATE;
    SELECT length(key) + length(value) + per_key INTO old
        FROM berm_kv WHERE program = p AND key = k;
    total := used - coalesce(old, 0) + length(k) + length(v) + per_key;
    IF total > max_total THEN
        RAISE EXCEPTION USING ERRCODE = 'BK001', MESSAGE = total::text;
    END IF;
    INSERT INTO berm_kv (program, key, value) VALUES (p, k, v)
        ON CONFLICT (program, key) DO UPDATE SET value = excluded.value;
    UPDATE berm_kv_usage
        SET bytes = total, keys = keys + (CASE WHEN old IS NULL THEN 1 ELSE 0 END)
        WHERE program = p;
END
$$;

-- Deletes `k`; returns whether it existed.
CREATE FUNCTION berm_kv_delete(p text, k bytea, per_key bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    freed bigint;
BEGIN
    PERFORM set_config('berm.program', p, true);
    PERFORM 1 FROM berm_kv_usage WHERE program = p FOR UPDATE;
    DELETE FROM berm_kv WHERE program = p AND key = k
        RETURNING length(key) + length(value) + per_key INTO freed;
    IF freed IS NULL THEN
        RETURN false;
    END IF;
    UPDATE berm_kv_usage SET bytes = bytes - freed, keys = keys - 1 WHERE program = p;
    RETURN true;
END
$$;

-- How many keys the keyspace holds, and their bytes as counted against the cap.
CREATE FUNCTION berm_kv_size(p text, OUT keys bigint, OUT bytes bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('berm.program', p, true);
    SELECT u.keys, u.bytes INTO keys, bytes FROM berm_kv_usage u WHERE u.program = p;
    keys := coalesce(keys, 0);
    bytes := coalesce(bytes, 0);
END
$$;
