-- One-to-one events: set, wait, clear, is_set.
CREATE EXTENSION IF NOT EXISTS dsync;

SELECT dsync_event_is_set('jobs') AS pending_at_start;
SELECT dsync_event_wait('jobs', '0') AS nothing_to_consume;
SELECT dsync_event_wait('jobs', '10 milliseconds') AS timed_out;

-- each signal is consumed exactly once
SELECT dsync_event_set('jobs');
SELECT dsync_event_set('jobs');
SELECT dsync_event_is_set('jobs') AS pending;
SELECT dsync_event_wait('jobs') AS first;
SELECT dsync_event_wait('jobs', '1 second') AS second;
SELECT dsync_event_wait('jobs', '0') AS third;
SELECT dsync_event_is_set('jobs') AS pending_after;

-- transactional: a rolled-back set never happened
BEGIN;
SELECT dsync_event_set('jobs');
SELECT dsync_event_is_set('jobs') AS pending_inside;
ROLLBACK;
SELECT dsync_event_is_set('jobs') AS pending_after_rollback;

-- a rolled-back wait gives its signal back
SELECT dsync_event_set('jobs');
BEGIN;
SELECT dsync_event_wait('jobs', '0') AS consumed_inside;
ROLLBACK;
SELECT dsync_event_is_set('jobs') AS given_back;

-- and so does a rolled-back savepoint
BEGIN;
SAVEPOINT s;
SELECT dsync_event_wait('jobs', '0') AS consumed_in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT dsync_event_wait('jobs', '0') AS consumed_again;
COMMIT;

-- clear drops every pending signal and says how many
SELECT dsync_event_set('jobs') FROM generate_series(1, 3);
SELECT dsync_event_clear('jobs') AS cleared;
SELECT dsync_event_clear('jobs') AS cleared_again;
SELECT dsync_event_is_set('jobs') AS pending_after_clear;

-- an event and a lease of the same name are independent
SELECT dsync_acquire('jobs', 'w1') IS NOT NULL AS lease_taken;
SELECT dsync_event_set('jobs');
SELECT dsync_event_wait('jobs', '0') AS consumed;
SELECT dsync_release('jobs', 'w1') AS released;

-- bad input
SELECT regress_err($$SELECT dsync_event_set(NULL)$$);
SELECT regress_err($$SELECT dsync_event_set('')$$);
SELECT regress_err($$SELECT dsync_event_wait(repeat('e', 256))$$);
SELECT regress_err($$SELECT dsync_event_wait('jobs', '-1 second')$$);
SELECT regress_err($$SELECT dsync_event_clear(NULL)$$);
SELECT regress_err($$SELECT dsync_event_is_set('')$$);

-- a signal belongs to the role that set it: another role can neither
-- consume nor clear it (nor see it pending); a member of that role can
SET ROLE regress_sig_a;
SELECT dsync_event_set('owned-signal');
SET ROLE regress_sig_b;
SELECT dsync_event_is_set('owned-signal') AS b_sees_a_signal;
SELECT dsync_event_wait('owned-signal', '20 milliseconds') AS b_consumed;
SELECT dsync_event_clear('owned-signal') AS b_cleared;
SELECT dsync_event_set('owned-signal');
SET ROLE regress_sig_a;
SELECT dsync_event_is_set('owned-signal') AS a_sees_own;
SELECT dsync_event_wait('owned-signal', '0') AS a_consumed;
SELECT dsync_event_wait('owned-signal', '0') AS a_consumed_b_signal;
SET ROLE regress_sig_b;
SELECT dsync_event_clear('owned-signal') AS b_clears_own;
RESET ROLE;

-- setting, waiting and clearing need no privilege on dsync's sequence
SELECT has_sequence_privilege('dsync_signal_seq', 'USAGE') AS tester_may_use_sequence;

-- a transaction that set or consumed a signal cannot be prepared
BEGIN;
SELECT dsync_event_set('prep-signal');
PREPARE TRANSACTION 'dsync_prep_signal';
SELECT dsync_event_is_set('prep-signal') AS prepare_rolled_back;

-- nobody writes the signals table directly
SELECT has_table_privilege('public', 'dsync_signal', 'INSERT') AS public_can_insert;
