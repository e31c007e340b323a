# The fast path of a plain lease (issue 15): a call finds the lease's row
# through a shared cache of where its newest version is, and writes a
# change as one heap update with no lock record before it.
#
#  - Under an old snapshot, the buffers a call reads do not grow with the
#    number of versions of the row that the snapshot keeps alive.
#  - The cache is only a hint: after TRUNCATE, VACUUM FULL, rolled-back
#    subtransactions and changes within one transaction, every answer is
#    still the one the table gives.
#  - A release, a renewal and a grant of a free row each write one heap
#    record; a row that is locked (a guard) still goes the slow way.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/..";
use DsyncTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The reaper's event log writes WAL too; these counts are of the calls' own.
my $node = dsync_node('fast_path', 'dsync.event_retention = 0');
q1($node, 'CREATE EXTENSION pg_walinspect');
q1($node, 'CREATE ROLE app LOGIN');

# The shared buffers a statement read the second time a session runs it,
# from EXPLAIN (ANALYZE, BUFFERS): what the functions it calls read is
# counted in its plan node.
sub buffers_of
{
	my ($sql) = @_;
	# Run once first, so that the caches of a new session are filled.
	my $plan = q1($node,
		"SET ROLE app; $sql; EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) $sql");
	my ($hit, $read) = (0, 0);
	for my $line (split /\n/, $plan)
	{
		last if $line =~ /^Planning/;
		$hit += $1 if $line =~ /shared hit=(\d+)/;
		$read += $1 if $line =~ /shared (?:hit=\d+ )?read=(\d+)/;
	}
	return $hit + $read;
}

# ---------------------------------------------------------------------
# Old snapshot: a lookup reads the newest version, not every version.
# ---------------------------------------------------------------------
my $snap = $node->background_psql('postgres');
$snap->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$snap->query_safe('SELECT count(*) FROM pg_class');

# cycles N: N acquire+release cycles of 'hot' as app, each its own
# transaction, so that each leaves versions the snapshot keeps.
sub cycles
{
	my ($n) = @_;
	q1($node, qq{SET ROLE app; DO \$\$ BEGIN
		FOR i IN 1 .. $n LOOP
			PERFORM dsync_acquire('hot', 'h' || i, '1 minute');
			COMMIT;
			PERFORM dsync_release('hot', 'h' || i);
			COMMIT;
		END LOOP;
	END \$\$});
	return;
}

cycles(10);
my $few = buffers_of("SELECT dsync_acquire('hot', 'probe', '1 minute'), dsync_release('hot', 'probe')");
cycles(3000);
my $pages = q1($node, "SELECT pg_relation_size('dsync_lease') / current_setting('block_size')::int");
cmp_ok($pages, '>', 20, "6,000 versions kept alive by the snapshot fill $pages pages");
my $many = buffers_of("SELECT dsync_acquire('hot', 'probe', '1 minute'), dsync_release('hot', 'probe')");
note("buffers read by an acquire and a release: $few after 10 cycles, $many after 3,010");
cmp_ok($many, '<=', $few + 10,
	'under an old snapshot, an acquire and a release read no more buffers after 3,000 more cycles');
my $leader = buffers_of("SELECT dsync_leader('hot')");
cmp_ok($leader, '<=', 10, "dsync_leader reads $leader buffers with 6,000 dead versions behind it");
is(q1($node, "SELECT dsync_acquire('hot', 'x', '1 minute') IS NOT NULL"), 't',
	'the lease is free and granted after the cycles');
is(q1($node, "SELECT dsync_leader('hot')"), 'x', 'the leader is the last grantee');
is(q1($node, "SELECT dsync_acquire('hot', 'y', '1 minute') IS NULL"), 't',
	'another holder is refused while it is held');
is(q1($node, "SELECT dsync_release('hot', 'y')"), 'f', 'a non-holder cannot release it');
is(q1($node, "SELECT dsync_release('hot', 'x')"), 't', 'the holder releases it');
$snap->query_safe('COMMIT');
$snap->quit;

# ---------------------------------------------------------------------
# The cache is a hint: answers stay right whatever moved the rows.
# ---------------------------------------------------------------------
q1($node, "SELECT count(dsync_acquire('n' || i, 'h' || i, '1 hour')) FROM generate_series(1, 200) i");
q1($node, "SELECT count(dsync_release('n' || i, 'h' || i)) FROM generate_series(1, 200, 2) i");
q1($node, 'VACUUM FULL dsync_lease');
is(q1($node, "SELECT count(*) FROM generate_series(1, 200) i
	WHERE dsync_leader('n' || i) IS DISTINCT FROM CASE WHEN i % 2 = 0 THEN 'h' || i END"),
	'0', 'after VACUUM FULL moved every row, each of 200 names has the right leader');
is(q1($node, "SELECT count(*) FROM generate_series(2, 200, 2) i WHERE NOT dsync_release('n' || i, 'h' || i)"),
	'0', 'and each holder can release its lease');

q1($node, "SELECT dsync_acquire('t', 'a', '1 hour')");
q1($node, 'TRUNCATE dsync_lease');
is(q1($node, "SELECT dsync_leader('t') IS NULL"), 't',
	'after TRUNCATE the lease has no leader (the cached location is past the end)');
is(q1($node, "SELECT dsync_acquire('t', 'b', '1 hour') IS NOT NULL AND dsync_leader('t') = 'b'"),
	't', 'and is granted afresh');

q1($node, "BEGIN; SAVEPOINT s; SELECT dsync_release('t', 'b');
	SELECT dsync_acquire('t', 'c', '1 hour'); ROLLBACK TO s; COMMIT");
is(q1($node, "SELECT dsync_leader('t')"), 'b',
	'a release and grant rolled back to a savepoint leave the holder in place');
is(q1($node, "BEGIN; SELECT dsync_release('t', 'b'); SELECT dsync_acquire('t', 'c', '1 hour') IS NOT NULL;
	SELECT dsync_leader('t'); COMMIT"),
	"t\nt\nc", 'within one transaction, a grant after a release sees the release');
is(q1($node, "SELECT dsync_leader('t')"), 'c', 'and once committed, so do others');
is(q1($node, "BEGIN; SELECT dsync_assert_held('t', 'c') > 0; SELECT dsync_release('t', 'c'); COMMIT"),
	"t\nt", 'a release after a guard in the same transaction (its own lock) takes the slow path');
is(q1($node, "SELECT dsync_leader('t') IS NULL"), 't', 'and is released');

# ---------------------------------------------------------------------
# One heap record per change.
# ---------------------------------------------------------------------

# records SQL: the heap records SQL wrote, by type, in WAL order.
sub records
{
	my ($sql) = @_;
	my $start = q1($node, 'SELECT pg_current_wal_insert_lsn()');
	q1($node, "SET ROLE app; $sql");
	# pg_walinspect reads no further than the flush.  A release commits
	# without waiting for it (lazycommit.c): the WAL writer flushes it soon.
	# (At a page's start the insert position is past the page header, up
	# to 40 bytes beyond what can ever be flushed.)
	my $insert = q1($node, 'SELECT pg_current_wal_insert_lsn()');
	$node->poll_query_until('postgres',
		"SELECT '$insert'::pg_lsn - pg_current_wal_flush_lsn() <= 40")
	  or die 'WAL not flushed';
	my $end = q1($node, 'SELECT pg_current_wal_flush_lsn()');
	return q1($node, "SELECT string_agg(record_type, ' ' ORDER BY start_lsn)
		FROM pg_get_wal_records_info('$start', '$end')
		WHERE resource_manager = 'Heap'");
}

q1($node, "SET ROLE app; SELECT dsync_acquire('w', 'a', '1 hour'); SELECT dsync_release('w', 'a')");
SKIP:
{
	# heap_update asserts that nobody asks it not to wait: on a server
	# built with assertions dsync locks first (store.c).
	skip 'the server is built with assertions: every change locks first', 4
	  if q1($node, 'SHOW debug_assertions') eq 'on';
	like(records("SELECT dsync_acquire('w', 'a', '1 hour')"), qr/^HOT_UPDATE$/,
		'a grant of a free row writes one heap record');
	like(records("SELECT dsync_renew('w', 'a')"), qr/^HOT_UPDATE$/,
		'a renewal writes one heap record');
	like(records("SELECT dsync_acquire('w', 'a', '1 hour')"), qr/^HOT_UPDATE$/,
		'a reentrant acquire writes one heap record');
	like(records("SELECT dsync_release('w', 'a')"), qr/^HOT_UPDATE$/,
		'a release writes one heap record');
}
is(q1($node, "SET ROLE app; SELECT dsync_acquire('w', 'a', '1 hour') > 0; BEGIN;
	SELECT dsync_assert_held('w', 'a') > 0; SELECT dsync_release('w', 'a'); COMMIT;
	SELECT dsync_leader('w') IS NULL"), "t\nt\nt\nt",
	'a release behind a guard of the same transaction (a row it has locked) still works');

done_testing();
