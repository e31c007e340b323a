-- One shared acquire+release cycle of a random dsync lease (rw_bench.sh):
-- dsync_acquire_shared instead of cycle_dsync.sql's dsync_acquire.
\set name random(1, 100000)
SELECT dsync_acquire_shared(:name::text, 'c' || :client_id, '30 seconds');
SELECT dsync_release(:name::text, 'c' || :client_id);
