-- Reference only (BENCH_FLOOR=1): two autocommit transactions that each
-- write one small WAL record (a transactional logical message, which takes
-- a transaction ID) and commit, but touch no table or index.  That is the
-- least any lease whose acquire and release are durable transactional
-- writes can cost per cycle here, so floor/table bounds the dsync/table
-- ratio this measurement can show.
\set name random(1, 100000)
SELECT pg_logical_emit_message(true, 'lease_bench', :name::text || ' c' || :client_id);
SELECT pg_logical_emit_message(true, 'lease_bench', :name::text || ' c' || :client_id);
