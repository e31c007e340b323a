-- Ownership, table privileges and search_path safety.  The suite runs as
-- dsync_tester, an ordinary login role; the roles below were made by the
-- administrator (test/tester.sql) and the tester may SET ROLE to them.
-- carol is an inheriting member of alice, dave a NOINHERIT one.
CREATE EXTENSION IF NOT EXISTS dsync;
SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user;
SELECT current_user <> (SELECT r.rolname FROM pg_extension e JOIN pg_roles r ON r.oid = e.extowner
						 WHERE e.extname = 'dsync') AS tester_is_not_extension_owner;

GRANT EXECUTE ON FUNCTION dsync_force_release(text, text) TO regress_dsync_admin;

-- alice acquires: she owns the lease
SET ROLE regress_dsync_alice;
SELECT dsync_acquire('owned', 'h', '1 hour') IS NOT NULL AS alice_granted;
SELECT lease, holder, owner FROM dsync_leases WHERE lease = 'owned';

-- bob uses the right holder string but is not a member of alice
SET ROLE regress_dsync_bob;
SELECT dsync_acquire('owned', 'h') IS NULL AS bob_acquire_refused;
SELECT dsync_renew('owned', 'h') IS NULL AS bob_renew_null;
SELECT dsync_release('owned', 'h') AS bob_release;
SELECT regress_err($$SELECT dsync_assert_held('owned', 'h')$$);
-- bob can read the view and the leader
SELECT dsync_leader('owned') AS leader_seen_by_bob;
-- but cannot touch the tables or the sequence directly
SELECT regress_err($$SELECT * FROM dsync_lease$$);
SELECT regress_err($$INSERT INTO dsync_lease (name, slot, holder) VALUES ('owned', 1, 'h')$$);
SELECT regress_err($$UPDATE dsync_lease SET holder = 'bob'$$);
SELECT regress_err($$DELETE FROM dsync_lease$$);
SELECT regress_err($$TRUNCATE dsync_lease$$);
SELECT regress_err($$SELECT nextval('dsync_fencing_seq')$$);
SELECT regress_err($$SELECT setval('dsync_fencing_seq', 1)$$);
SELECT regress_err($$SELECT nextval('dsync_signal_seq')$$);
SELECT regress_err($$SELECT nextval('dsync_event_seq')$$);
SELECT regress_err($$SELECT setval('dsync_event_pruned', 0)$$);
SELECT regress_err($$SELECT * FROM dsync_lease_scan$$);
SELECT regress_err($$INSERT INTO dsync_permit (name, slot) VALUES ('owned', 1)$$);
SELECT regress_err($$DELETE FROM dsync_signal$$);
SELECT regress_err($$DELETE FROM dsync_member$$);
SELECT regress_err($$DELETE FROM dsync_semaphore$$);
-- but every role reads the views
SELECT count(*) >= 0 AS stats_readable FROM dsync_stats;
SELECT count(*) >= 0 AS waiters_readable FROM dsync_waiters;
-- nor force a release
SELECT regress_err($$SELECT dsync_force_release('owned')$$);
SELECT regress_err($$SELECT dsync_force_release('owned', NULL, true)$$);
SELECT regress_err($$SELECT dsync_reap()$$);
SELECT regress_err($$SELECT dsync_stats_reset()$$);

-- dave is a NOINHERIT member: he must SET ROLE alice to act for her
SET ROLE regress_dsync_dave;
SELECT dsync_renew('owned', 'h') IS NULL AS dave_renew_null;
SET ROLE regress_dsync_alice;
SELECT dsync_renew('owned', 'h') IS NOT NULL AS dave_as_alice_renews;

-- carol inherits alice's privileges: she can act on alice's lease
SET ROLE regress_dsync_carol;
SELECT dsync_acquire('owned', 'h') IS NOT NULL AS carol_reentrant;
SELECT dsync_renew('owned', 'h') IS NOT NULL AS carol_renews;
SELECT dsync_assert_held('owned', 'h') IS NOT NULL AS carol_guards;
SELECT dsync_release('owned', 'h') AS carol_releases;

-- an administrator granted force_release can release anybody's lease
SET ROLE regress_dsync_bob;
SELECT dsync_acquire('bobs', 'b', '1 hour') IS NOT NULL AS bob_granted;
SET ROLE regress_dsync_admin;
SELECT dsync_force_release('bobs') AS admin_forced;
RESET ROLE;

-- search_path tricks: look-alike objects earlier in the path change nothing
CREATE SCHEMA regress_evil;
CREATE TABLE regress_evil.dsync_lease (name text, slot integer, holder text, fencing bigint,
	acquired_at timestamptz, renewed_at timestamptz, expires_at timestamptz, ttl interval,
	info jsonb, owner oid);
CREATE SEQUENCE regress_evil.dsync_fencing_seq START 100000000000000000;
CREATE FUNCTION regress_evil.clock_timestamp() RETURNS timestamptz
	LANGUAGE sql AS $$ SELECT '1970-01-01'::timestamptz $$;
CREATE FUNCTION regress_evil.pg_get_userbyid(oid) RETURNS name
	LANGUAGE sql AS $$ SELECT 'evil'::name $$;
GRANT ALL ON SCHEMA regress_evil TO PUBLIC;
GRANT ALL ON ALL TABLES IN SCHEMA regress_evil TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA regress_evil TO PUBLIC;
SET ROLE regress_dsync_bob;
SET search_path = regress_evil, public, pg_catalog;
SELECT public.dsync_acquire('path', 'h', '1 hour') < 100000000000000000 AS token_from_real_sequence;
SELECT count(*) AS evil_rows FROM regress_evil.dsync_lease;
SELECT lease, holder, owner FROM public.dsync_leases WHERE lease = 'path';
SELECT public.dsync_release('path', 'h') AS released_through_real_table;
RESET search_path;
RESET ROLE;

DROP SCHEMA regress_evil CASCADE;
REVOKE EXECUTE ON FUNCTION dsync_force_release(text, text) FROM regress_dsync_admin;
SELECT dsync_force_release('owned') + dsync_force_release('bobs') AS cleaned;
SELECT count(*) AS leases_left FROM dsync_leases;
