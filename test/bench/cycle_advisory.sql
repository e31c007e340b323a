-- One lock+unlock cycle of a random session-level advisory lock.
-- Two autocommit transactions; one run of this file is one cycle.
\set key random(1, 100000)
SELECT pg_try_advisory_lock(:key);
SELECT pg_advisory_unlock(:key);
