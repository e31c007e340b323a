-- The first test: makes what the others need, so that `make installcheck`
-- passes on its own on any server with dsync preloaded, as PGXS, PGXN's
-- tools and Debian's pg_buildext run it (as a superuser).  The others then
-- act as dsync_tester, a role that is neither superuser nor the
-- extension's owner, through this database's default role.  test/regress.sh
-- also runs them logged in as dsync_tester; this file then finds everything
-- made and does nothing, and prints the same.
SET client_min_messages = warning;
SELECT rolsuper AS is_superuser FROM pg_roles WHERE rolname = current_user \gset
\if :is_superuser
DO $$
DECLARE
	r text;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'dsync_tester') THEN
		CREATE ROLE dsync_tester LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
	END IF;
	-- Roles the tests act as with SET ROLE (ownership between roles).
	FOREACH r IN ARRAY ARRAY['regress_dsync_alice', 'regress_dsync_bob',
							 'regress_dsync_admin', 'regress_sem_other',
							 'regress_member_other', 'regress_sig_a', 'regress_sig_b']
	LOOP
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
			EXECUTE format('CREATE ROLE %I', r);
		END IF;
	END LOOP;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'regress_dsync_carol') THEN
		CREATE ROLE regress_dsync_carol IN ROLE regress_dsync_alice;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'regress_dsync_dave') THEN
		CREATE ROLE regress_dsync_dave NOINHERIT IN ROLE regress_dsync_alice;
	END IF;
END $$;
GRANT regress_dsync_alice, regress_dsync_bob, regress_dsync_carol, regress_dsync_dave,
	regress_dsync_admin, regress_sem_other, regress_member_other, regress_sig_a,
	regress_sig_b TO dsync_tester;

-- What an application role gets: a schema to work in, a database to make
-- schemas in (the search_path tests), and the administrative functions an
-- administrator chose to grant it (tests pass them on with SET ROLE).
GRANT CREATE, USAGE ON SCHEMA public TO dsync_tester;
DO $$ BEGIN
	EXECUTE format('GRANT CREATE ON DATABASE %I TO dsync_tester', current_database());
END $$;
GRANT EXECUTE ON FUNCTION dsync_force_release(text, text),
	dsync_force_release(text, text, boolean), dsync_reap(), dsync_stats_reset(),
	dsync_fence_bind(text, text), dsync_fence_unbind(text)
	TO dsync_tester WITH GRANT OPTION;

-- regress_err(q) runs q and shows its SQLSTATE and message instead of
-- failing, so that one file can show many errors.  It runs with the
-- caller's rights (SECURITY INVOKER).
CREATE OR REPLACE FUNCTION regress_err(q text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
	EXECUTE q;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $f$;

-- dsync.max_ttl is for superusers to set; the range checks of ttl are
-- shown without that cap, through this administrator's function (the
-- setting lasts until the end of the caller's transaction).
CREATE OR REPLACE FUNCTION regress_set_max_ttl(value text) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
	SELECT set_config('dsync.max_ttl', value, true);
$f$;
REVOKE ALL ON FUNCTION regress_set_max_ttl(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION regress_set_max_ttl(text) TO dsync_tester;

-- A foreign server with no handler: foreign tables can be made (fenced
-- and dropped) but not read, which is all the fence tests need.
DO $$ BEGIN
	IF NOT EXISTS (SELECT FROM pg_foreign_data_wrapper WHERE fdwname = 'regress_dsync_fdw') THEN
		CREATE FOREIGN DATA WRAPPER regress_dsync_fdw;
	END IF;
END $$;
CREATE SERVER IF NOT EXISTS regress_dsync_server FOREIGN DATA WRAPPER regress_dsync_fdw;
GRANT USAGE ON FOREIGN SERVER regress_dsync_server TO dsync_tester;

-- Every later connection to this database acts as dsync_tester, and
-- RESET ROLE returns to it.
DO $$ BEGIN
	EXECUTE format('ALTER DATABASE %I SET role = dsync_tester', current_database());
END $$;
\endif
-- What the other tests rely on, whoever ran this.
SELECT count(*) AS roles FROM pg_roles
 WHERE rolname = 'dsync_tester' OR rolname LIKE 'regress\_dsync\_%'
	OR rolname IN ('regress_sem_other', 'regress_member_other', 'regress_sig_a', 'regress_sig_b');
SELECT to_regprocedure('regress_err(text)') IS NOT NULL AS has_err,
	   to_regprocedure('regress_set_max_ttl(text)') IS NOT NULL AS has_max_ttl;
