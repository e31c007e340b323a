-- Fences raised by grants: dsync_fence_bind(), dsync_fence_unbind(), the
-- lease argument of dsync_fenced(), and a resource named like its lease.
-- Runs as dsync_tester, an ordinary role (sql/setup.sql).  Ephemeral
-- grants of bound leases are in test/tap/t/035_fence_bind.pl (they need a
-- server whose ephemeral grants are open).
CREATE EXTENSION IF NOT EXISTS dsync;

-- Binding is an administrator's grant (a binding makes the lease's grants
-- wait for the resource's writers); sql/setup.sql gave it to this role.
GRANT EXECUTE ON FUNCTION dsync_fence_bind(text, text), dsync_fence_unbind(text)
	TO regress_dsync_alice, regress_dsync_bob;

-- The register of the read-modify-write rule: a holder reads, then writes
-- what it read plus one, with its token.
CREATE TABLE reg_counter (id int PRIMARY KEY, v int NOT NULL, token bigint NOT NULL);
CREATE TRIGGER reg_counter_fenced BEFORE INSERT OR UPDATE ON reg_counter
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token', 'reg_counter_lease');
-- CREATE TRIGGER with a lease bound the table: its mark exists, at 0.
SELECT resource, token, lease FROM dsync_fences WHERE resource = 'table:public.reg_counter';

CREATE TABLE reg_tok (name text PRIMARY KEY, token bigint);
INSERT INTO reg_tok VALUES ('old', dsync_acquire('reg_counter_lease', 'old', '1 s'));
INSERT INTO reg_counter SELECT 1, 0, token FROM reg_tok WHERE name = 'old';
SELECT pg_sleep(1.1);
-- The lease moved: the grant itself raised the mark, so the old holder's
-- write is refused before the new holder has written anything.
INSERT INTO reg_tok VALUES ('new', dsync_acquire('reg_counter_lease', 'new', '30 s'));
SELECT f.token = t.token AS mark_is_new_token
  FROM dsync_fences f, reg_tok t WHERE f.resource = 'table:public.reg_counter' AND t.name = 'new';
SELECT regress_err($$UPDATE reg_counter SET v = v + 1, token = (SELECT token FROM reg_tok WHERE name = 'old')$$);
UPDATE reg_counter SET v = v + 1, token = (SELECT token FROM reg_tok WHERE name = 'new');
SELECT v FROM reg_counter;
-- A reentrant acquire keeps its token and leaves the mark as it is.
SELECT dsync_acquire('reg_counter_lease', 'new', '30 s') = token AS same_token
  FROM reg_tok WHERE name = 'new';
SELECT dsync_release('reg_counter_lease', 'new');

-- A rollback undoes the grant and its raise together.
INSERT INTO reg_tok VALUES ('next', dsync_acquire('reg_counter_lease', 'next', '30 s'));
SELECT dsync_release('reg_counter_lease', 'next');
BEGIN;
SELECT dsync_acquire('reg_counter_lease', 'rolled', '30 s') IS NOT NULL AS granted;
ROLLBACK;
SELECT f.token = t.token AS mark_unmoved
  FROM dsync_fences f, reg_tok t WHERE f.resource = 'table:public.reg_counter' AND t.name = 'next';
SELECT count(*) AS held FROM dsync_leases WHERE lease = 'reg_counter_lease';

-- dsync_fence_bind: true if bound now, false if it already was, an error
-- if bound to another lease; dsync_fence_unbind: true if it was bound.
SELECT dsync_fence_bind('table:reg_counter', 'reg_counter_lease') AS again;
SELECT regress_err($$SELECT dsync_fence_bind('table:public.reg_counter', 'reg_other')$$);
SELECT dsync_fence_unbind('table:public.reg_counter') AS unbound;
SELECT dsync_fence_unbind('table:public.reg_counter') AS unbound_again;
SELECT lease IS NULL AS no_lease, token > 0 AS mark_kept
  FROM dsync_fences WHERE resource = 'table:public.reg_counter';
SELECT dsync_fence_bind('table:public.reg_counter', 'reg_counter_lease') AS bound_again;
-- A trigger naming another lease leaves the binding as it is, with a
-- warning (a restore creates triggers after it restored the bindings).
CREATE TRIGGER reg_counter_other BEFORE UPDATE ON reg_counter
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token', 'reg_other_lease');
SELECT lease FROM dsync_fences WHERE resource = 'table:public.reg_counter';
DROP TRIGGER reg_counter_other ON reg_counter;

-- A binding starts at the lease's newest token, so the holders before it
-- are refused at once; a resource with no mark gets one.
INSERT INTO reg_tok VALUES ('cur', dsync_acquire('reg_bind_late', 'cur', '30 s'));
SELECT dsync_fence_bind('reg_late_resource', 'reg_bind_late') AS bound;
SELECT f.token = t.token AS starts_at_holder
  FROM dsync_fences f, reg_tok t WHERE f.resource = 'reg_late_resource' AND t.name = 'cur';
SELECT dsync_release('reg_bind_late', 'cur');

-- Every kind of grant raises a bound mark: shared, a semaphore's permit,
-- dsync_acquire_all, a session lease.  reg_is_mark(name, resource): the
-- token saved as name is the resource's mark now.
CREATE FUNCTION reg_is_mark(n text, r text) RETURNS boolean LANGUAGE sql AS $$
	SELECT f.token = t.token FROM dsync_fences f, reg_tok t WHERE f.resource = r AND t.name = n
$$;
SELECT dsync_fence_bind('reg_kinds_rw', 'reg_kinds_rw') AS bound;
INSERT INTO reg_tok VALUES ('r1', dsync_acquire_shared('reg_kinds_rw', 'r1'));
SELECT reg_is_mark('r1', 'reg_kinds_rw') AS shared_raised;
SELECT dsync_release('reg_kinds_rw', 'r1');
SELECT dsync_semaphore_create('reg_kinds_sem', 2);
SELECT dsync_fence_bind('reg_kinds_sem_data', 'reg_kinds_sem') AS bound;
INSERT INTO reg_tok VALUES ('p1', dsync_acquire('reg_kinds_sem', 'p1'));
SELECT reg_is_mark('p1', 'reg_kinds_sem_data') AS permit_raised;
-- A semaphore's holders share one mark: the newest permit refuses the older.
INSERT INTO reg_tok VALUES ('p2', dsync_acquire('reg_kinds_sem', 'p2'));
SELECT reg_is_mark('p2', 'reg_kinds_sem_data') AS second_permit_raised;
SELECT regress_err($$SELECT dsync_fence('reg_kinds_sem_data', (SELECT token FROM reg_tok WHERE name = 'p1'))$$);
SELECT dsync_release('reg_kinds_sem', 'p1'), dsync_release('reg_kinds_sem', 'p2');
SELECT dsync_semaphore_drop('reg_kinds_sem');
SELECT dsync_fence_bind('reg_kinds_a_data', 'reg_kinds_a') AS bound;
SELECT dsync_fence_bind('reg_kinds_b_data', 'reg_kinds_b') AS bound;
INSERT INTO reg_tok SELECT unnest(ARRAY['m1', 'm2']), unnest(dsync_acquire_all(ARRAY['reg_kinds_a', 'reg_kinds_b'], 'm'));
SELECT reg_is_mark('m1', 'reg_kinds_a_data') AS first_raised, reg_is_mark('m2', 'reg_kinds_b_data') AS second_raised;
SELECT dsync_release('reg_kinds_a', 'm'), dsync_release('reg_kinds_b', 'm');
INSERT INTO reg_tok VALUES ('s', dsync_acquire('reg_kinds_a', 's', session => true));
SELECT reg_is_mark('s', 'reg_kinds_a_data') AS session_raised;
SELECT dsync_release('reg_kinds_a', 's');

-- A resource named like a lease is bound to it with no call: once it has
-- a mark, every grant of the lease raises it.
INSERT INTO reg_tok VALUES ('n1', dsync_acquire('reg_named', 'n1', '1 s'));
SELECT dsync_fence('reg_named', token) IS NULL AS first_mark FROM reg_tok WHERE name = 'n1';
SELECT pg_sleep(1.1);
INSERT INTO reg_tok VALUES ('n2', dsync_acquire('reg_named', 'n2'));
SELECT reg_is_mark('n2', 'reg_named') AS named_raised;
SELECT regress_err($$SELECT dsync_fence('reg_named', (SELECT token FROM reg_tok WHERE name = 'n1'))$$);
SELECT dsync_release('reg_named', 'n2');
-- Its first mark is refused to a token older than the lease's newest grant.
INSERT INTO reg_tok VALUES ('f1', dsync_acquire('reg_named_first', 'f1', '1 s'));
SELECT pg_sleep(1.1);
SELECT dsync_acquire('reg_named_first', 'f2') IS NOT NULL AS moved;
SELECT regress_err($$SELECT dsync_fence('reg_named_first', (SELECT token FROM reg_tok WHERE name = 'f1'))$$);
SELECT count(*) AS no_mark FROM dsync_fences WHERE resource = 'reg_named_first';
SELECT dsync_release('reg_named_first', 'f2');
-- A lease named like nothing that has a mark costs nothing and raises nothing.
SELECT dsync_acquire('reg_unbound', 'u') IS NOT NULL AS granted;
SELECT count(*) AS marks FROM dsync_fences WHERE resource = 'reg_unbound';
SELECT dsync_release('reg_unbound', 'u');

-- Ownership: a mark of another role's resource is not yours to bind; a
-- table's is for roles that may write the table.  Roles without the grant
-- may not bind at all, nor through a trigger.
SET ROLE regress_dsync_alice;
SELECT dsync_fence_bind('reg_alice_res', 'reg_alice_lease') AS bound;
SET ROLE regress_dsync_bob;
SELECT regress_err($$SELECT dsync_fence_unbind('reg_alice_res')$$);
SELECT regress_err($$SELECT dsync_fence_bind('table:public.reg_counter', 'reg_counter_lease')$$);
SET ROLE regress_dsync_carol;
SELECT dsync_fence_unbind('reg_alice_res') AS unbound_by_member;
SET ROLE regress_sem_other;
SELECT regress_err($$SELECT dsync_fence_bind('reg_other_res', 'reg_other_lease')$$);
CREATE TEMP TABLE reg_other_t (token bigint);
SELECT regexp_replace(regress_err($$CREATE TRIGGER t BEFORE INSERT ON reg_other_t
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token', 'reg_other_lease')$$), 'pg_temp_[0-9]+', 'pg_temp_N');
DROP TABLE reg_other_t;
RESET ROLE;

-- A lease named like a table's mark moves nothing: table marks move only
-- for roles that may write the table.
CREATE TABLE reg_named_table (token bigint);
CREATE TRIGGER reg_named_table_fenced BEFORE INSERT ON reg_named_table
	FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
INSERT INTO reg_named_table SELECT token FROM reg_tok WHERE name = 'new';
SELECT dsync_acquire('table:public.reg_named_table', 'x') IS NOT NULL AS granted;
SELECT f.token = t.token AS mark_unmoved
  FROM dsync_fences f, reg_tok t WHERE f.resource = 'table:public.reg_named_table' AND t.name = 'new';
SELECT dsync_release('table:public.reg_named_table', 'x');
DROP TABLE reg_named_table;

-- Only tables have a table's mark (views, materialized views, sequences
-- and indexes are refused; foreign tables have one), and a dropped table's
-- mark and binding go with it.
CREATE VIEW reg_view AS SELECT 1 AS token;
CREATE MATERIALIZED VIEW reg_matview AS SELECT 1 AS token;
CREATE SEQUENCE reg_seq;
CREATE INDEX reg_counter_v ON reg_counter (v);
CREATE FOREIGN TABLE reg_foreign (token bigint) SERVER regress_dsync_server;
SELECT regress_err($$SELECT dsync_fence('table:public.reg_matview', (SELECT token FROM reg_tok WHERE name = 'new'))$$);
SELECT dsync_fence('table:public.reg_foreign', (SELECT token FROM reg_tok WHERE name = 'new')) IS NULL AS foreign_first_mark;
SELECT dsync_fence_bind('table:public.reg_foreign', 'reg_foreign_lease') AS foreign_bound;
SELECT count(*) AS foreign_marks FROM dsync_fences
 WHERE resource = 'table:public.reg_foreign' AND lease = 'reg_foreign_lease';
DROP FOREIGN TABLE reg_foreign;
SELECT count(*) AS foreign_dropped FROM dsync_fences WHERE resource = 'table:public.reg_foreign';
DROP MATERIALIZED VIEW reg_matview;
SELECT regress_err($$SELECT dsync_fence_bind('table:public.reg_view', 'l')$$);
SELECT regress_err($$SELECT dsync_fence('table:public.reg_view', (SELECT token FROM reg_tok WHERE name = 'new'))$$);
SELECT regress_err($$SELECT dsync_fence('table:public.reg_seq', (SELECT token FROM reg_tok WHERE name = 'new'))$$);
SELECT regress_err($$SELECT dsync_fence('table:public.reg_counter_v', (SELECT token FROM reg_tok WHERE name = 'new'))$$);
SELECT count(*) AS view_marks FROM dsync_fences WHERE resource LIKE 'table:public.reg\_%'
   AND resource <> 'table:public.reg_counter';
DROP VIEW reg_view;
DROP SEQUENCE reg_seq;
DROP TABLE reg_counter;
SELECT count(*) AS dropped FROM dsync_fences WHERE resource = 'table:public.reg_counter';

-- Bad input.
SELECT regress_err($$SELECT dsync_fence_bind(NULL, 'l')$$);
SELECT regress_err($$SELECT dsync_fence_bind('r', NULL)$$);
SELECT regress_err($$SELECT dsync_fence_bind('', 'l')$$);
SELECT regress_err($$SELECT dsync_fence_bind('r', '')$$);
SELECT regress_err($$SELECT dsync_fence_bind(repeat('r', 256), 'l')$$);
SELECT regress_err($$SELECT dsync_fence_bind('r', repeat('l', 256))$$);
SELECT regress_err($$SELECT dsync_fence_unbind(NULL)$$);
SELECT regress_err($$SELECT dsync_fence_bind('table:public.reg_no_table', 'l')$$);
CREATE TABLE reg_trig (token bigint);
SELECT regress_err($$CREATE TRIGGER t BEFORE INSERT ON reg_trig FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token', '')$$);
CREATE TRIGGER t3 BEFORE INSERT ON reg_trig FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token', 'a', 'b');
SELECT regress_err($$INSERT INTO reg_trig SELECT token FROM reg_tok WHERE name = 'new'$$);
DROP TABLE reg_trig, reg_tok CASCADE;
-- What this file left bound.
SELECT resource, lease FROM dsync_fences WHERE lease IS NOT NULL ORDER BY resource;
