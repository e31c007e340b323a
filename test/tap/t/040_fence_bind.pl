# Fences raised by grants (src/leases/fencebind.c), where a server of its
# own is needed: ephemeral grants (open after dsync.ephemeral_max_ttl),
# crashes, a synchronous standby and failover, and the shared map that
# tells grants which leases have fences (src/storage/boundmap.c), which
# starts empty at every start and is filled by the worker.
#
#  1. An ephemeral grant of a bound lease raises the mark: the old
#     holder's write is refused at once.  A rollback (of the transaction or
#     of a savepoint) undoes the grant with the raise: the name is free and
#     the mark where it was.  An unbound ephemeral grant outlives its
#     rollback, as before.  A writer of the old token holding the mark
#     keeps an ephemeral grant out (wait = 0: NULL, nothing left held)
#     until it commits; a waiter whose wait runs out meanwhile gets NULL,
#     and a shorter lock_timeout of the session applies as an error.
#  2. Durable: after a crash, the mark a bound grant raised (durable or
#     ephemeral) is there, and the old token is refused.
#  3. With a synchronous standby, the mark an ephemeral grant raised is on
#     the standby when the acquire returns: the standby, promoted at once,
#     refuses the old token.  When the grant's wait for the standby at
#     commit is cancelled (the standby stalled), the grant is let go of,
#     with a warning: it must not stand while its mark may be missing
#     after a failover.  So is a grant a release makes to an ephemeral
#     queued waiter: the waiter's place goes back in line, and its claim
#     finds it granted only once the standby has the grant.
#  4. After a restart the map is empty until the worker has filled it
#     from dsync_fence; then grants of unbound leases read no block of
#     dsync_fence, and a binding from before the restart still raises its
#     mark.  Marks restored by SQL (pg_dump's COPY) note their names in the
#     map as they are inserted, so a grant in a database whose map was
#     filled before the restore raises them too.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/..";
use DsyncTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = dsync_node('primary', 'dsync.ephemeral_max_ttl = 2');
$node->backup('base');

# Ephemeral grants open dsync.ephemeral_max_ttl after the start.
sub wait_ephemeral_open
{
	my ($n) = @_;
	ok( wait_for($n,
			"SELECT dsync_acquire('eph_probe', 'p', '1 s', durable => false) IS NOT NULL "
			  . "AND dsync_release('eph_probe', 'p')"),
		'ephemeral grants are open');
}
wait_ephemeral_open($node);

$node->safe_psql('postgres', q{
	CREATE TABLE reg (id int PRIMARY KEY, v int NOT NULL, token bigint NOT NULL);
	CREATE TRIGGER reg_fenced BEFORE INSERT OR UPDATE ON reg
		FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token', 'eph_lease');
	CREATE TABLE tok (name text PRIMARY KEY, token bigint);
});

# The mark of reg, and whether the token saved as $name is it.
sub mark_is
{
	my ($n, $name) = @_;
	return q1($n, "SELECT f.token = t.token FROM dsync_fences f, tok t "
		  . "WHERE f.resource = 'table:public.reg' AND t.name = '$name'");
}

# 1. Ephemeral grants of a bound lease.
$node->safe_psql('postgres', q{
	INSERT INTO tok VALUES ('e1', dsync_acquire('eph_lease', 'e1', '500 ms', durable => false));
	INSERT INTO reg SELECT 1, 0, token FROM tok WHERE name = 'e1';
	SELECT pg_sleep(0.6);
	INSERT INTO tok VALUES ('e2', dsync_acquire('eph_lease', 'e2', '2 s', durable => false));
});
is(mark_is($node, 'e2'), 't', 'an ephemeral grant raised the mark to its token');
my ($rc, $out, $err) = $node->psql('postgres',
	"UPDATE reg SET v = v + 1, token = (SELECT token FROM tok WHERE name = 'e1')");
like($err, qr/stale fencing token/, "the old holder's write is refused before the new one writes");
$node->safe_psql('postgres', q{SELECT dsync_release('eph_lease', 'e2')});

$node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO tok VALUES ('rolled', dsync_acquire('eph_lease', 'r', '2 s', durable => false));
	ROLLBACK;
});
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'eph_lease'"), '0',
	'a rollback undoes a bound ephemeral grant');
is(mark_is($node, 'e2'), 't', '... and its raise');
$node->safe_psql('postgres', q{
	BEGIN;
	SAVEPOINT s;
	SELECT dsync_acquire('eph_lease', 'r', '2 s', durable => false);
	ROLLBACK TO SAVEPOINT s;
	COMMIT;
});
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'eph_lease'"), '0',
	'so does a rolled-back savepoint');
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT dsync_acquire('eph_unbound', 'u', '2 s', durable => false);
	ROLLBACK;
});
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'eph_unbound'"), '1',
	'an unbound ephemeral grant outlives its rollback');

# A writer of the old token holds the mark: the grant is not made.
$node->safe_psql('postgres', q{
	DELETE FROM tok WHERE name IN ('e1', 'e2');
	INSERT INTO tok VALUES ('e1', dsync_acquire('eph_lease', 'e1', '500 ms', durable => false));
});
my $writer = psql_client($node, 'postgres');
ok( send_wait($writer,
		"BEGIN; UPDATE reg SET v = v + 1, token = (SELECT token FROM tok WHERE name = 'e1'); SELECT 'written';",
		qr/written/),
	'the old holder is writing');
$node->safe_psql('postgres', 'SELECT pg_sleep(0.6)');
is(q1($node, "SELECT dsync_acquire('eph_lease', 'e2', '2 s', durable => false) IS NULL"), 't',
	'an ephemeral grant (wait = 0) is refused while the old holder writes');
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'eph_lease' AND holder = 'e2'"), '0',
	'... and leaves nothing held');
is( q1($node,
		"SELECT dsync_acquire('eph_lease', 'e2', '2 s', wait => '300 ms', durable => false) IS NULL"),
	't', 'a waiter whose wait runs out while the writer holds the mark gets NULL, no error');
($rc, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '100ms'; SELECT dsync_acquire('eph_lease', 'e2', '2 s', wait => '10 s', durable => false)");
like($err, qr/lock timeout/, 'a session lock_timeout shorter than the wait applies as an error');
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'eph_lease' AND holder = 'e2'"), '0',
	'... and leaves nothing held either');
ok(send_wait($writer, "COMMIT; SELECT 'committed';", qr/committed/), 'the old holder commits');
$node->safe_psql('postgres', q{
	INSERT INTO tok VALUES ('e2', dsync_acquire('eph_lease', 'e2', '2 s', durable => false));
});
is(mark_is($node, 'e2'), 't', 'then the grant is made and raises the mark');
$writer->{h}->finish;

# 2. After a crash the raised marks are there.
$node->safe_psql('postgres', q{
	SELECT dsync_fence_bind('dur_res', 'dur_lease');
	INSERT INTO tok VALUES ('d1', dsync_acquire('dur_lease', 'd1', '60 s'));
	SELECT dsync_release('eph_lease', 'e2');
	INSERT INTO tok VALUES ('e3', dsync_acquire('eph_lease', 'e3', '2 s', durable => false));
});
$node->stop('immediate');
$node->start;
is( q1($node, "SELECT f.token = t.token FROM dsync_fences f, tok t "
		  . "WHERE f.resource = 'dur_res' AND t.name = 'd1'"),
	't', 'a durable grant\'s raise survives a crash');
is(mark_is($node, 'e3'), 't', 'so does an ephemeral grant\'s');
($rc, $out, $err) = $node->psql('postgres',
	"UPDATE reg SET token = (SELECT token FROM tok WHERE name = 'e2')");
like($err, qr/stale fencing token/, 'the token before it is refused after the crash');

# 4. The map (boundmap.c): once the worker has filled it, grants of
# leases with no fence read no block of dsync_fence; bindings from before
# the restart are in it, and so are marks restored by SQL.

# Blocks of dsync_fence (table and indexes) that $n durable acquire+release
# cycles of new names read, in one session of database $db (its statistics
# reach the shared ones once it exits).
sub fence_reads
{
	my ($db, $prefix, $n) = @_;
	my $sql = "SELECT coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0) "
	  . "+ coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0) "
	  . "FROM pg_statio_all_tables WHERE relid = 'dsync_fence'::regclass";
	my $before = q1($node, $sql, $db);
	$node->safe_psql($db, join('', map {
		"SELECT dsync_acquire('$prefix$_', 'h', '60 s', '10 s'), dsync_release('$prefix$_', 'h');\n"
	} 1 .. $n));
	my $after;
	for (1 .. 40)
	{
		$after = q1($node, $sql, $db);
		last if $after != $before;
		usleep(50_000);
	}
	return $after - $before;
}

# Until grants of unbound leases skip dsync_fence (the worker filled the map).
sub map_in_use
{
	my ($db, $round) = @_;
	for my $try (1 .. 30)
	{
		return 1 if fence_reads($db, "free-$round-$try-", 10) == 0;
		sleep 1;
	}
	return 0;
}

ok(map_in_use('postgres', 'a'), 'after a restart, grants of unbound leases read no block of dsync_fence');
$node->safe_psql('postgres', q{
	SELECT dsync_release('dur_lease', 'd1');
	INSERT INTO tok VALUES ('d2', dsync_acquire('dur_lease', 'd2', '60 s', '10 s'));
});
is( q1($node, "SELECT f.token = t.token FROM dsync_fences f, tok t "
		  . "WHERE f.resource = 'dur_res' AND t.name = 'd2'"),
	't', 'a binding from before the restart is in the map: the grant raised it');
wait_ephemeral_open($node);
$node->safe_psql('postgres', q{
	DELETE FROM tok WHERE name = 'e4';
	INSERT INTO tok VALUES ('e4', dsync_acquire('eph_lease', 'e4', '2 s', durable => false));
});
is(mark_is($node, 'e4'), 't', 'an ephemeral grant too');

# Restored marks: dump this database's marks, restore them into a new
# database whose worker has filled its map already, then grant.
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->safe_psql('restored', 'CREATE EXTENSION dsync');
ok(map_in_use('restored', 'b'), 'the new database\'s map is in use');
my $dump = $node->basedir . '/fences.sql';
$node->command_ok(
	[ 'pg_dump', '-h', $node->host, '-p', $node->port, '-d', 'postgres',
	  '--data-only', '-t', 'dsync_fence', '-f', $dump ],
	'dump the marks');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', $node->host, '-p', $node->port,
	  '-d', 'restored', '-f', $dump ],
	'restore them');
is(q1($node, "SELECT lease FROM dsync_fences WHERE resource = 'dur_res'", 'restored'),
	'dur_lease', 'the binding was restored');
$node->safe_psql('restored', q{
	CREATE TABLE tok (name text PRIMARY KEY, token bigint);
	INSERT INTO tok VALUES ('r1', dsync_acquire('dur_lease', 'r1', '60 s'));
});
is( q1($node, "SELECT f.token = t.token FROM dsync_fences f, tok t "
		  . "WHERE f.resource = 'dur_res' AND t.name = 'r1'", 'restored'),
	't', 'a grant raises a restored mark');

# 3. A synchronous standby has the mark an ephemeral grant raised by the
# time the acquire returns: promoted at once, it refuses the old token.
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
stop_at_end($standby);
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'standby'");
$node->reload;
$node->wait_for_catchup($standby);
ok( wait_for($node,
		"SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'"),
	'the standby is synchronous');
$node->safe_psql('postgres', "SELECT dsync_fence_bind('sync_res', 'sync_lease')");

# The standby stalled: a cancelled wait for it at the grant's commit
# leaves no grant (PostgreSQL lets the commit stand, with a warning).
my $walsender = q1($node, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walsender'");
is(kill('STOP', $walsender), 1, 'the standby\'s walsender is stalled');
my $waiter = psql_client($node, 'postgres');
$waiter->{in} .= "SELECT dsync_acquire('sync_lease', 'c1', '2 s', durable => false) IS NOT NULL AS granted;\n";
$waiter->{h}->pump_nb;
ok( wait_for($node,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
		  . "AND query LIKE '%''c1''%'"),
	'the grant\'s commit waits for the standby');
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
	  . "AND query LIKE '%''c1''%'");
ok(send_wait($waiter, "SELECT 'done';", qr/done/), 'the cancelled acquire returns');
like($waiter->{err}, qr/was released: the synchronous standby did not confirm its fence/,
	'with a warning that the grant was let go of');
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'sync_lease'"), '0',
	'the name is not held');
kill('CONT', $walsender);
$node->wait_for_catchup($standby);

# The same for a grant a release makes to an ephemeral queued waiter: let
# go of at the cancelled commit, the waiter's place goes back in line; the
# worker grants again, and until the standby has that grant the waiter's
# claim does not find it granted.
$node->safe_psql('postgres', q{
	INSERT INTO tok VALUES ('qh', dsync_acquire('sync_lease', 'qh', '2 s', durable => false));
});
is( q1($node, "SELECT dsync_queue('sync_lease', 'q1', '2 s', channel => 'q1', durable => false)"),
	'', 'an ephemeral waiter queues behind the holder');
is(kill('STOP', $walsender), 1, 'the standby\'s walsender is stalled again');
my $releaser = psql_client($node, 'postgres');
$releaser->{in} .= "SELECT dsync_release('sync_lease', 'qh');\n";
$releaser->{h}->pump_nb;
ok( wait_for($node,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
		  . "AND query LIKE '%''qh''%'"),
	'the release that granted to the waiter waits for the standby');
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
	  . "AND query LIKE '%''qh''%'");
ok(send_wait($releaser, "SELECT 'done';", qr/done/), 'the cancelled release returns');
like($releaser->{err}, qr/was released: the synchronous standby did not confirm its fence/,
	'with a warning that the grant was let go of');
ok( wait_for($node,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dsync reaper' "
		  . "AND wait_event = 'SyncRep'"),
	'the worker grants again, and its commit waits for the standby');
is( q1($node, "SELECT state FROM dsync_claim('sync_lease', 'q1')"), 'queued',
	'meanwhile the waiter\'s claim does not find it granted');
is( q1($node, "SELECT string_agg(holder || ':' || kind, ',') FROM dsync_waiters "
		  . "WHERE name = 'sync_lease'"),
	'q1:queued', 'and it is still in line');
kill('CONT', $walsender);
$node->wait_for_catchup($standby);
is( q1($node, "SELECT state FROM dsync_claim('sync_lease', 'q1')"), 'granted',
	'the standby back, its claim finds the grant');
is( q1($node, "SELECT holder FROM dsync_leases WHERE lease = 'sync_lease'"), 'q1',
	'and the waiter holds the name');
$node->safe_psql('postgres', "SELECT dsync_release('sync_lease', 'q1')");

$node->safe_psql('postgres', q{
	INSERT INTO tok VALUES ('s1', dsync_acquire('sync_lease', 's1', '500 ms', durable => false));
	SELECT dsync_fence('sync_res', token) FROM tok WHERE name = 's1';
	SELECT pg_sleep(0.6);
});
my $s2 = q1($node, "SELECT dsync_acquire('sync_lease', 's2', '2 s', durable => false)");
$node->stop('immediate');
$standby->promote;
is( q1($standby, "SELECT token FROM dsync_fences WHERE resource = 'sync_res'"),
	$s2, 'the promoted standby has the mark the ephemeral grant raised');
($rc, $out, $err) = $standby->psql('postgres',
	"SELECT dsync_fence('sync_res', token) FROM tok WHERE name = 's1'");
like($err, qr/stale fencing token/, 'and refuses the token before it');

done_testing();
