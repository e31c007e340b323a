-- One acquire+release cycle of a random dsync lease.  pgbench runs each
-- statement below as its own autocommit transaction and counts one run of
-- this whole file as one "transaction", so pgbench's tps is cycles/s.
-- (:name::text works with -M prepared, where :name becomes $1, and with
-- -M simple, where pgbench pastes the bare number in.)
\set name random(1, 100000)
SELECT dsync_acquire(:name::text, 'c' || :client_id, '30 seconds');
SELECT dsync_release(:name::text, 'c' || :client_id);
