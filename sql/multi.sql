-- dsync_acquire_all: several leases, all or none.
-- Runs as dsync_tester, an ordinary role (test/tester.sql).
CREATE EXTENSION IF NOT EXISTS dsync;

-- All granted: one token per name, in the array's order; a name given twice
-- gets its token twice.
CREATE TEMP TABLE ma AS SELECT dsync_acquire_all(ARRAY['ma_b', 'ma_a', 'ma_b'], 'h1', '1 hour') AS t;
SELECT cardinality(t) AS n, t[1] = t[3] AS dup_same, t[1] <> t[2] AS distinct_tokens FROM ma;
SELECT lease, holder, fencing = (SELECT CASE lease WHEN 'ma_a' THEN t[2] ELSE t[1] END FROM ma) AS token_matches
FROM dsync_leases WHERE lease LIKE 'ma\_%' ORDER BY 1;

-- The same holder again: reentrant, the same tokens, extended.
SELECT dsync_acquire_all(ARRAY['ma_a', 'ma_b'], 'h1', '2 hours') = ARRAY[t[2], t[1]] AS same_tokens FROM ma;

-- Another holder: nothing, and nothing taken, if one name is held.
SELECT dsync_acquire_all(ARRAY['ma_c', 'ma_a'], 'h2') IS NULL AS refused;
SELECT count(*) AS ma_c_held FROM dsync_leases WHERE lease = 'ma_c';
SELECT dsync_acquire_all(ARRAY['ma_c', 'ma_a'], 'h2', wait => '200 ms') IS NULL AS refused_after_wait;
SELECT count(*) AS ma_c_held FROM dsync_leases WHERE lease = 'ma_c';

-- Once released, granted; a semaphore's name takes one permit.
SELECT dsync_semaphore_create('ma_sem', 2);
SELECT dsync_release('ma_a', 'h1');
SELECT cardinality(dsync_acquire_all(ARRAY['ma_c', 'ma_a', 'ma_sem'], 'h2')) AS granted;
SELECT lease, holder, permits FROM dsync_leases WHERE lease IN ('ma_a', 'ma_c', 'ma_sem') ORDER BY 1;

-- A rollback undoes every grant of the call.
BEGIN;
SELECT cardinality(dsync_acquire_all(ARRAY['ma_d', 'ma_e'], 'h3')) AS granted;
ROLLBACK;
SELECT count(*) AS after_rollback FROM dsync_leases WHERE lease IN ('ma_d', 'ma_e');

-- Bad input.
SELECT regress_err($$SELECT dsync_acquire_all(NULL, 'h')$$);
SELECT regress_err($$SELECT dsync_acquire_all('{}', 'h')$$);
SELECT regress_err($$SELECT dsync_acquire_all(ARRAY['a', NULL], 'h')$$);
SELECT regress_err($$SELECT dsync_acquire_all(ARRAY['a', ''], 'h')$$);
SELECT regress_err($$SELECT dsync_acquire_all(ARRAY['a', repeat('x', 256)], 'h')$$);
SELECT regress_err($$SELECT dsync_acquire_all(ARRAY[['a', 'b'], ['c', 'd']], 'h')$$);
SELECT regress_err($$SELECT dsync_acquire_all(array_fill('n'::text, ARRAY[1001]), 'h')$$);
SELECT regress_err($$SELECT dsync_acquire_all(ARRAY['a'], NULL)$$);
SELECT regress_err($$SELECT dsync_acquire_all(ARRAY['a'], 'h', '0 s')$$);
SELECT regress_err($$SELECT dsync_acquire_all(ARRAY['a'], 'h', wait => '-1 s')$$);

SELECT dsync_release(l, h) FROM (VALUES ('ma_a', 'h2'), ('ma_b', 'h1'), ('ma_c', 'h2'), ('ma_sem', 'h2')) v(l, h);
SELECT dsync_semaphore_drop('ma_sem');
