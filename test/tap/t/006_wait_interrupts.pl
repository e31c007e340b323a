# Blocking waits end promptly and cleanly: pg_cancel_backend and
# statement_timeout raise SQLSTATE 57014, pg_terminate_backend and a fast
# shutdown end the backend, and in every case the waiter leaves the queue,
# so it can never block later acquirers.  A waiting backend shows the
# Extension wait event and uses no CPU while it sleeps.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('waits');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dsync'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dsync');
$node->safe_psql('postgres', "SELECT dsync_acquire('busy', 'holder', '1 hour')");

# Start a psql that blocks in dsync_acquire; returns the harness, its
# output buffers and the backend pid once the wait shows.
sub start_waiter
{
	my ($name, $setup) = @_;
	my ($out, $err) = ('', '');
	my $sql = "\\set VERBOSITY verbose\n" . ($setup // '')
	  . "SELECT dsync_acquire('busy', '$name', '1 minute', NULL);\n";
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-f', '-' ],
		'<', \$sql, '>', \$out, '2>', \$err);
	my $pid = '';
	for (1 .. 600)
	{
		$h->pump_nb;
		$pid = $node->safe_psql('postgres',
			"SELECT pid FROM dsync_waiters WHERE holder = '$name'");
		last if $pid =~ /^\d+$/;
		select(undef, undef, undef, 0.05);
	}
	like($pid, qr/^\d+$/, "$name is queued in dsync_waiters");
	return ($h, \$out, \$err, $pid);
}

sub waiters
{
	return $node->safe_psql('postgres', 'SELECT count(*) FROM dsync_waiters');
}

# Observability and no CPU while waiting.
my ($h, $out, $err, $pid) = start_waiter('w-cancel');
is( $node->safe_psql('postgres',
		"SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = $pid"),
	'Extension/Extension',
	'a waiting backend shows the Extension wait event');
my $stat = slurp_file("/proc/$pid/stat");
my @before = (split / /, $stat)[ 13, 14 ];
sleep 2;
$stat = slurp_file("/proc/$pid/stat");
my @after = (split / /, $stat)[ 13, 14 ];
cmp_ok(
	($after[0] + $after[1]) - ($before[0] + $before[1]),
	'<=', 1, 'a waiting backend uses no CPU while it sleeps (clock ticks over 2 s)');

# pg_cancel_backend
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
$h->finish;
like($$err, qr/57014: canceling statement due to user request/,
	'pg_cancel_backend ends the wait with SQLSTATE 57014');
is(waiters(), '0', 'the cancelled waiter left the queue');

# statement_timeout
($h, $out, $err, $pid) =
  start_waiter('w-timeout', "SET statement_timeout = '1s';\n");
$h->finish;
like($$err, qr/57014: canceling statement due to statement timeout/,
	'statement_timeout ends the wait with SQLSTATE 57014');
is(waiters(), '0', 'the timed-out waiter left the queue');

# pg_terminate_backend
($h, $out, $err, $pid) = start_waiter('w-terminate');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$h->finish;
like($$err, qr/terminating connection due to administrator command/,
	'pg_terminate_backend ends the waiting backend');
$node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM dsync_waiters')
  or die 'terminated waiter still queued';
is(waiters(), '0', 'the terminated waiter left the queue');

# The queue is really empty: once the lease is free, a wait = 0 caller
# gets it (a ghost waiter would make it refuse).
$node->safe_psql('postgres', "SELECT dsync_release('busy', 'holder')");
isnt($node->safe_psql('postgres', "SELECT dsync_acquire('busy', 'after')"),
	'', 'after the interrupted waits, the free lease is granted at once');

# A fast shutdown ends a wait: pg_ctl stop -m fast would fail after its
# timeout if the waiting backend held the shutdown up.
($h, $out, $err, $pid) = start_waiter('w-shutdown');
$node->stop('fast');
$h->finish;
like($$err, qr/terminating connection due to administrator command|server closed the connection/,
	'a fast shutdown ends the waiting backend');
$node->start;
is(waiters(), '0', 'no waiter survives a restart');
is($node->safe_psql('postgres', "SELECT dsync_leader('busy')"),
	'after', 'the lease outlives the restart');

done_testing();
