# Blocked waiters, as real clients and real administrators meet them.
#
#   - A sleeping waiter holds no table lock: a lease waiter used to keep
#     AccessShareLock on dsync_semaphore and a signal waiter
#     RowExclusiveLock on dsync_signal for the whole wait, so DROP EXTENSION
#     queued behind any role's wait, and every dsync call queued behind the
#     DROP.  Now DROP EXTENSION goes ahead at once (with lock_timeout set,
#     so that the old behaviour fails instead of hanging), and the sleepers
#     end with a clear error (42704, "extension dsync has been dropped").
#   - A waiter whose client dies leaves the queue at once: clients (psql
#     and the dsync tool) killed with SIGKILL while queued are gone from
#     dsync_waiters within seconds, not when their wait would have run out
#     (60 s), and are never granted; after a release the live waiter behind
#     them holds the lease.  The hand-off time is printed (a figure, not an
#     assertion).
#   - dsync_force_release(lease, holder, cancel_waits => true) keeps the
#     released role's queued waits out: they end with 55P03 and the lease
#     goes to the next waiter of another role; without it, the squatter's
#     queued wait takes the lease straight back.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use lib '.';
use DsyncTest;

my $node = dsync_node('waiters');
my @clients;

END
{
	for my $h (@clients)
	{
		eval { $h->kill_kill(grace => 1) };
	}
}

# A psql client running one statement in the background.
sub client
{
	my ($sql, %opt) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('psql', '-X', '-A', '-t', '-v', 'VERBOSITY=verbose', '-d',
		$node->connstr('postgres'), '-c', $sql);
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	my $c = { h => $h, out => \$out, err => \$err };
	push @clients, $h;
	return $c;
}

# Wait for a background client to end; its stdout and stderr.
sub finish
{
	my ($c) = @_;
	eval { $c->{h}->finish };
	chomp(my $out = ${ $c->{out} });
	return ($out, ${ $c->{err} });
}

sub waiting
{
	my ($name, $holder) = @_;
	return wait_for($node,
		"SELECT count(*) = 1 FROM dsync_waiters WHERE name = '$name' AND holder = '$holder'");
}

# --- a sleeping waiter holds no table lock; DROP EXTENSION ends it ---------------

q1($node, "SELECT dsync_acquire('held', 'a', '1 hour')");
my $lw = client("SELECT dsync_acquire('held', 'b', '1 hour', '60 s')");
my $sw = client("SELECT dsync_event_wait('ev', '60 s')");
ok(waiting('held', 'b'), 'a lease waiter is queued');
ok(wait_for($node, "SELECT count(*) = 1 FROM dsync_waiters WHERE kind = 'event'"),
	'a signal waiter is queued');
is(q1($node,
		"SELECT count(*) FROM pg_locks l JOIN dsync_waiters w ON w.pid = l.pid"
		  . " WHERE l.locktype = 'relation'"),
	'0', 'the sleeping waiters hold no table lock');
is(q1($node, "SELECT dsync_acquire('other', 'c', '1 minute', '0') IS NOT NULL"),
	't', 'a wait = 0 acquire meanwhile is granted at once');
my ($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '10s'; DROP EXTENSION dsync;");
is($ret, 0, 'DROP EXTENSION does not queue behind the sleeping waiters')
  or diag($err);
my ($lo, $le) = finish($lw);
my ($so, $se) = finish($sw);
like($le, qr/ERROR:\s+42704: extension "dsync" has been dropped from this database/,
	'the lease waiter ends with a clear error');
like($se, qr/ERROR:\s+42704: extension "dsync" has been dropped from this database/,
	'the signal waiter ends with a clear error');
unlike($le . $se, qr/could not open relation|XX000/, 'no internal error');
$node->safe_psql('postgres', 'CREATE EXTENSION dsync');

# --- dead waiters leave the queue and are never granted ----------------------------

q1($node, "SELECT dsync_acquire('d', 'holder', '1 hour')");
my $dead1 = client("SELECT dsync_acquire('d', 'dead1', '30 s', '60 s')");
ok(waiting('d', 'dead1'), 'dead1 is queued');
my $dead2 = client("SELECT dsync_acquire('d', 'dead2', '30 s', '60 s')");
ok(waiting('d', 'dead2'), 'dead2 is queued behind it');
my $live = client("SELECT dsync_acquire('d', 'live', '30 s', '60 s') IS NOT NULL AS granted");
ok(waiting('d', 'live'), 'the live waiter is queued behind both');

# The dsync tool, killed while it waits in a backend, is a dead waiter too.
# (Waiting in the line, its default, it has no backend to die with: its
# place lapses at its ttl, as t/044_queue_faults.pl shows for any client.)
$ENV{PGHOST} = $node->host;
$ENV{PGPORT} = $node->port;
$ENV{PGDATABASE} = 'postgres';
my $tool = IPC::Run::start([ 'dsync', 'lock', 'd', '--holder', 'deadtool', '--wait', '60s',
		'--no-queue', '--', 'sleep', '1' ], '<', \undef, '>', \my $tout, '2>', \my $terr);
push @clients, $tool;
ok(waiting('d', 'deadtool'), 'a waiting dsync lock is queued');

$dead1->{h}->signal('KILL');
$dead2->{h}->signal('KILL');
$tool->signal('KILL');
finish($dead1);
finish($dead2);
eval { $tool->finish };
ok(wait_for($node,
		"SELECT array_agg(holder ORDER BY since) = '{live}' FROM dsync_waiters WHERE name = 'd'",
		20),
	'killed clients leave the queue at once (their waits had 60 s to run)');
my $released_at = q1($node,
	"SELECT clock_timestamp() FROM (SELECT dsync_release('d', 'holder')) r");
my ($lout) = finish($live);
is($lout, 't', 'the live waiter behind the dead ones is granted the lease');
is(q1($node, "SELECT holder FROM dsync_leases WHERE lease = 'd'"), 'live',
	'the live waiter holds it; no dead waiter was ever granted it');
my $handoff = q1($node,
	"SELECT round(extract(epoch FROM acquired_at - '$released_at'::timestamptz) * 1000, 2)"
	  . " FROM dsync_leases WHERE lease = 'd'");
note("release to the live waiter holding the lease, behind 3 killed waiters: $handoff ms");
diag("dead-waiter hand-off: $handoff ms");
q1($node, "SELECT dsync_force_release('d')");

# A killed first-in-line waiter: the next one is woken by its leaving.
q1($node, "SELECT dsync_acquire('e', 'holder', '1 hour')");
my $first = client("SELECT dsync_acquire('e', 'first', '30 s', '60 s')");
ok(waiting('e', 'first'), 'first is queued');
my $second = client("SELECT dsync_acquire('e', 'second', '30 s', '60 s') IS NOT NULL");
ok(waiting('e', 'second'), 'second is queued');
q1($node, "SELECT dsync_release('e', 'holder')");
ok(wait_for($node, "SELECT dsync_leader('e') = 'first'"), 'first gets the lease');
q1($node, "SELECT dsync_release('e', 'first')");
my ($s2) = finish($second);
is($s2, 't', 'then second');
finish($first);
q1($node, "SELECT dsync_force_release('e')");

# --- force-release that keeps the squatter's queued waits out ----------------------

$node->safe_psql('postgres', q{
	CREATE ROLE squatter LOGIN;
	CREATE ROLE neighbour LOGIN;
	CREATE ROLE admin LOGIN;
	GRANT EXECUTE ON FUNCTION dsync_force_release(text, text, boolean) TO admin;
});
sub as_role
{
	my ($role, $sql) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ 'psql', '-X', '-A', '-t', '-v', 'VERBOSITY=verbose',
			'-U', $role, '-d', $node->connstr('postgres'), '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err);
	push @clients, $h;
	return { h => $h, out => \$out, err => \$err };
}

for my $cancel (0, 1)
{
	my $l = "squat$cancel";
	$node->safe_psql('postgres', "SELECT dsync_acquire('$l', 'sq1', '1 hour')",
		extra_params => [ '-U', 'squatter' ]);
	my $sq2 = as_role('squatter', "SELECT dsync_acquire('$l', 'sq2', '1 hour', '60 s') IS NOT NULL");
	ok(waiting($l, 'sq2'), "the squatter queues a second wait ($l)");
	my $nb = as_role('neighbour', "SELECT dsync_acquire('$l', 'nb', '1 hour', '60 s') IS NOT NULL");
	ok(waiting($l, 'nb'), "a neighbour queues behind it ($l)");
	my ($r, $o, $e) = $node->psql('postgres',
		"SELECT dsync_force_release('$l', NULL, " . ($cancel ? 'true' : 'false') . ")",
		extra_params => [ '-U', 'admin' ]);
	is($o, '1', "the administrator releases the squatter ($l)");
	if ($cancel)
	{
		my ($so2, $se2) = finish($sq2);
		like($se2, qr/ERROR:\s+55P03: wait for lease "squat1" was ended by dsync_force_release/,
			'with cancel_waits the squatter\'s queued wait ends with 55P03');
		my ($no) = finish($nb);
		is($no, 't', 'and the neighbour gets the lease');
		is(q1($node, "SELECT holder FROM dsync_leases WHERE lease = '$l'"), 'nb',
			'the neighbour holds it');
	}
	else
	{
		my ($so2) = finish($sq2);
		is($so2, 't', 'without cancel_waits the squatter takes it straight back');
		q1($node, "SELECT dsync_force_release('$l', 'sq2')");
		finish($nb);
	}
	q1($node, "SELECT dsync_force_release('$l')");
}

done_testing();
