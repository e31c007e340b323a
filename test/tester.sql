-- Run by test/regress.sh as a superuser in each database the pg_regress and
-- isolation suites use, before they run.  The suites themselves connect as
-- dsync_tester: a login role that is neither superuser nor the extension's
-- owner, with only what an administrator would grant an application.
-- psql variable tester_password: the password of the throwaway cluster.
SET client_min_messages = warning;

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
ALTER ROLE dsync_tester PASSWORD :'tester_password';
GRANT regress_dsync_alice, regress_dsync_bob, regress_dsync_carol, regress_dsync_dave,
	regress_dsync_admin, regress_sem_other, regress_member_other, regress_sig_a,
	regress_sig_b TO dsync_tester;

CREATE EXTENSION dsync;

-- What an application role gets: a schema to work in, a database to make
-- schemas in (the search_path tests), and the administrative functions an
-- administrator chose to grant it (tests pass them on with SET ROLE).
GRANT CREATE, USAGE ON SCHEMA public TO dsync_tester;
GRANT CREATE ON DATABASE :"DBNAME" TO dsync_tester;
GRANT EXECUTE ON FUNCTION dsync_force_release(text, text),
	dsync_force_release(text, text, boolean), dsync_reap(), dsync_stats_reset()
	TO dsync_tester WITH GRANT OPTION;

-- Test isolation only: forget names between runs, so that a spec's "new"
-- name is new in every permutation.  The tester cannot write dsync's
-- tables; an administrator's function does it.
CREATE FUNCTION regress_forget(VARIADIC names text[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	DELETE FROM public.dsync_lease WHERE name = ANY (names);
	DELETE FROM public.dsync_permit WHERE name = ANY (names);
	DELETE FROM public.dsync_member WHERE grp = ANY (names);
	DELETE FROM public.dsync_signal WHERE name = ANY (names);
	DELETE FROM public.dsync_semaphore WHERE name = ANY (names);
$$;
REVOKE ALL ON FUNCTION regress_forget(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION regress_forget(text[]) TO dsync_tester;

-- Observing and tampering, as an administrator can (the tester cannot read
-- or write dsync's tables): how many rows a name has in one of them, a
-- semaphore's definition, and a holder cleared behind dsync's back (which
-- wakes nobody).
CREATE FUNCTION regress_rows(tbl text, nm text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	n bigint;
BEGIN
	IF tbl NOT IN ('dsync_lease', 'dsync_permit', 'dsync_signal', 'dsync_semaphore') THEN
		RAISE EXCEPTION 'not a dsync table: %', tbl;
	END IF;
	EXECUTE format('SELECT count(*) FROM public.%I WHERE name = $1', tbl) INTO n USING nm;
	RETURN n;
END $$;
CREATE FUNCTION regress_semaphore(nm text) RETURNS TABLE (name text, permits integer)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	SELECT s.name, s.permits FROM public.dsync_semaphore s WHERE s.name = nm;
$$;
CREATE FUNCTION regress_tamper_release(nm text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	UPDATE public.dsync_lease SET holder = NULL WHERE name = nm;
$$;
REVOKE ALL ON FUNCTION regress_rows(text, text), regress_semaphore(text),
	regress_tamper_release(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION regress_rows(text, text), regress_semaphore(text),
	regress_tamper_release(text) TO dsync_tester;

-- regress_err(q) runs q and shows its SQLSTATE and message instead of
-- failing, so that one pg_regress file can show many errors.  It runs
-- with the caller's rights (SECURITY INVOKER).
CREATE FUNCTION regress_err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- dsync.max_ttl is for superusers to set; the range checks of ttl are
-- shown without that cap, through this administrator's function (the
-- setting lasts until the end of the caller's transaction).
CREATE FUNCTION regress_set_max_ttl(value text) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	SELECT set_config('dsync.max_ttl', value, true);
$$;
REVOKE ALL ON FUNCTION regress_set_max_ttl(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION regress_set_max_ttl(text) TO dsync_tester;
