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
