-- Shared by the regression tests that follow: the extension, and
-- regress_err(q), which runs q and shows its SQLSTATE and message instead
-- of failing, so one test file can show many errors.
CREATE EXTENSION IF NOT EXISTS dsync;

CREATE FUNCTION regress_err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
