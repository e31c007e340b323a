-- pgTAP: the shape of the SQL interface (API.md is the contract): which
-- functions exist with which argument and return types, the tables' keys
-- and column types, who may execute or select what, and which objects the
-- extension owns.  pg_regress checks behaviour and errors (sql/); this
-- checks the catalogs, one named assertion per promise, independent of how
-- psql prints them, so that a changed signature or privilege fails by name.
SET client_min_messages = warning;
BEGIN;
CREATE EXTENSION IF NOT EXISTS dsync;
SELECT plan(190);

-- functions, argument types and return types
SELECT has_function('dsync_acquire', ARRAY['text', 'text', 'interval', 'interval', 'jsonb', 'boolean', 'boolean']);
SELECT function_returns('dsync_acquire', ARRAY['text', 'text', 'interval', 'interval', 'jsonb', 'boolean', 'boolean'], 'bigint');
SELECT has_function('dsync_renew', ARRAY['text', 'text', 'interval']);
SELECT function_returns('dsync_renew', ARRAY['text', 'text', 'interval'], 'timestamp with time zone');
SELECT has_function('dsync_release', ARRAY['text', 'text']);
SELECT function_returns('dsync_release', ARRAY['text', 'text'], 'boolean');
SELECT has_function('dsync_leader', ARRAY['text']);
SELECT function_returns('dsync_leader', ARRAY['text'], 'text');
SELECT has_function('dsync_assert_held', ARRAY['text', 'text']);
SELECT function_returns('dsync_assert_held', ARRAY['text', 'text'], 'bigint');
SELECT has_function('dsync_force_release', ARRAY['text', 'text']);
SELECT function_returns('dsync_force_release', ARRAY['text', 'text'], 'integer');
SELECT has_function('dsync_channel', ARRAY['text']);
SELECT has_function('dsync_reap', ARRAY[]::text[]);
SELECT function_returns('dsync_reap', ARRAY[]::text[], 'bigint');
SELECT function_privs_are('dsync_reap', ARRAY[]::text[], 'public', ARRAY[]::text[]);
SELECT ok(dsync_reap() >= 0, 'dsync_reap runs a pass for a superuser');
SELECT function_returns('dsync_channel', ARRAY['text'], 'text');

-- semaphores, events (one-to-one signals) and group membership
SELECT has_function('dsync_semaphore_create', ARRAY['text', 'integer']);
SELECT function_returns('dsync_semaphore_create', ARRAY['text', 'integer'], 'boolean');
SELECT has_function('dsync_semaphore_drop', ARRAY['text']);
SELECT function_returns('dsync_semaphore_drop', ARRAY['text'], 'boolean');
SELECT has_function('dsync_event_set', ARRAY['text']);
SELECT function_returns('dsync_event_set', ARRAY['text'], 'void');
SELECT has_function('dsync_event_wait', ARRAY['text', 'interval']);
SELECT function_returns('dsync_event_wait', ARRAY['text', 'interval'], 'boolean');
SELECT has_function('dsync_event_clear', ARRAY['text']);
SELECT function_returns('dsync_event_clear', ARRAY['text'], 'bigint');
SELECT has_function('dsync_event_is_set', ARRAY['text']);
SELECT function_returns('dsync_event_is_set', ARRAY['text'], 'boolean');
SELECT has_function('dsync_join', ARRAY['text', 'text', 'interval', 'jsonb']);
SELECT function_returns('dsync_join', ARRAY['text', 'text', 'interval', 'jsonb'], 'timestamp with time zone');
SELECT has_function('dsync_leave', ARRAY['text', 'text']);
SELECT function_returns('dsync_leave', ARRAY['text', 'text'], 'boolean');
SELECT has_function('dsync_members', ARRAY['text']);
SELECT function_returns('dsync_members', ARRAY['text'], 'setof record');
SELECT is(pg_get_function_result('dsync_members(text)'::regprocedure),
	'TABLE(member text, info jsonb, joined_at timestamp with time zone, expires_at timestamp with time zone, is_leader boolean)',
	'dsync_members returns TABLE(member, info, joined_at, expires_at, is_leader)');

-- storage-side fencing and the event log (1.4)
SELECT has_function('dsync_fence', ARRAY['text', 'bigint']);
SELECT function_returns('dsync_fence', ARRAY['text', 'bigint'], 'bigint');
SELECT is(pg_get_function_arguments('dsync_fence(text,bigint)'::regprocedure),
	'resource text, token bigint', 'dsync_fence arguments');
SELECT has_function('dsync_fenced', ARRAY[]::text[]);
SELECT function_returns('dsync_fenced', ARRAY[]::text[], 'trigger');
SELECT has_function('dsync_events_since', ARRAY['bigint', 'text[]']);
SELECT is(pg_get_function_result('dsync_events_since(bigint,text[])'::regprocedure),
	'TABLE(seq bigint, channel text, payload jsonb, sent_at timestamp with time zone)',
	'dsync_events_since returns TABLE(seq, channel, payload, sent_at)');
SELECT is(pg_get_function_arguments('dsync_events_since(bigint,text[])'::regprocedure),
	'after bigint, names text[] DEFAULT NULL::text[]', 'dsync_events_since arguments and defaults');
SELECT has_function('dsync_acquire_all', ARRAY['text[]', 'text', 'interval', 'interval', 'jsonb']);
SELECT function_returns('dsync_acquire_all', ARRAY['text[]', 'text', 'interval', 'interval', 'jsonb'], 'bigint[]');
SELECT is(pg_get_function_arguments('dsync_acquire_all(text[],text,interval,interval,jsonb)'::regprocedure),
	'leases text[], holder text, ttl interval DEFAULT ''00:00:30''::interval, wait interval DEFAULT ''00:00:00''::interval, info jsonb DEFAULT NULL::jsonb',
	'dsync_acquire_all arguments and defaults');
SELECT function_privs_are('dsync_acquire_all', ARRAY['text[]', 'text', 'interval', 'interval', 'jsonb'], 'public', ARRAY['EXECUTE']);
SELECT has_function('dsync_acquire_shared', ARRAY['text', 'text', 'interval', 'interval', 'jsonb', 'boolean']);
SELECT function_returns('dsync_acquire_shared', ARRAY['text', 'text', 'interval', 'interval', 'jsonb', 'boolean'], 'bigint');
SELECT is(pg_get_function_arguments('dsync_acquire_shared(text,text,interval,interval,jsonb,boolean)'::regprocedure),
	'lease text, holder text, ttl interval DEFAULT ''00:00:30''::interval, wait interval DEFAULT ''00:00:00''::interval, info jsonb DEFAULT NULL::jsonb, session boolean DEFAULT false',
	'dsync_acquire_shared arguments and defaults');
SELECT function_privs_are('dsync_acquire_shared', ARRAY['text', 'text', 'interval', 'interval', 'jsonb', 'boolean'], 'public', ARRAY['EXECUTE']);
SELECT volatility_is('dsync_acquire_shared', ARRAY['text', 'text', 'interval', 'interval', 'jsonb', 'boolean'], 'volatile');
SELECT has_function('dsync_events_horizon', ARRAY[]::text[]);
SELECT function_returns('dsync_events_horizon', ARRAY[]::text[], 'bigint');
SELECT volatility_is('dsync_fence', ARRAY['text', 'bigint'], 'volatile');
SELECT function_privs_are('dsync_fence', ARRAY['text', 'bigint'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_events_since', ARRAY['bigint', 'text[]'], 'public', ARRAY['EXECUTE']);
SELECT table_privs_are('dsync_fence', 'public', ARRAY[]::text[]);
SELECT table_privs_are('dsync_fences', 'public', ARRAY['SELECT']);
SELECT table_privs_are('dsync_event_log', 'public', ARRAY['SELECT']);
SELECT col_is_pk('dsync_fence', ARRAY['resource']);
SELECT col_is_pk('dsync_event_log', ARRAY['seq']);
SELECT table_privs_are('dsync_session', 'public', ARRAY[]::text[]);
SELECT columns_are('dsync_fences', ARRAY['resource', 'token', 'fenced_at', 'owner', 'lease']);
-- fences raised by grants (1.5)
SELECT has_function('dsync_fence_bind', ARRAY['text', 'text']);
SELECT function_returns('dsync_fence_bind', ARRAY['text', 'text'], 'boolean');
SELECT is(pg_get_function_arguments('dsync_fence_bind(text,text)'::regprocedure),
	'resource text, lease text', 'dsync_fence_bind arguments');
SELECT has_function('dsync_fence_unbind', ARRAY['text']);
SELECT function_returns('dsync_fence_unbind', ARRAY['text'], 'boolean');
SELECT is(pg_get_function_arguments('dsync_fence_unbind(text)'::regprocedure),
	'resource text', 'dsync_fence_unbind arguments');
SELECT function_privs_are('dsync_fence_bind', ARRAY['text', 'text'], 'public', ARRAY[]::text[]);
SELECT function_privs_are('dsync_fence_unbind', ARRAY['text'], 'public', ARRAY[]::text[]);
SELECT volatility_is('dsync_fence_bind', ARRAY['text', 'text'], 'volatile');
SELECT volatility_is('dsync_fence_unbind', ARRAY['text'], 'volatile');
SELECT function_privs_are('dsync_fence_restored', ARRAY[]::text[], 'public', ARRAY[]::text[]);
SELECT has_index('dsync_fence', 'dsync_fence_lease', ARRAY['lease']);
SELECT ok((SELECT count(*) = 1 FROM pg_extension e, unnest(e.extconfig) c
			WHERE e.extname = 'dsync' AND c = 'dsync_fence'::regclass),
	'fence marks are dumped by pg_dump');

-- argument names, order and defaults
SELECT is(pg_get_function_arguments('dsync_acquire(text,text,interval,interval,jsonb,boolean,boolean)'::regprocedure),
	'lease text, holder text, ttl interval DEFAULT ''00:00:30''::interval, wait interval DEFAULT ''00:00:00''::interval, info jsonb DEFAULT NULL::jsonb, durable boolean DEFAULT true, session boolean DEFAULT false',
	'dsync_acquire arguments and defaults');
SELECT is(pg_get_function_arguments('dsync_renew(text,text,interval)'::regprocedure),
	'lease text, holder text, ttl interval DEFAULT NULL::interval',
	'dsync_renew arguments and defaults');
SELECT is(pg_get_function_arguments('dsync_release(text,text)'::regprocedure),
	'lease text, holder text', 'dsync_release arguments');
SELECT is(pg_get_function_arguments('dsync_leader(text)'::regprocedure),
	'lease text', 'dsync_leader arguments');
SELECT is(pg_get_function_arguments('dsync_assert_held(text,text)'::regprocedure),
	'lease text, holder text', 'dsync_assert_held arguments');
SELECT is(pg_get_function_arguments('dsync_force_release(text,text)'::regprocedure),
	'lease text, holder text DEFAULT NULL::text', 'dsync_force_release arguments and defaults');
SELECT is(pg_get_function_arguments('dsync_channel(text)'::regprocedure),
	'name text', 'dsync_channel arguments');
SELECT is(pg_get_function_arguments('dsync_semaphore_create(text,integer)'::regprocedure),
	'name text, permits integer', 'dsync_semaphore_create arguments');
SELECT is(pg_get_function_arguments('dsync_semaphore_drop(text)'::regprocedure),
	'name text', 'dsync_semaphore_drop arguments');
SELECT is(pg_get_function_arguments('dsync_event_set(text)'::regprocedure),
	'name text', 'dsync_event_set arguments');
SELECT is(pg_get_function_arguments('dsync_event_wait(text,interval)'::regprocedure),
	'name text, timeout interval DEFAULT NULL::interval',
	'dsync_event_wait arguments and defaults');
SELECT is(pg_get_function_arguments('dsync_event_clear(text)'::regprocedure),
	'name text', 'dsync_event_clear arguments');
SELECT is(pg_get_function_arguments('dsync_event_is_set(text)'::regprocedure),
	'name text', 'dsync_event_is_set arguments');
SELECT is(pg_get_function_arguments('dsync_join(text,text,interval,jsonb)'::regprocedure),
	'grp text, member text, ttl interval DEFAULT ''00:00:30''::interval, info jsonb DEFAULT NULL::jsonb',
	'dsync_join arguments and defaults');
SELECT is(pg_get_function_arguments('dsync_leave(text,text)'::regprocedure),
	'grp text, member text', 'dsync_leave arguments');
SELECT is(pg_get_function_arguments('dsync_members(text)'::regprocedure),
	'grp text', 'dsync_members arguments');

-- the defaults behave as documented: 30 s ttl, no wait
SELECT ok(dsync_acquire('api-defaults', 'h') IS NOT NULL, 'acquire with defaults grants');
SELECT ok((SELECT ttl = interval '30 seconds' FROM dsync_leases WHERE lease = 'api-defaults'),
	'default ttl is 30 seconds');
SELECT ok(dsync_force_release('api-defaults') = 1, 'force_release holder defaults to everybody');
SELECT ok(dsync_join('api-group', 'm') BETWEEN now() + interval '30 seconds'
								   AND clock_timestamp() + interval '30 seconds',
	'join with defaults: the membership lasts 30 seconds');
SELECT is((SELECT info FROM dsync_members('api-group') WHERE member = 'm'), NULL::jsonb,
	'join with defaults: no info');

-- state-changing functions are volatile and parallel unsafe
SELECT volatility_is('dsync_acquire', ARRAY['text', 'text', 'interval', 'interval', 'jsonb', 'boolean', 'boolean'], 'volatile');
SELECT volatility_is('dsync_renew', ARRAY['text', 'text', 'interval'], 'volatile');
SELECT volatility_is('dsync_release', ARRAY['text', 'text'], 'volatile');
SELECT volatility_is('dsync_assert_held', ARRAY['text', 'text'], 'volatile');
SELECT volatility_is('dsync_force_release', ARRAY['text', 'text'], 'volatile');
SELECT is((SELECT array_agg(DISTINCT proparallel) FROM pg_proc
			WHERE proname IN ('dsync_acquire', 'dsync_renew', 'dsync_release',
							  'dsync_assert_held', 'dsync_force_release')),
	ARRAY['u']::"char"[], 'state-changing functions are PARALLEL UNSAFE');
SELECT volatility_is('dsync_channel', ARRAY['text'], 'immutable');
SELECT is((SELECT array_agg(DISTINCT provolatile) FROM pg_proc
			WHERE proname IN ('dsync_semaphore_create', 'dsync_semaphore_drop',
							  'dsync_event_set', 'dsync_event_wait', 'dsync_event_clear',
							  'dsync_event_is_set', 'dsync_join', 'dsync_leave',
							  'dsync_members')),
	ARRAY['v']::"char"[], 'semaphore, event and membership functions are VOLATILE');
SELECT is((SELECT array_agg(DISTINCT proparallel) FROM pg_proc
			WHERE proname IN ('dsync_semaphore_create', 'dsync_semaphore_drop',
							  'dsync_event_set', 'dsync_event_wait', 'dsync_event_clear',
							  'dsync_event_is_set', 'dsync_join', 'dsync_leave',
							  'dsync_members')),
	ARRAY['u']::"char"[], 'semaphore, event and membership functions are PARALLEL UNSAFE');
-- none is STRICT: NULL arguments are errors that name the argument
SELECT is((SELECT count(*) FROM pg_proc WHERE proname LIKE 'dsync\_%' AND proisstrict
			AND prorettype <> 'fdw_handler'::regtype), 0::bigint,
	'no dsync function is STRICT (but its FDW handler)');
SELECT is((SELECT count(*) FROM pg_proc WHERE proname LIKE 'dsync\_%' AND prosecdef), 0::bigint,
	'no dsync function is SECURITY DEFINER');

-- privileges: everything for PUBLIC but force_release
SELECT function_privs_are('dsync_acquire', ARRAY['text', 'text', 'interval', 'interval', 'jsonb', 'boolean', 'boolean'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_renew', ARRAY['text', 'text', 'interval'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_release', ARRAY['text', 'text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_leader', ARRAY['text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_assert_held', ARRAY['text', 'text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_channel', ARRAY['text'], 'public', ARRAY['EXECUTE']);
SELECT table_privs_are('dsync_lease_scan', 'public', ARRAY[]::text[]);
SELECT function_privs_are('dsync_force_release', ARRAY['text', 'text'], 'public', ARRAY[]::text[]);
SELECT function_privs_are('dsync_force_release', ARRAY['text', 'text', 'boolean'], 'public', ARRAY[]::text[]);
SELECT function_privs_are('dsync_stats_reset', ARRAY[]::text[], 'public', ARRAY[]::text[]);
SELECT table_privs_are('dsync_stats', 'public', ARRAY['SELECT']);
SELECT table_privs_are('dsync_permit', 'public', ARRAY[]::text[]);
SELECT sequence_privs_are('dsync_event_seq', 'public', ARRAY['SELECT']);
SELECT sequence_privs_are('dsync_event_pruned', 'public', ARRAY['SELECT']);
SELECT table_privs_are('dsync_lease', 'public', ARRAY[]::text[]);
SELECT sequence_privs_are('dsync_fencing_seq', 'public', ARRAY[]::text[]);
SELECT table_privs_are('dsync_leases', 'public', ARRAY['SELECT']);
SELECT function_privs_are('dsync_semaphore_create', ARRAY['text', 'integer'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_semaphore_drop', ARRAY['text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_event_set', ARRAY['text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_event_wait', ARRAY['text', 'interval'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_event_clear', ARRAY['text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_event_is_set', ARRAY['text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_join', ARRAY['text', 'text', 'interval', 'jsonb'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_leave', ARRAY['text', 'text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_members', ARRAY['text'], 'public', ARRAY['EXECUTE']);
SELECT table_privs_are('dsync_semaphore', 'public', ARRAY[]::text[]);
SELECT table_privs_are('dsync_signal', 'public', ARRAY[]::text[]);
SELECT table_privs_are('dsync_member', 'public', ARRAY[]::text[]);
SELECT sequence_privs_are('dsync_signal_seq', 'public', ARRAY[]::text[]);

-- the view
SELECT has_view('dsync_leases');
SELECT is((SELECT w.fdwname::text FROM pg_foreign_table ft
			  JOIN pg_foreign_server s ON s.oid = ft.ftserver
			  JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
			 WHERE ft.ftrelid = 'dsync_lease_scan'::regclass), 'dsync',
	'the view reads a foreign table served by dsync (latest committed state, no SIREAD locks, lookups by name)');
SELECT columns_are('dsync_leases', ARRAY['lease', 'holder', 'fencing', 'permits', 'acquired_at',
	'renewed_at', 'expires_at', 'ttl', 'info', 'owner', 'mode']);
SELECT col_type_is('dsync_leases', 'mode', 'text');
SELECT col_type_is('dsync_leases', 'fencing', 'bigint');
SELECT col_type_is('dsync_leases', 'expires_at', 'timestamp with time zone');
SELECT col_type_is('dsync_leases', 'ttl', 'interval');
SELECT col_type_is('dsync_leases', 'info', 'jsonb');

-- semaphore definitions, readable by every role (1.5)
SELECT has_view('dsync_semaphores');
SELECT columns_are('dsync_semaphores', ARRAY['name', 'permits', 'created_at', 'owner']);
SELECT col_type_is('dsync_semaphores', 'name', 'text');
SELECT col_type_is('dsync_semaphores', 'permits', 'integer');
SELECT col_type_is('dsync_semaphores', 'created_at', 'timestamp with time zone');
SELECT col_type_is('dsync_semaphores', 'owner', 'name');
SELECT table_privs_are('dsync_semaphores', 'public', ARRAY['SELECT']);

SELECT has_view('dsync_waiters');
SELECT columns_are('dsync_waiters', ARRAY['pid', 'kind', 'name', 'holder', 'since']);
SELECT table_privs_are('dsync_waiters', 'public', ARRAY['SELECT']);
SELECT function_privs_are('dsync_waiter_rows', ARRAY[]::text[], 'public', ARRAY['EXECUTE']);
-- waiting without a connection: everybody's, but the worker's pass
SELECT function_privs_are('dsync_queue', ARRAY['text', 'text', 'interval', 'text', 'boolean', 'boolean'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_queue_channel', ARRAY['text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_claim', ARRAY['text', 'text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_unqueue', ARRAY['text', 'text'], 'public', ARRAY['EXECUTE']);
SELECT function_privs_are('dsync_queue_pass', ARRAY[]::text[], 'public', ARRAY[]::text[]);

-- renewals stay HOT: the primary key is the table's only index
SELECT indexes_are('dsync_lease', ARRAY['dsync_lease_pkey']);
SELECT col_is_pk('dsync_lease', ARRAY['name', 'slot']);
SELECT ok((SELECT reloptions @> ARRAY['fillfactor=50'] FROM pg_class WHERE oid = 'dsync_lease'::regclass),
	'dsync_lease leaves room for HOT updates');
-- a semaphore's permits: a holder's permit and a free one are one probe away
SELECT indexes_are('dsync_permit', ARRAY['dsync_permit_pkey', 'dsync_permit_holder']);
SELECT col_is_pk('dsync_permit', ARRAY['name', 'slot']);
SELECT has_index('dsync_permit', 'dsync_permit_holder', ARRAY['name', 'holder', 'slot']);

-- who sends the events, and the counters
SELECT has_view('dsync_stats');
SELECT columns_are('dsync_stats', ARRAY['sender_pid', 'served', 'grants', 'renewals', 'releases',
	'expiries', 'waits', 'wait_timeouts', 'wait_time', 'events_sent', 'events_lost',
	'queue_used', 'queue_size', 'sender_pids']);
SELECT col_type_is('dsync_stats', 'sender_pids', 'integer[]');

-- which databases dsync serves
SELECT has_view('dsync_databases');
SELECT columns_are('dsync_databases', ARRAY['datname', 'state', 'served', 'worker_pid',
	'worker_since', 'next_deadline', 'queued_bytes']);
SELECT table_privs_are('dsync_databases', 'public', ARRAY['SELECT']);
SELECT is(pg_get_function_arguments('dsync_force_release(text,text,boolean)'::regprocedure),
	'lease text, holder text, cancel_waits boolean', 'dsync_force_release with cancel_waits');

-- the tables and sequence of semaphores, events and membership
SELECT has_table('dsync_semaphore');
SELECT col_is_pk('dsync_semaphore', ARRAY['name']);
SELECT has_table('dsync_signal');
SELECT col_is_pk('dsync_signal', ARRAY['name', 'seq']);
SELECT has_table('dsync_member');
SELECT col_is_pk('dsync_member', ARRAY['grp', 'member']);
SELECT has_sequence('dsync_signal_seq');
SELECT has_sequence('dsync_event_seq');
SELECT has_sequence('dsync_event_pruned');
SELECT has_sequence('dsync_ephemeral_seq');
SELECT sequence_privs_are('dsync_ephemeral_seq', 'public', ARRAY[]::text[]);

-- every object belongs to the extension (row types are left out: from
-- PostgreSQL 17 on, a relation's row type is a member of the extension too)
SELECT is((SELECT count(*) FROM pg_depend d JOIN pg_extension e ON d.refobjid = e.oid
			WHERE e.extname = 'dsync' AND d.deptype = 'e'
			  AND d.classid <> 'pg_type'::regclass), 59::bigint,
	'the extension owns its eight tables, foreign table, five sequences, six views, '
	'thirty-seven functions, foreign data wrapper and server');

SELECT * FROM finish();
ROLLBACK;
