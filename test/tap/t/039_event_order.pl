# Events of one name come in commit order across the kinds of lease: the
# holder's "expired" before the next holder's "acquired", whichever kinds
# the two are (issue 39, item 4).
#
# A holder takes a name with a ttl of 300 ms; a waiter of another (or the
# same) kind blocks on it in dsync_acquire with a wait of 10 s and is
# granted once the holder's time has passed.  The name's events in the
# event log (dsync_events_since, kept while someone listens), in seq
# order, must be exactly
#     acquired:h1, expired:h1, acquired:h2
# for every pair of kinds that can meet on one name: durable (plain),
# ephemeral and shared (read-write) holders and waiters; a permit left
# over from a dropped semaphore (a holder of the name in dsync_permit);
# and a permit of a one-permit semaphore defined over the holder's plain
# lock.  Each pair runs ROUNDS times (20), each round on a name of its own.
#
# Before the fix, a durable, shared or left-over permit holder followed by
# an ephemeral waiter gave "acquired:h1, acquired:h2, expired:h1" in most
# rounds: the ephemeral grant found the expired holder free (the held map
# cleared the name, or the row was not cleared yet) and announced its
# grant at once, while the reaper announced the expiry when its clearing
# transaction committed, after.  An ephemeral holder followed by a
# durable, shared or permit waiter did so in every round: the durable
# grant went ahead once the ephemeral lease had expired, and the reaper
# announced that expiry when its pass got there.  A shared or left-over
# permit holder followed by a durable (exclusive) waiter, and a plain
# holder followed by a permit waiter, did so in some or all rounds: the
# grant left the other row's expiry to the reaper.
#
# Then, with no worker for the database (max_worker_processes = 1: the
# launcher's), an ephemeral waiter behind an expired durable holder waits
# until the holder is cleared (here by dsync_reap()) and is then granted.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $ROUNDS = $ENV{DSYNC_ORDER_ROUNDS} // 20;

my $node = dsync_node('order', 'dsync.ephemeral_max_ttl = 2');

# A listener keeps the database's events sent and logged.
my $listener = Listener->new($node);
$listener->listen('order-listener');

ok(wait_for($node,
		"SELECT dsync_acquire('order-grace', 'g', '1 s', '10 s', NULL, false) IS NOT NULL"),
	'ephemeral grants are open');

# One session per side, as a holder and a waiter would have.
my $holder = $node->background_psql('postgres');
my $waiter = $node->background_psql('postgres');

my %take = (
	durable => sub {
		my ($name, $who, $ttl, $wait) = @_;
		return "SELECT dsync_acquire('$name', '$who', '$ttl', '$wait')";
	},
	ephemeral => sub {
		my ($name, $who, $ttl, $wait) = @_;
		return "SELECT dsync_acquire('$name', '$who', '$ttl', '$wait', NULL, false)";
	},
	shared => sub {
		my ($name, $who, $ttl, $wait) = @_;
		return "SELECT dsync_acquire_shared('$name', '$who', '$ttl', '$wait')";
	},
	# A permit left over from a dropped semaphore: a durable holder of
	# the name in dsync_permit.
	permit => sub {
		my ($name, $who, $ttl, $wait) = @_;
		return "SELECT dsync_semaphore_create('$name', 2); "
		  . "SELECT dsync_acquire('$name', '$who', '$ttl', '$wait'); "
		  . "SELECT dsync_semaphore_drop('$name')";
	},
	# A permit of a semaphore of one permit defined over the holder (a
	# plain lock, durable or ephemeral, taken before the definition).
	semaphore => sub {
		my ($name, $who, $ttl, $wait) = @_;
		return "SELECT dsync_semaphore_create('$name', 1); "
		  . "SELECT dsync_acquire('$name', '$who', '$ttl', '$wait')";
	},
);

# The name's events in the log, in seq order, as "event:holder".
sub events_of
{
	my ($name) = @_;
	return q1($node,
		    "SELECT string_agg((payload->>'event') || ':' || (payload->>'holder'), ', ' ORDER BY seq) "
		  . "FROM dsync_events_since(0, ARRAY['$name'])");
}

# One round: the events of the name, or a description of what went wrong.
sub round
{
	my ($hkind, $wkind, $name) = @_;
	$holder->query_safe($take{$hkind}->($name, 'h1', '300 ms', '0'));
	# The token is the last line (a semaphore's definition comes first).
	my ($token) = $waiter->query_safe($take{$wkind}->($name, 'h2', '2 s', '10 s')) =~ /(\S*)\s*\z/;
	return "h2 not granted ($token)" unless $token =~ /^\d+$/;
	# Both the grant and the expiry reach the log, in whichever order.
	wait_for($node,
		"SELECT count(*) FILTER (WHERE payload->>'event' = 'expired') >= 1 "
		  . "AND count(*) FILTER (WHERE payload->>'holder' = 'h2') >= 1 "
		  . "FROM dsync_events_since(0, ARRAY['$name'])", 10);
	return events_of($name);
}

my @pairs = (
	[ 'durable',   'ephemeral' ],
	[ 'shared',    'ephemeral' ],
	[ 'permit',    'ephemeral' ],
	[ 'ephemeral', 'durable' ],
	[ 'ephemeral', 'shared' ],
	[ 'ephemeral', 'semaphore' ],
	[ 'ephemeral', 'ephemeral' ],
	[ 'durable',   'durable' ],
	[ 'shared',    'durable' ],
	[ 'permit',    'durable' ],
	[ 'durable',   'shared' ],
	[ 'durable',   'semaphore' ],
	[ 'permit',    'semaphore' ],
);

for my $pair (@pairs)
{
	my ($hkind, $wkind) = @$pair;
	my %seen;
	my $wrong = 0;
	for my $i (1 .. $ROUNDS)
	{
		my $got = round($hkind, $wkind, "order-$hkind-$wkind-$i");
		$seen{$got}++;
		$wrong++ if $got ne 'acquired:h1, expired:h1, acquired:h2';
	}
	note("$hkind -> $wkind: $_ ($seen{$_} of $ROUNDS)") for sort keys %seen;
	is($wrong, 0,
		"$hkind holder, $wkind waiter: expired:h1 before acquired:h2 in every round");
}

$holder->quit;
$waiter->quit;

# =========================================================================
# No worker: the waiter is granted once dsync_reap() clears the holder
# =========================================================================

$node->append_conf('postgresql.conf', "max_worker_processes = 1\nmax_logical_replication_workers = 0\n");
$node->restart;
ok(wait_for($node,
		"SELECT dsync_acquire('order-grace', 'g', '1 s', '10 s', NULL, false) IS NOT NULL"),
	'no worker: ephemeral grants are open again');
is(q1($node, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dsync reaper'"),
	'0', 'no worker: no reaper runs');

like(q1($node, "SELECT dsync_acquire('order-none', 'h1', '300 ms')"), qr/^\d+$/,
	'no worker: a durable holder of 300 ms');
my $blocked = $node->background_psql('postgres');
$blocked->query_until(qr/started/,
	"\\echo started\nSELECT dsync_acquire('order-none', 'h2', '2 s', '60 s', NULL, false);\n");
ok(wait_for($node,
		"SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'order-none' "
		  . "AND now() > (SELECT expires_at FROM dsync_lease WHERE name = 'order-none')"),
	'no worker: the ephemeral waiter waits past the holder\'s expiry');
is(q1($node, "SELECT dsync_leader('order-none') IS NULL"), 't',
	'no worker: meanwhile nobody is the leader');
is(q1($node, 'SELECT dsync_reap() >= 1'), 't', 'no worker: dsync_reap() clears the holder');
like($blocked->query_until(qr/^\d*\n/m, ''), qr/^\d+$/m, 'no worker: then the waiter is granted');
$blocked->quit;

done_testing();
