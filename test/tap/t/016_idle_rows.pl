# Rows of names nobody uses any more do not pile up, names in use keep
# their HOT fast path, and a lookup in the view costs an index probe
# whatever the table holds.
#
# A released lease keeps its row (holder NULL) so that the next grant of
# the name is a HOT update.  Rows of names used once used to stay for ever
# (a million names: every view query read them all).  The reaper now
# removes a row once it has been unused for dsync.idle_row_retention
# (2 s here).  This test proves:
#   - 1,000 names acquired and released once are removed after the
#     retention, and so are expired ones the reaper cleared;
#   - so are those of eight backends at once, whose events went to
#     several lanes of the event queue;
#   - a name acquired and released every 0.3 s keeps its row meanwhile:
#     no insert, every update HOT;
#   - permit rows of a defined semaphore stay; once it is dropped, its
#     released permits go;
#   - after a restart the reaper finds released rows again and removes
#     them;
#   - dsync.reap_batch_size is bounded, and 30,000 leases expiring together
#     are cleared at the largest batch without the reaper restarting;
#   - with 100,000 rows in the table, a view lookup by lease touches a
#     handful of buffers (the set-returning function read them all).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use lib '.';
use DsyncTest;

my $node = dsync_node('idle', 'dsync.idle_row_retention = 2s');

sub rows
{
	my ($pattern, $table) = @_;
	return q1($node, "SELECT count(*) FROM " . ($table // 'dsync_lease') . " WHERE name LIKE '$pattern'");
}

# --- names used once ---------------------------------------------------------

q1($node, "SELECT count(dsync_acquire('once-' || i, 'h', '1 hour')), "
	  . "count(*) FILTER (WHERE dsync_release('once-' || i, 'h')) FROM generate_series(1, 1000) i");
q1($node, "SELECT count(dsync_acquire('expire-' || i, 'h', '500 ms')) FROM generate_series(1, 100) i");
is(rows('once-%') + rows('expire-%'), 1100, '1,100 rows after the grants');
ok(wait_for($node, "SELECT count(*) = 0 FROM dsync_lease WHERE name LIKE 'once-%' OR name LIKE 'expire-%'"),
	'released and expired rows are removed once unused for dsync.idle_row_retention');

# --- from many backends at once ---------------------------------------------
# Events nobody hears go to the committing backend's lane of the event
# queue (one of 4, by PGPROC number); the worker must drain every lane.
# Eight backends connected together have eight PGPROCs, so several lanes.
my @lane_clients = map { psql_client($node, 'postgres') } 1 .. 8;
for my $c (0 .. $#lane_clients)
{
	ok( send_wait(
			$lane_clients[$c],
			"SELECT count(dsync_acquire('lane-$c-' || i, 'h', '1 hour')) + "
			  . "count(*) FILTER (WHERE dsync_release('lane-$c-' || i, 'h')) "
			  . "FROM generate_series(1, 50) i;",
			qr/^100$/m),
		"backend $c acquired and released 50 names");
}
is(rows('lane-%'), 400, '400 rows after eight backends used them at once');
ok(wait_for($node, "SELECT count(*) = 0 FROM dsync_lease WHERE name LIKE 'lane-%'"),
	"every backend's released rows are removed: the worker read every lane");

# --- a name in use keeps its row and its HOT updates ----------------------------

q1($node, "SELECT dsync_acquire('hot', 'h', '1 hour'), dsync_release('hot', 'h')");
my $stats = "SELECT n_tup_ins || ' ' || n_tup_upd || ' ' || n_tup_hot_upd FROM pg_stat_user_tables "
  . "WHERE relname = 'dsync_lease'";
q1($node, "SELECT pg_stat_force_next_flush()");
my ($ins0, $upd0, $hot0) = split / /, q1($node, $stats);
for (1 .. 15)
{
	q1($node, "SELECT dsync_acquire('hot', 'h', '1 hour'), dsync_release('hot', 'h')");
	usleep(300_000);
}
q1($node, "SELECT pg_stat_force_next_flush()");
my ($ins1, $upd1, $hot1) = split / /, q1($node, $stats);
is(rows('hot'), 1, 'a name reused every 0.3 s keeps its row over 4.5 s');
is($ins1 - $ins0, 0, 'no insert for it meanwhile');
is($hot1 - $hot0, $upd1 - $upd0, 'every update of it is HOT');
cmp_ok($upd1 - $upd0, '>=', 30, 'and it was updated (acquire and release)');

# --- semaphores -----------------------------------------------------------------

q1($node, "SELECT dsync_semaphore_create('sem', 5)");
q1($node, "SELECT dsync_acquire('sem', 'p', '1 hour'), dsync_release('sem', 'p')");
sleep 3;
is(rows('sem', 'dsync_permit'), 5, "a defined semaphore's permit rows stay");
q1($node, "SELECT dsync_acquire('sem', 'p', '1 hour')");
q1($node, "SELECT dsync_semaphore_drop('sem')");
is(rows('sem', 'dsync_permit'), 1, 'dropping it removes its free permits; the held one stays');
q1($node, "SELECT dsync_release('sem', 'p')");
ok(wait_for($node, "SELECT count(*) = 0 FROM dsync_permit WHERE name = 'sem'"),
	'once released, the dropped semaphore\'s permit goes too');

# --- after a restart ----------------------------------------------------------

$node->append_conf('postgresql.conf', "dsync.idle_row_retention = -1\n");
$node->reload;
q1($node, "SELECT count(dsync_acquire('kept-' || i, 'h', '1 hour')), "
	  . "count(*) FILTER (WHERE dsync_release('kept-' || i, 'h')) FROM generate_series(1, 100) i");
sleep 3;
is(rows('kept-%'), 100, 'with dsync.idle_row_retention = -1 released rows stay');
$node->append_conf('postgresql.conf', "dsync.idle_row_retention = 2s\n");
$node->restart;
ok(wait_for($node, "SELECT count(*) = 0 FROM dsync_lease WHERE name LIKE 'kept-%'"),
	'after a restart the reaper finds them and removes them');

# --- settings are bounded to what works ------------------------------------------

my ($ret, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET dsync.reap_batch_size = 1000000");
like($err, qr/1000000 is outside the valid range for parameter "dsync.reap_batch_size" \(1 \.\. 10000\)/,
	'dsync.reap_batch_size is bounded (it used to accept values that crash-looped the reaper)');
$node->append_conf('postgresql.conf', "dsync.reap_batch_size = 10000\n");
$node->reload;
my $reaper = reaper_pid($node);
q1($node, "SELECT count(dsync_acquire('mass-' || i, 'h', '1 second')) FROM generate_series(1, 30000) i");
ok(wait_for($node, "SELECT count(*) = 0 FROM dsync_lease WHERE name LIKE 'mass-%' AND holder IS NOT NULL", 60),
	'30,000 leases expiring together are cleared with the largest batch');
is(q1($node, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'dsync reaper' AND datname = 'postgres'"),
	$reaper, 'by the same reaper: it never ran out of lock table');
$node->append_conf('postgresql.conf', "dsync.reap_batch_size = 100\n");
$node->reload;

# --- a lookup at 100,000 rows ---------------------------------------------------

$node->append_conf('postgresql.conf', "dsync.idle_row_retention = -1\n");
$node->reload;
q1($node, "INSERT INTO dsync_lease (name, slot, renewed_at) "
	  . "SELECT 'big-' || i, 0, now() FROM generate_series(1, 100000) i");
q1($node, "SELECT dsync_acquire('big-50000', 'h', '1 hour')");
# Caches are warmed by running the query once first in the same session
# (dsync_leader alone no longer opens every table and index the view
# reads); the Foreign Scan's own buffers are the second run's.
sub scan_buffers
{
	my ($query) = @_;
	my $plan = q1($node, "SELECT dsync_leader('big-1'); $query; "
		  . "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) $query");
	my ($scan) = $plan =~ /(Foreign Scan.*?Buffers: shared[^\n]*)/s;
	$scan //= '';
	my ($hit) = $scan =~ /hit=(\d+)/;
	my ($read) = $scan =~ /read=(\d+)/;
	return (($hit // 0) + ($read // 0), $scan);
}
my ($buffers, $scan) = scan_buffers("SELECT expires_at FROM dsync_leases WHERE lease = 'big-50000'");
cmp_ok($buffers, '<=', 12,
	"a lookup by lease in a 100,000-row table touches a few buffers ($buffers)");
like($scan, qr/dsync Lookup: by lease \(index probe\)/, 'it is an index probe');
($buffers) = scan_buffers("SELECT count(*) FROM dsync_leases");
cmp_ok($buffers, '>', 1000, "while a scan of the view reads the table ($buffers)");

done_testing();
