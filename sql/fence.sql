-- Storage-side fencing: dsync_fence() and the trigger dsync_fenced().
-- Runs as dsync_tester, an ordinary role (test/tester.sql).
CREATE EXTENSION IF NOT EXISTS dsync;

-- Only tokens this database has issued are accepted: grant one first.
SELECT dsync_acquire('reg_fence_issue', 'h') > 1000 AS issued;
SELECT dsync_release('reg_fence_issue', 'h');

-- The first token for a resource makes its mark; older tokens are refused,
-- equal and newer ones accepted, and the previous mark is returned.
SELECT dsync_fence('reg_fence', 5) AS prev_none;
SELECT dsync_fence('reg_fence', 7) AS prev_5;
SELECT dsync_fence('reg_fence', 7) AS prev_7;
SELECT regress_err($$SELECT dsync_fence('reg_fence', 6)$$);
SELECT resource, token, owner = current_user AS mine FROM dsync_fences WHERE resource = 'reg_fence';

-- Transactional: a rolled-back fence leaves the mark as it was.
BEGIN;
SELECT dsync_fence('reg_fence', 100) AS prev_7;
ROLLBACK;
SELECT token FROM dsync_fences WHERE resource = 'reg_fence';

-- A refused token aborts the caller's transaction, with its writes.
CREATE TABLE reg_fence_data (v int);
BEGIN;
INSERT INTO reg_fence_data VALUES (1);
SELECT dsync_fence('reg_fence', 3);
COMMIT;
SELECT count(*) AS rows_after_stale FROM reg_fence_data;

-- A token from dsync_acquire works as it is.
SELECT dsync_fence('reg_fence_acq', dsync_acquire('reg_fence_lease', 'h')) IS NULL AS first_mark;
SELECT dsync_release('reg_fence_lease', 'h');

-- Bad input.
SELECT regress_err($$SELECT dsync_fence(NULL, 1)$$);
SELECT regress_err($$SELECT dsync_fence('', 1)$$);
SELECT regress_err($$SELECT dsync_fence(repeat('x', 256), 1)$$);
SELECT regress_err($$SELECT dsync_fence('reg_fence', NULL)$$);
SELECT regress_err($$SELECT dsync_fence('reg_fence', 0)$$);
SELECT regress_err($$SELECT dsync_fence('reg_fence', -5)$$);

-- Ownership: bob may not move alice's mark; a member of alice may.
SET ROLE regress_dsync_alice;
SELECT dsync_fence('reg_fence_alice', 10) AS prev_none;
SET ROLE regress_dsync_bob;
SELECT regress_err($$SELECT dsync_fence('reg_fence_alice', 20)$$);
SET ROLE regress_dsync_carol;
SELECT dsync_fence('reg_fence_alice', 20) AS prev_10;
RESET ROLE;
SELECT resource, token, owner FROM dsync_fences WHERE resource = 'reg_fence_alice';

-- Nobody writes the table directly; everybody reads the view.
SELECT regress_err($$UPDATE dsync_fence SET token = 1$$);
SELECT regress_err($$DELETE FROM dsync_fence$$);
SELECT regress_err($$INSERT INTO dsync_fence VALUES ('x', 1, now(), 10)$$);

-- The trigger: every row written must carry a token no older than the
-- table's mark, which rises to it.
CREATE TABLE reg_account (id int PRIMARY KEY, balance int, token bigint);
CREATE TRIGGER reg_account_fenced BEFORE INSERT OR UPDATE ON reg_account
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO reg_account VALUES (1, 100, 40);
UPDATE reg_account SET balance = 90, token = 41 WHERE id = 1;
SELECT regress_err($$UPDATE reg_account SET balance = 0, token = 40 WHERE id = 1$$);
SELECT regress_err($$INSERT INTO reg_account VALUES (2, 5, 39)$$);
SELECT regress_err($$INSERT INTO reg_account VALUES (2, 5, NULL)$$);
INSERT INTO reg_account SELECT g, 0, 41 FROM generate_series(2, 200) g;
SELECT count(*), max(token) FROM reg_account;
SELECT resource, token FROM dsync_fences WHERE resource = 'table:public.reg_account';
-- Deletes carry no token and are not fenced.
DELETE FROM reg_account WHERE id = 200;
-- The table's mark and a direct fence of the same name are one mark.
SELECT regress_err($$SELECT dsync_fence('table:public.reg_account', 30)$$);

-- A role that may write the table moves its mark, whoever made it.
GRANT SELECT, INSERT, UPDATE ON reg_account TO regress_dsync_bob;
SET ROLE regress_dsync_bob;
UPDATE reg_account SET token = 50 WHERE id = 1;
RESET ROLE;
SELECT token FROM dsync_fences WHERE resource = 'table:public.reg_account';
-- And may move it directly, to guard a delete; a role that may not write
-- the table may not, nor poison it through a name of its own.
SET ROLE regress_dsync_bob;
SELECT dsync_fence('table:public.reg_account', 60) AS prev_50;
-- However the table is spelled, it is the table's one mark.
SELECT dsync_fence('table:reg_account', 60) AS prev_60;
SELECT regress_err($$SELECT dsync_fence('table:"public"."reg_account"', 55)$$);
SET ROLE regress_dsync_alice;
SELECT regress_err($$SELECT dsync_fence('table:public.reg_account', 1000)$$);
SELECT dsync_fence('public.reg_account', 1000) IS NULL AS a_mark_of_its_own;
RESET ROLE;
UPDATE reg_account SET token = 60 WHERE id = 1;
SELECT regress_err($$SELECT dsync_fence('table:public.no_such_table', 1)$$);
SELECT resource, token FROM dsync_fences WHERE resource LIKE '%reg_account' ORDER BY 1;

-- A partitioned table: every partition's writers share the root's mark.
CREATE TABLE reg_part (month int, v int, token bigint) PARTITION BY LIST (month);
CREATE TABLE reg_part_1 PARTITION OF reg_part FOR VALUES IN (1);
CREATE TABLE reg_part_2 PARTITION OF reg_part FOR VALUES IN (2);
CREATE TRIGGER reg_part_fenced BEFORE INSERT OR UPDATE ON reg_part
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO reg_part VALUES (1, 1, 70);
SELECT regress_err($$INSERT INTO reg_part VALUES (2, 1, 69)$$);
SELECT regress_err($$INSERT INTO reg_part_2 VALUES (2, 1, 69)$$);
INSERT INTO reg_part_2 VALUES (2, 1, 71);
SELECT resource, token FROM dsync_fences WHERE resource LIKE 'table:public.reg_part%';
SELECT regress_err($$SELECT dsync_fence('table:public.reg_part_1', 80)$$);

-- Misuse of the trigger.
CREATE TABLE reg_misuse (id int, token bigint, label text);
CREATE TRIGGER t_after AFTER INSERT ON reg_misuse
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
SELECT regress_err($$INSERT INTO reg_misuse VALUES (1, 1)$$);
DROP TRIGGER t_after ON reg_misuse;
CREATE TRIGGER t_stmt BEFORE INSERT ON reg_misuse
	FOR EACH STATEMENT EXECUTE FUNCTION dsync_fenced('token');
SELECT regress_err($$INSERT INTO reg_misuse VALUES (1, 1)$$);
DROP TRIGGER t_stmt ON reg_misuse;
CREATE TRIGGER t_del BEFORE DELETE ON reg_misuse
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO reg_misuse VALUES (1, 1);
SELECT regress_err($$DELETE FROM reg_misuse$$);
DROP TRIGGER t_del ON reg_misuse;
CREATE TRIGGER t_noarg BEFORE INSERT ON reg_misuse
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced();
SELECT regress_err($$INSERT INTO reg_misuse VALUES (1, 1)$$);
DROP TRIGGER t_noarg ON reg_misuse;
CREATE TRIGGER t_nocol BEFORE INSERT ON reg_misuse
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('tok');
SELECT regress_err($$INSERT INTO reg_misuse VALUES (1, 1)$$);
DROP TRIGGER t_nocol ON reg_misuse;
CREATE TRIGGER t_text BEFORE INSERT ON reg_misuse
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('label');
SELECT regress_err($$INSERT INTO reg_misuse VALUES (1, 1, 'x')$$);
DROP TRIGGER t_text ON reg_misuse;
SELECT regress_err($$SELECT dsync_fenced()$$);

DROP TABLE reg_account, reg_misuse, reg_fence_data, reg_part;

-- Only tokens this database has issued: a greater one would keep every
-- later holder out (SQLSTATE 22023), through dsync_fence or the trigger.
CREATE TABLE reg_issued (token bigint);
CREATE TRIGGER reg_issued_fenced BEFORE INSERT OR UPDATE ON reg_issued
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
CREATE TABLE reg_tok (name text PRIMARY KEY, token bigint);
INSERT INTO reg_tok VALUES ('t1', dsync_acquire('reg_fence_tok', 'h'));
SELECT dsync_release('reg_fence_tok', 'h');
SELECT regress_err($$SELECT dsync_fence('reg_fence_big', 9223372036854775807)$$);
SELECT regress_err($$SELECT dsync_fence('reg_fence_big', (SELECT token + 1000000000 FROM reg_tok WHERE name = 't1'))$$);
SELECT regress_err($$INSERT INTO reg_issued VALUES (9223372036854775807)$$);
SELECT regress_err($$SELECT dsync_fence('table:reg_issued', 9223372036854775807)$$);
SELECT dsync_fence('reg_fence_big', token) IS NULL AS issued_ok FROM reg_tok WHERE name = 't1';
INSERT INTO reg_issued SELECT token FROM reg_tok WHERE name = 't1';
SELECT count(*) AS big_marks FROM dsync_fences WHERE token > 9000000000000000000;
DROP TABLE reg_issued;

-- A table's mark is the table's, not its name's.  Another role (bob) makes
-- a temporary table "jobs" and fences it with its newest token, then drops
-- it, or renames it; this role's later "jobs" in the same schema starts
-- afresh, with an older token of its own.
INSERT INTO reg_tok VALUES ('app', dsync_acquire('reg_fence_app', 'app'));
SELECT dsync_release('reg_fence_app', 'app');
INSERT INTO reg_tok VALUES ('bob', dsync_acquire('reg_fence_bob', 'bob'));
SELECT dsync_release('reg_fence_bob', 'bob');
GRANT SELECT ON reg_tok TO regress_dsync_bob;
SET ROLE regress_dsync_bob;
CREATE TEMP TABLE jobs (id int, token bigint);
CREATE TRIGGER jobs_fenced BEFORE INSERT OR UPDATE ON jobs
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO jobs SELECT 1, token FROM reg_tok WHERE name = 'bob';
SELECT count(*) AS bobs_mark FROM dsync_fences WHERE resource LIKE 'table:pg\_temp\_%.jobs';
DROP TABLE jobs;
RESET ROLE;
SELECT count(*) AS left_behind FROM dsync_fences WHERE resource LIKE 'table:pg\_temp\_%.jobs';
CREATE TEMP TABLE jobs (id int, token bigint);
CREATE TRIGGER jobs_fenced BEFORE INSERT OR UPDATE ON jobs
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO jobs SELECT 1, token FROM reg_tok WHERE name = 'app';
DROP TABLE jobs;
-- Renamed rather than dropped: the name's row is still the old table's.
SET ROLE regress_dsync_bob;
CREATE TEMP TABLE jobs (id int, token bigint);
CREATE TRIGGER jobs_fenced BEFORE INSERT OR UPDATE ON jobs
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO jobs SELECT 1, token FROM reg_tok WHERE name = 'bob';
ALTER TABLE jobs RENAME TO bobs_jobs;
RESET ROLE;
CREATE TEMP TABLE jobs (id int, token bigint);
CREATE TRIGGER jobs_fenced BEFORE INSERT OR UPDATE ON jobs
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO jobs SELECT 1, token FROM reg_tok WHERE name = 'app';
SELECT t.name FROM dsync_fences f JOIN reg_tok t USING (token)
 WHERE f.resource LIKE 'table:pg\_temp\_%.jobs';
-- The new table's own mark still refuses what is older than it.
SELECT regexp_replace(regress_err($$INSERT INTO jobs SELECT 2, token - 1 FROM reg_tok WHERE name = 'app'$$),
					  'pg_temp_[0-9]+', 'pg_temp_N');
-- A table created and fenced in a session leaves nothing once it ends.
\c -
DO $$
BEGIN
	FOR i IN 1..100 LOOP
		EXIT WHEN NOT EXISTS (SELECT FROM dsync_fences WHERE resource LIKE 'table:pg\_temp\_%');
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$;
SELECT count(*) AS temp_marks FROM dsync_fences WHERE resource LIKE 'table:pg\_temp\_%';

-- A detached partition starts at its partitioned table's mark: a token
-- the partitioned table refuses is refused by the detached table too.
CREATE TABLE reg_dpart (month int, v int, token bigint) PARTITION BY LIST (month);
CREATE TABLE reg_dpart_1 PARTITION OF reg_dpart FOR VALUES IN (1);
CREATE TABLE reg_dpart_2 PARTITION OF reg_dpart FOR VALUES IN (2);
CREATE TRIGGER reg_dpart_fenced BEFORE INSERT OR UPDATE ON reg_dpart
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO reg_dpart SELECT 1, 1, token FROM reg_tok WHERE name = 'bob';
SELECT regress_err($$INSERT INTO reg_dpart_1 SELECT 1, 2, token FROM reg_tok WHERE name = 'app'$$);
ALTER TABLE reg_dpart DETACH PARTITION reg_dpart_1;
ALTER TABLE reg_dpart DETACH PARTITION reg_dpart_2 CONCURRENTLY;
SELECT f.resource, t.name FROM dsync_fences f JOIN reg_tok t USING (token)
 WHERE f.resource LIKE 'table:public.reg\_dpart%' ORDER BY 1;
-- Fenced again as tables of their own (a cloned trigger goes on detach).
CREATE TRIGGER reg_dpart_1_fenced BEFORE INSERT OR UPDATE ON reg_dpart_1
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
CREATE TRIGGER reg_dpart_2_fenced BEFORE INSERT OR UPDATE ON reg_dpart_2
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
SELECT tgrelid::regclass, tgname FROM pg_trigger
 WHERE tgrelid IN ('reg_dpart_1'::regclass, 'reg_dpart_2'::regclass) ORDER BY 1, 2;
SELECT regress_err($$INSERT INTO reg_dpart_1 SELECT 1, 2, token FROM reg_tok WHERE name = 'app'$$);
SELECT regress_err($$INSERT INTO reg_dpart_2 SELECT 2, 2, token FROM reg_tok WHERE name = 'app'$$);
INSERT INTO reg_dpart_1 SELECT 1, 3, token FROM reg_tok WHERE name = 'bob';
DROP TABLE reg_dpart, reg_dpart_1, reg_dpart_2, reg_tok;
SELECT count(*) AS dropped_marks FROM dsync_fences WHERE resource LIKE 'table:public.reg\_dpart%';
