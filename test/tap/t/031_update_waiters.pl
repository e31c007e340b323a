# ALTER EXTENSION dsync UPDATE while waiters sleep inside dsync_acquire.
#
# The update from 1.3 replaces dsync_acquire (a new function, a new OID),
# so a waiter that began in the old one wakes to find its function gone.
# It must go on waiting and be granted once the holder releases, for a
# lease and for a semaphore's permit, and no message may show "(null)".
# DROP EXTENSION under a waiter still says that the extension was dropped.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $node = PostgreSQL::Test::Cluster->new('update');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dsync'\n");
$node->start;
stop_at_end($node);
$node->safe_psql('postgres', "CREATE EXTENSION dsync VERSION '1.3'");

# Holders: a lease, and the only permit of a semaphore.
$node->safe_psql('postgres', q{
	SELECT dsync_acquire('upd', 'holder', '60 s');
	SELECT dsync_semaphore_create('upd-sem', 1);
	SELECT dsync_acquire('upd-sem', 'holder', '60 s');
});

# Waiters, in the 1.3 functions, for up to 60 s.
my %waiter;
for my $name ('upd', 'upd-sem')
{
	my $w = $node->background_psql('postgres', on_error_stop => 0);
	$w->query_until(qr/waiting/, qq{
		\\echo waiting
		SELECT 'granted:' || coalesce(dsync_acquire('$name', 'waiter', '60 s', '60 s')::text, 'NULL') AS result;
	});
	$waiter{$name} = $w;
}
ok(wait_for($node,
	"SELECT count(*) = 2 FROM pg_stat_activity WHERE query LIKE '%dsync_acquire(''upd%''waiter''%' "
	  . "AND wait_event IS NOT NULL AND state = 'active'"),
	'both waiters sleep inside dsync_acquire');

$node->safe_psql('postgres', 'ALTER EXTENSION dsync UPDATE');
is(q1($node, "SELECT extversion FROM pg_extension WHERE extname = 'dsync'"),
	q1($node, "SELECT default_version FROM pg_available_extensions WHERE name = 'dsync'"),
	'the extension is updated under the waiters');

# The holder lets go through the new functions: each waiter is granted.
$node->safe_psql('postgres', q{
	SELECT dsync_release('upd', 'holder');
	SELECT dsync_release('upd-sem', 'holder');
});
for my $name ('upd', 'upd-sem')
{
	my $w = $waiter{$name};
	my $out = '';
	my $deadline = time + 30;
	while ($out !~ /granted:|ERROR/ && time < $deadline)
	{
		$w->{run}->pump_nb;
		$out = $w->{stdout} . $w->{stderr};
		select(undef, undef, undef, 0.1);
	}
	like($out, qr/granted:\d+/, "$name: the waiter is granted after the update");
	unlike($out, qr/\(null\)/, "$name: no message shows (null)");
	$w->quit;
}
is(q1($node, "SELECT holder FROM dsync_leases WHERE lease = 'upd'"),
	'waiter', 'dsync_leases shows the waiter holding the lease');

# DROP EXTENSION under a waiter is still reported as such.
$node->safe_psql('postgres', q{SELECT dsync_acquire('drop', 'holder', '60 s')});
my $w = $node->background_psql('postgres', on_error_stop => 0);
$w->query_until(qr/waiting/, q{
	\echo waiting
	SELECT dsync_acquire('drop', 'waiter', '60 s', '60 s');
});
ok(wait_for($node,
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%dsync_acquire(''drop'', ''waiter''%' "
	  . "AND wait_event IS NOT NULL AND state = 'active'"),
	'a waiter sleeps before DROP EXTENSION');
$node->safe_psql('postgres', 'DROP EXTENSION dsync');
my $out = '';
my $deadline = time + 30;
while ($out !~ /ERROR/ && time < $deadline)
{
	$w->{run}->pump_nb;
	$out = $w->{stderr};
	select(undef, undef, undef, 0.1);
}
like($out, qr/extension "dsync" has been dropped/, 'the waiter is told the extension was dropped');
$w->quit;

done_testing();
