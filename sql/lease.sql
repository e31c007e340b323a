-- Leases: every function and every return path.
CREATE EXTENSION IF NOT EXISTS dsync;

-- Tokens seen by this test, to compare without printing raw values.
CREATE TEMP TABLE tok (step text PRIMARY KEY, token bigint);

-- acquire a free lease: a token; the holder is the leader
INSERT INTO tok SELECT 'first', dsync_acquire('job', 'w1', '1 minute');
SELECT token IS NOT NULL AS granted FROM tok WHERE step = 'first';
SELECT dsync_leader('job');

-- reentrant: the same holder gets the same token and a later expiry
SELECT expires_at AS exp1 FROM dsync_leases WHERE lease = 'job' \gset
SELECT pg_sleep(0.01);
INSERT INTO tok SELECT 'again', dsync_acquire('job', 'w1', '2 minutes', info => '{"host":"a"}');
SELECT (SELECT token FROM tok WHERE step = 'again') = (SELECT token FROM tok WHERE step = 'first') AS same_token;
SELECT expires_at > :'exp1'::timestamptz AS extended,
	   ttl, info, permits, owner = current_user AS owned_by_me,
	   expires_at - renewed_at = interval '2 minutes' AS expiry_is_renewed_plus_ttl
  FROM dsync_leases WHERE lease = 'job';
-- a reentrant acquire without info keeps the info
SELECT dsync_acquire('job', 'w1', '2 minutes') = (SELECT token FROM tok WHERE step = 'first') AS same_token_again;
SELECT info FROM dsync_leases WHERE lease = 'job';

-- another holder cannot take it
SELECT dsync_acquire('job', 'w2') IS NULL AS refused;
SELECT dsync_leader('job');

-- renew: new expiry = now + ttl; NULL ttl means the ttl it was acquired with
SELECT dsync_renew('job', 'w1', '5 minutes') - clock_timestamp() BETWEEN interval '4 minutes 59 seconds' AND interval '5 minutes' AS renewed_5min;
SELECT ttl FROM dsync_leases WHERE lease = 'job';
SELECT dsync_renew('job', 'w1') - clock_timestamp() BETWEEN interval '1 minute 59 seconds' AND interval '2 minutes' AS renewed_stored_ttl;
SELECT dsync_renew('job', 'w1') AS renewed_to \gset
SELECT expires_at = :'renewed_to'::timestamptz AS renew_returns_expiry FROM dsync_leases WHERE lease = 'job';
-- renew by someone who does not hold it: NULL, never an error
SELECT dsync_renew('job', 'w2') IS NULL AS renew_other_null;
SELECT dsync_renew('nosuch', 'w1') IS NULL AS renew_missing_null;

-- assert_held: the token for the holder, an error for anyone else
SELECT dsync_assert_held('job', 'w1') = (SELECT token FROM tok WHERE step = 'first') AS guard_token;
SELECT regress_err($$SELECT dsync_assert_held('job', 'w2')$$);
SELECT regress_err($$SELECT dsync_assert_held('nosuch', 'w1')$$);

-- release: false for others, true for the holder, then false again
SELECT dsync_release('job', 'w2') AS release_other;
SELECT dsync_release('job', 'w1') AS release_holder;
SELECT dsync_release('job', 'w1') AS release_again;
SELECT dsync_release('nosuch', 'w1') AS release_missing;
SELECT dsync_leader('job') IS NULL AS no_leader;
SELECT count(*) AS live FROM dsync_leases WHERE lease = 'job';
SELECT dsync_renew('job', 'w1') IS NULL AS renew_released_null;

-- the next grant gets a greater token
INSERT INTO tok SELECT 'second', dsync_acquire('job', 'w2', '1 minute');
SELECT (SELECT token FROM tok WHERE step = 'second') > (SELECT token FROM tok WHERE step = 'first') AS token_increased;
SELECT dsync_leader('job');

-- expiry is exact by the server clock, with nothing cleaned up
SELECT dsync_acquire('short', 'w1', '100 milliseconds') IS NOT NULL AS granted_short;
INSERT INTO tok SELECT 'short', token FROM (SELECT fencing AS token FROM dsync_leases WHERE lease = 'short') s;
SELECT pg_sleep(0.2);
SELECT dsync_leader('short') IS NULL AS expired_no_leader;
SELECT count(*) AS live_after_expiry FROM dsync_leases WHERE lease = 'short';
SELECT dsync_renew('short', 'w1') IS NULL AS renew_expired_null;
SELECT dsync_release('short', 'w1') AS release_expired;
SELECT regress_err($$SELECT dsync_assert_held('short', 'w1')$$);
-- the former holder re-acquiring after expiry gets a new token
INSERT INTO tok SELECT 'short-again', dsync_acquire('short', 'w1', '100 milliseconds');
SELECT (SELECT token FROM tok WHERE step = 'short-again') > (SELECT token FROM tok WHERE step = 'short') AS new_token_after_expiry;
SELECT pg_sleep(0.2);
-- and another holder takes it over
INSERT INTO tok SELECT 'takeover', dsync_acquire('short', 'w2', '1 minute');
SELECT (SELECT token FROM tok WHERE step = 'takeover') > (SELECT token FROM tok WHERE step = 'short-again') AS takeover_token_increased;
SELECT dsync_leader('short');

-- transactions: a rolled-back acquire never happened
BEGIN;
SELECT dsync_acquire('tx', 'w1') IS NOT NULL AS granted_in_tx;
SELECT dsync_leader('tx');
ROLLBACK;
SELECT dsync_leader('tx') IS NULL AS rolled_back_acquire;
-- a rolled-back release never happened
SELECT dsync_acquire('tx', 'w1') IS NOT NULL AS granted;
BEGIN;
SELECT dsync_release('tx', 'w1') AS released_in_tx;
SELECT dsync_leader('tx') IS NULL AS released_inside;
ROLLBACK;
SELECT dsync_leader('tx') AS still_leader;
-- a rolled-back renew never happened
SELECT expires_at AS exp_before FROM dsync_leases WHERE lease = 'tx' \gset
BEGIN;
SELECT dsync_renew('tx', 'w1', '1 hour') IS NOT NULL AS renewed_in_tx;
ROLLBACK;
SELECT expires_at = :'exp_before'::timestamptz AS renew_undone FROM dsync_leases WHERE lease = 'tx';
-- several calls in one statement see each other
SELECT dsync_acquire('same', 'a') IS NOT NULL AS a_granted,
	   dsync_acquire('same', 'b') IS NULL AS b_refused,
	   dsync_release('same', 'a') AS a_released,
	   dsync_acquire('same', 'b') IS NOT NULL AS b_granted;
-- in a subtransaction that rolls back
BEGIN;
SAVEPOINT s;
SELECT dsync_release('same', 'b') AS released_in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT dsync_leader('same') AS leader_after_savepoint_rollback;
COMMIT;

-- read-only transactions and hot standby refuse changes with 25006
BEGIN READ ONLY;
SELECT regress_err($$SELECT dsync_acquire('ro', 'w1')$$);
SELECT regress_err($$SELECT dsync_renew('tx', 'w1')$$);
SELECT regress_err($$SELECT dsync_release('tx', 'w1')$$);
SELECT regress_err($$SELECT dsync_assert_held('tx', 'w1')$$);
SELECT regress_err($$SELECT dsync_force_release('tx')$$);
-- reads still work
SELECT dsync_leader('tx') AS read_only_leader;
COMMIT;

-- force_release: all holders, or only the one given
SELECT dsync_force_release('tx', 'nobody') AS forced_nobody;
SELECT dsync_force_release('tx', 'w1') AS forced_w1;
SELECT dsync_leader('tx') IS NULL AS forced_gone;
SELECT dsync_acquire('tx', 'w3') IS NOT NULL AS regranted;
SELECT dsync_force_release('tx') AS forced_all;
SELECT dsync_force_release('tx') AS forced_none_left;
SELECT dsync_force_release('never-existed') AS forced_missing;

-- the view shows live leases only, with every column
SELECT lease, holder, permits, ttl, info,
	   fencing IS NOT NULL AS has_token,
	   acquired_at <= renewed_at AS acquired_before_renewed,
	   renewed_at < expires_at AS renewed_before_expiry,
	   owner = current_user AS owner_is_me
  FROM dsync_leases ORDER BY lease;

-- waiting: a wait that runs out returns NULL; a free lease is granted at once
SELECT dsync_acquire('busy', 'w1', '1 minute') IS NOT NULL AS busy_granted;
SELECT dsync_acquire('busy', 'w2', '1 minute', '50 milliseconds') IS NULL AS wait_ran_out;
SELECT count(*) AS waiters_left FROM dsync_waiters;
SELECT dsync_acquire('busy', 'w1', '1 minute', '1 second') IS NOT NULL AS reentrant_with_wait;
-- a waiter gets an expiring lease by itself, with nobody releasing it
SELECT dsync_acquire('soon', 'w1', '200 milliseconds') IS NOT NULL AS soon_granted;
SELECT dsync_acquire('soon', 'w2', '1 minute', '5 seconds') IS NOT NULL AS granted_at_expiry;
SELECT dsync_leader('soon');

-- a transaction that changed a lease cannot be prepared
BEGIN;
SELECT dsync_acquire('prep', 'w1') IS NOT NULL AS granted;
PREPARE TRANSACTION 'dsync_prep';
SELECT dsync_leader('prep') IS NULL AS prepare_rolled_back;

-- nor can one that only guarded a lease (dsync refuses before PostgreSQL
-- looks at max_prepared_transactions, so this shows on any server; that a
-- transaction that tried and failed can be prepared needs a server that
-- allows PREPARE: test/configured/sql/prepare.sql)
SELECT dsync_acquire('prep', 'w1') IS NOT NULL AS granted;
BEGIN;
SELECT dsync_assert_held('prep', 'w1') IS NOT NULL AS guarded;
PREPARE TRANSACTION 'dsync_prep_guard';
SELECT dsync_release('prep', 'w1') AS released;

-- the read functions work in parallel mode (they take a fresh snapshot,
-- so they are PARALLEL UNSAFE and run in the leader only)
-- (the setting is force_parallel_mode before PostgreSQL 16,
-- debug_parallel_query from 16 on)
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'on', false) AS parallel_mode;
SELECT dsync_leader('busy') AS leader_in_parallel_mode;
SELECT count(*) > 0 AS leases_in_parallel_mode FROM dsync_leases;
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'off', false) AS parallel_mode;

-- a lookup by name in the view is an index probe, with a constant or a
-- parameter; other conditions are still applied to what it finds
EXPLAIN (COSTS OFF) SELECT expires_at FROM dsync_leases WHERE lease = 'busy';
EXPLAIN (COSTS OFF) SELECT * FROM dsync_leases WHERE holder = 'w1' AND lease = 'busy';
EXPLAIN (COSTS OFF) SELECT * FROM dsync_leases WHERE holder = 'w1';
PREPARE by_name(text) AS SELECT holder FROM dsync_leases WHERE lease = $1;
EXPLAIN (COSTS OFF) EXECUTE by_name('busy');
EXECUTE by_name('busy');
DEALLOCATE by_name;
SELECT holder FROM dsync_leases WHERE lease = 'busy' AND holder = 'nobody';
SELECT count(*) AS busy_or_soon FROM dsync_leases WHERE lease IN ('busy', 'soon');
SELECT count(*) AS null_name FROM dsync_leases WHERE lease = NULL::text;
SELECT count(*) AS other_collation FROM dsync_leases WHERE lease = 'BUSY' COLLATE "C";

-- any number of new names in one statement, and released in one: the
-- insert lock is held only while a row goes in (default settings run out
-- of lock table at about 10,000 otherwise)
SHOW max_locks_per_transaction;
SELECT count(dsync_acquire('many-' || i, 'w', '1 minute')) AS acquired FROM generate_series(1, 50000) i;
SELECT count(*) FILTER (WHERE dsync_release('many-' || i, 'w')) AS released FROM generate_series(1, 50000) i;
BEGIN;
SELECT count(dsync_acquire('many-tx-' || i, 'w', '1 minute')) AS acquired_in_tx FROM generate_series(1, 20000) i;
SELECT count(*) FILTER (WHERE dsync_release('many-tx-' || i, 'w')) AS released_in_tx FROM generate_series(1, 20000) i;
COMMIT;
SELECT count(*) AS insert_locks_left FROM pg_locks WHERE locktype = 'advisory' AND objsubid >= 25715;

-- clean up
SELECT dsync_force_release(lease) FROM (SELECT DISTINCT lease FROM dsync_leases) l ORDER BY 1;
SELECT count(*) AS leases_left FROM dsync_leases;
