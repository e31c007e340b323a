-- PREPARE TRANSACTION on a server that allows it (max_prepared_transactions
-- > 0, which the server of test/tap/t/036_configured_regress.pl sets): a
-- transaction that made no dsync change can be prepared.  Refusals of
-- transactions that made one come before PostgreSQL looks at the setting
-- (sql/lease.sql, sql/member.sql and sql/signal.sql show them on any server).
CREATE EXTENSION IF NOT EXISTS dsync;

-- a wait that ran out changed nothing
SELECT dsync_acquire('prep', 'w1') IS NOT NULL AS granted;
BEGIN;
SELECT dsync_acquire('prep', 'w2', '1 minute', '10 milliseconds') IS NULL AS wait_ran_out;
PREPARE TRANSACTION 'dsync_prep_failed_wait';
COMMIT PREPARED 'dsync_prep_failed_wait';
SELECT dsync_release('prep', 'w1') AS released;

-- Ephemeral leases take effect at once and a rollback does not undo them,
-- but a grant, a renewal (by dsync_renew or a reentrant acquire) and a
-- release are changes of the transaction all the same: PREPARE refuses
-- them.  An ephemeral acquire that got nothing changed nothing.
SELECT dsync_acquire('prep-open', 'o', '1 second', '30 seconds', NULL, false) IS NOT NULL AS opened;
SELECT dsync_release('prep-open', 'o');
BEGIN;
SELECT dsync_acquire('prep-eph', 'w1', '2 seconds', durable => false) IS NOT NULL AS granted;
PREPARE TRANSACTION 'dsync_prep_eph_grant';
SELECT dsync_leader('prep-eph') AS kept_after_rollback;
BEGIN;
SELECT dsync_renew('prep-eph', 'w1') IS NOT NULL AS renewed;
PREPARE TRANSACTION 'dsync_prep_eph_renew';
BEGIN;
SELECT dsync_acquire('prep-eph', 'w1', '2 seconds', durable => false) IS NOT NULL AS regranted;
PREPARE TRANSACTION 'dsync_prep_eph_reentrant';
BEGIN;
SELECT dsync_acquire('prep-eph', 'w2', '2 seconds', durable => false) IS NULL AS refused;
PREPARE TRANSACTION 'dsync_prep_eph_refused';
COMMIT PREPARED 'dsync_prep_eph_refused';
BEGIN;
SELECT dsync_release('prep-eph', 'w1') AS released;
PREPARE TRANSACTION 'dsync_prep_eph_release';
SELECT dsync_leader('prep-eph') IS NULL AS released_after_rollback;
SELECT dsync_acquire('prep-eph', 'w1', '2 seconds', durable => false) IS NOT NULL AS granted;
BEGIN;
SELECT dsync_force_release('prep-eph') AS forced;
PREPARE TRANSACTION 'dsync_prep_eph_force';
SELECT dsync_leader('prep-eph') IS NULL AS forced_after_rollback;

-- a queued waiter's claim whose try of the grant got nothing (the name is
-- held) changed nothing
SELECT dsync_acquire('prep-q', 'h', '1 minute') IS NOT NULL AS held;
SELECT dsync_queue('prep-q', 'q', '1 minute') IS NULL AS queued;
BEGIN;
SELECT state FROM dsync_claim('prep-q', 'q');
PREPARE TRANSACTION 'dsync_prep_claim';
COMMIT PREPARED 'dsync_prep_claim';
SELECT dsync_release('prep-q', 'h');
SELECT state FROM dsync_claim('prep-q', 'q');
SELECT dsync_release('prep-q', 'q');
SELECT count(*) AS prepared_left FROM pg_prepared_xacts WHERE gid LIKE 'dsync\_prep%';
