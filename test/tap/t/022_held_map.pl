# The held map (src/storage/heldmap.c): ephemeral grants skip dsync_lease for names
# no durable lease can hold, and never skip it for one that may.
#
# An ephemeral grant must not overlap a durable lease of the same name.  It
# used to look every name up in dsync_lease; now a map in shared memory
# tells it when no durable holder of the name can be live or on its way,
# and only then does it skip the table.  This test proves, with
# dsync.ephemeral_max_ttl = 2 (seconds):
#   1. the table is skipped: once the reaper has read dsync_lease into the
#      map, 50 ephemeral acquire+release cycles read no block of dsync_lease
#      (pg_statio_all_tables), while 50 within the expiry of durable
#      holders the names had just before read it;
#   2. a durable lease, and a shared one, granted before a restart (ttl
#      300 s) refuse an ephemeral grant after the restart, with the map in
#      use;
#   3. a guard (dsync_assert_held in an open transaction) of a durable lease
#      that has since expired refuses an ephemeral grant until the guard's
#      transaction ends (and the reaper has cleared the expired holder);
#   4. an uncommitted durable grant refuses an ephemeral grant even past
#      its expiry, and a rolled-back one no longer does;
#   5. a renewal (dsync_renew to 300 s) of a durable lease of 2 s refuses an
#      ephemeral grant after the first 2 s.
# (A transaction with dsync changes cannot be prepared, so none survives
# a restart.)
# Without the map each case passes trivially (every grant looks at the
# table), so case 1 comes first and each later case checks again that the
# map is in use.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use lib '.';
use DsyncTest;

my $node = dsync_node('heldmap', 'dsync.ephemeral_max_ttl = 2');

my $reads_sql =
	"SELECT coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0) "
  . "+ coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0) "
  . "FROM pg_statio_all_tables WHERE relid = 'dsync_lease'::regclass";

# Blocks of dsync_lease read by $n ephemeral acquire+release cycles of
# names $prefix1..$prefix$n, in one session (its statistics are flushed
# when it exits).
sub table_reads
{
	my ($prefix, $n) = @_;
	my $before = q1($node, $reads_sql);
	my $sql = join('',
		map {
			"SELECT dsync_acquire('$prefix$_', 'e', '2 s', '0', NULL, false); "
			  . "SELECT dsync_release('$prefix$_', 'e');\n"
		} 1 .. $n);
	$node->safe_psql('postgres', $sql);
	my $after;
	# The exiting backend's counts reach the shared statistics soon after.
	for (1 .. 40)
	{
		$after = q1($node, "$reads_sql");
		last if $after != $before;
		usleep(50_000);
	}
	return $after - $before;
}

# Wait for the grace after a start, then until ephemeral grants skip the
# table (the reaper has filled the map): true if they do.
sub map_in_use
{
	my ($round) = @_;
	wait_for($node,
		"SELECT dsync_acquire('grace', 'g', '1 s', '10 s', NULL, false) IS NOT NULL")
	  or return 0;
	for my $try (1 .. 30)
	{
		return 1 if table_reads("free-$round-$try-", 10) == 0;
		sleep 1;
	}
	return 0;
}

# An ephemeral acquire with wait 0: the token, or '' if refused.
sub eph
{
	my ($name, $holder) = @_;
	return q1($node,
		"SELECT dsync_acquire('$name', '$holder', '2 s', '0', NULL, false)");
}

# =========================================================================
# 1. The table is skipped once the map is in use
# =========================================================================

ok(map_in_use('a'), 'skip: ephemeral grants read no block of dsync_lease');
is(table_reads('skip-', 50), 0, 'skip: 50 cycles on new names read no block');
$node->safe_psql('postgres',
	"SELECT dsync_acquire('held-' || i, 'd', '30 s'), dsync_release('held-' || i, 'd') "
	  . "FROM generate_series(1, 50) i");
cmp_ok(table_reads('held-', 50), '>=', 50,
	'skip: 50 cycles on names whose durable holders were live just before look at the table');

# =========================================================================
# 2. A durable lease from before a restart
# =========================================================================

like(q1($node, "SELECT dsync_acquire('restart-1', 'd', '300 s')"), qr/^\d+$/,
	'restart: a durable lease of 300 s');
like(q1($node, "SELECT dsync_acquire_shared('restart-sh', 'd', '300 s')"), qr/^\d+$/,
	'restart: a shared lease of 300 s');
$node->restart;
ok(map_in_use('b'), 'restart: the map is in use again after the restart');
is(eph('restart-1', 'e'), '', 'restart: the durable lease refuses an ephemeral grant');
is(eph('restart-sh', 'e'), '', 'restart: the shared lease refuses an ephemeral grant');
like(eph('restart-free', 'e'), qr/^\d+$/, 'restart: a free name is granted');

# =========================================================================
# 3. A guard of an expired durable lease
# =========================================================================

like(q1($node, "SELECT dsync_acquire('guard-1', 'd', '1 s')"), qr/^\d+$/,
	'guard: a durable lease of 1 s');
my $guard = $node->background_psql('postgres');
like($guard->query_safe("BEGIN; SELECT dsync_assert_held('guard-1', 'd');"), qr/^\d+$/,
	'guard: guarded in an open transaction');
ok(wait_for($node,
		"SELECT expires_at < now() FROM dsync_lease WHERE name = 'guard-1' AND slot = 0"),
	'guard: the lease has expired');
is(eph('guard-1', 'e'), '', 'guard: an ephemeral grant is refused while guarded');
$guard->query_safe('COMMIT');
# The guard kept the reaper from clearing the expired holder; it does so
# once the guard has ended, and only then is the name free for an
# ephemeral grant (its "expired" comes first: 039_event_order.pl).
like(q1($node, "SELECT dsync_acquire('guard-1', 'e', '2 s', '10 s', NULL, false)"),
	qr/^\d+$/, 'guard: granted once the guard has ended and the holder is cleared');

# =========================================================================
# 4. An uncommitted durable grant
# =========================================================================

my $open = $node->background_psql('postgres');
like($open->query_safe("BEGIN; SELECT dsync_acquire('open-1', 'd', '1 s');"), qr/^\d+$/,
	'uncommitted: a durable grant of 1 s in an open transaction');
sleep 2;
is(eph('open-1', 'e'), '', 'uncommitted: refused past its expiry while uncommitted');
$open->query_safe('ROLLBACK');
like(eph('open-1', 'e'), qr/^\d+$/, 'uncommitted: granted once rolled back');

# =========================================================================
# 5. A renewal beyond the first expiry
# =========================================================================

like(q1($node, "SELECT dsync_acquire('renew-1', 'd', '2 s')"), qr/^\d+$/,
	'renew: a durable lease of 2 s');
ok(q1($node, "SELECT dsync_renew('renew-1', 'd', '300 s') IS NOT NULL") eq 't',
	'renew: renewed to 300 s');
sleep 3;
is(eph('renew-1', 'e'), '', 'renew: refused after the first 2 s');
ok(map_in_use('c'), 'renew: the map is in use');

done_testing();
