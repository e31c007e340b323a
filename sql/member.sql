-- Group membership: join, refresh, leave, members and the leader.
CREATE EXTENSION IF NOT EXISTS dsync;

SELECT count(*) AS members_at_start FROM dsync_members('cluster');

SELECT dsync_join('cluster', 'node-a', '1 minute', '{"host":"a"}') - clock_timestamp()
	BETWEEN interval '59 seconds' AND interval '1 minute' AS joined_a;
SELECT dsync_join('cluster', 'node-b') - clock_timestamp()
	BETWEEN interval '29 seconds' AND interval '30 seconds' AS joined_b_default_ttl;
SELECT member, info, expires_at > joined_at AS live, is_leader
  FROM dsync_members('cluster') ORDER BY member;

-- the leader is the holder of the lease named after the group
SELECT dsync_acquire('cluster', 'node-b') IS NOT NULL AS b_leads;
SELECT member, is_leader FROM dsync_members('cluster') ORDER BY member;

-- refresh: a later expiry, the same joined_at; NULL info keeps the info
SELECT joined_at AS joined_a FROM dsync_members('cluster') WHERE member = 'node-a' \gset
SELECT dsync_join('cluster', 'node-a', '2 minutes') - clock_timestamp()
	BETWEEN interval '119 seconds' AND interval '2 minutes' AS refreshed;
SELECT joined_at = :'joined_a'::timestamptz AS same_joined_at, info
  FROM dsync_members('cluster') WHERE member = 'node-a';
SELECT dsync_join('cluster', 'node-a', '2 minutes', '{"host":"a2"}') IS NOT NULL AS refreshed_info;
SELECT info FROM dsync_members('cluster') WHERE member = 'node-a';

-- leave
SELECT dsync_leave('cluster', 'node-a') AS left_a;
SELECT dsync_leave('cluster', 'node-a') AS left_twice;
SELECT dsync_leave('cluster', 'nobody') AS never_joined;
SELECT member FROM dsync_members('cluster') ORDER BY member;

-- an expired member is gone at once, before the reaper gets to it
SELECT dsync_join('cluster', 'node-c', '10 milliseconds') IS NOT NULL AS joined_c;
SELECT pg_sleep(0.05);
SELECT member FROM dsync_members('cluster') ORDER BY member;
SELECT dsync_leave('cluster', 'node-c') AS expired_cannot_leave;

-- groups are separate
SELECT dsync_join('other', 'node-a') IS NOT NULL AS joined_other;
SELECT count(*) AS members_of_other FROM dsync_members('other');

-- a membership belongs to the role that joined
SET ROLE regress_member_other;
SELECT regress_err($$SELECT dsync_join('cluster', 'node-b')$$);
SELECT dsync_leave('cluster', 'node-b') AS other_role_cannot_leave;
SELECT count(*) AS other_role_sees_members FROM dsync_members('cluster');
RESET ROLE;

-- bad input
SELECT regress_err($$SELECT dsync_join(NULL, 'm')$$);
SELECT regress_err($$SELECT dsync_join('g', '')$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', '0')$$);
SELECT regress_err($$SELECT dsync_join('g', 'm', NULL)$$);
SELECT regress_err($$SELECT dsync_join(repeat('g', 256), 'm')$$);
SELECT regress_err($$SELECT dsync_leave('g', NULL)$$);
SELECT regress_err($$SELECT * FROM dsync_members(NULL)$$);

-- a transaction that joined or left cannot be prepared (its events would
-- be lost and the membership never reaped)
BEGIN;
SELECT dsync_join('prep-group', 'm') IS NOT NULL AS joined;
PREPARE TRANSACTION 'dsync_prep_join';
SELECT count(*) AS prepared_join_rolled_back FROM dsync_members('prep-group');
SELECT dsync_join('prep-group', 'm') IS NOT NULL AS joined;
BEGIN;
SELECT dsync_leave('prep-group', 'm') AS left;
PREPARE TRANSACTION 'dsync_prep_leave';
SELECT count(*) AS prepared_leave_rolled_back FROM dsync_members('prep-group');
SELECT dsync_leave('prep-group', 'm') AS cleaned_prep;

-- a member found by its key, whatever the size of its group
SELECT count(dsync_join('big-group', 'm' || i, '1 minute')) AS joined FROM generate_series(1, 3000) i;
SELECT dsync_join('big-group', 'm1500', '2 minutes') - clock_timestamp() > '1 minute' AS refreshed;
SELECT count(*) FILTER (WHERE dsync_leave('big-group', 'm' || i)) AS left FROM generate_series(1, 3000) i;

-- nobody writes the members table directly
SELECT has_table_privilege('public', 'dsync_member', 'INSERT') AS public_can_insert;

SELECT dsync_leave('cluster', 'node-b') AND dsync_leave('other', 'node-a') AS cleaned;
SELECT dsync_release('cluster', 'node-b') AS released;
