-- Ownership, table privileges and search_path safety.
CREATE EXTENSION IF NOT EXISTS dsync;


CREATE ROLE regress_dsync_alice;
CREATE ROLE regress_dsync_bob;
CREATE ROLE regress_dsync_carol IN ROLE regress_dsync_alice;
CREATE ROLE regress_dsync_dave NOINHERIT IN ROLE regress_dsync_alice;
CREATE ROLE regress_dsync_admin;
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
-- nor force a release
SELECT regress_err($$SELECT dsync_force_release('owned')$$);

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
CREATE TABLE regress_evil.dsync_lease (LIKE dsync_lease);
CREATE SEQUENCE regress_evil.dsync_fencing_seq START 1000000000;
CREATE FUNCTION regress_evil.clock_timestamp() RETURNS timestamptz
	LANGUAGE sql AS $$ SELECT '1970-01-01'::timestamptz $$;
CREATE FUNCTION regress_evil.pg_get_userbyid(oid) RETURNS name
	LANGUAGE sql AS $$ SELECT 'evil'::name $$;
GRANT ALL ON SCHEMA regress_evil TO PUBLIC;
GRANT ALL ON ALL TABLES IN SCHEMA regress_evil TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA regress_evil TO PUBLIC;
SET ROLE regress_dsync_bob;
SET search_path = regress_evil, public, pg_catalog;
SELECT public.dsync_acquire('path', 'h', '1 hour') < 1000000000 AS token_from_real_sequence;
SELECT count(*) AS evil_rows FROM regress_evil.dsync_lease;
SELECT lease, holder, owner FROM public.dsync_leases WHERE lease = 'path';
SELECT public.dsync_release('path', 'h') AS released_through_real_table;
RESET search_path;
RESET ROLE;

DROP SCHEMA regress_evil CASCADE;
REVOKE EXECUTE ON FUNCTION dsync_force_release(text, text) FROM regress_dsync_admin;
DROP ROLE regress_dsync_alice, regress_dsync_bob, regress_dsync_carol,
	regress_dsync_dave, regress_dsync_admin;
SELECT count(*) AS leases_left FROM dsync_leases;
