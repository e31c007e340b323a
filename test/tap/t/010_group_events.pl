# Notifications of group membership and one-to-one events, and the reaper
# clearing expired members.
#
# API.md (Notifications): events "joined", "left" and "set", sent only for
# committed changes; (Group membership) members expire like leases, and
# the worker reaps and announces them.
#
# This test proves:
#   - joined carries group, member and expires_at; a refresh sends nothing;
#     dsync_leave sends left with reason "left";
#   - a member that stops refreshing is deleted by the reaper and announced
#     as left with reason "expired", without anybody calling dsync_reap;
#   - dsync_event_set sends set; a rolled-back set sends nothing;
#   - a waiter blocked in dsync_event_wait in another session is woken by a
#     set committed elsewhere, and only one of two waiters consumes it;
#   - each permit of a semaphore announces its own acquired event.
# Timings are never asserted; waits give up after a generous timeout.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $timeout = 30;

my $node = PostgreSQL::Test::Cluster->new('groups');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dsync'\n");
$node->start;

END
{
	$node->stop('immediate', fail_ok => 1)
	  if defined $node && !-e $node->data_dir . '/postmaster.pid';
}

$node->safe_psql('postgres', 'CREATE EXTENSION dsync');
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dsync reaper'")
  or die 'no reaper';

sub q1 { return $node->safe_psql('postgres', $_[0]); }

# A LISTENing psql session; notifications show after each command.
my $listener = $node->background_psql('postgres');
my @received;

sub pump
{
	my $out = $listener->query_safe('SELECT 1');
	for my $line (split /\r?\n/, $out)
	{
		next
		  unless $line =~
		  /^Asynchronous notification "(.*?)" with payload "(.*)" received from server process with PID (\d+)\.$/;
		push @received, { channel => $1, json => JSON::PP->new->decode($2) };
	}
	return;
}

# All events on $channel up to the first that satisfies $pred (removed).
sub events_until
{
	my ($channel, $pred) = @_;
	my $deadline = time + $timeout;
	while (1)
	{
		my @mine = grep { $_->{channel} eq $channel } @received;
		my ($hit) = grep { $pred->($mine[$_]{json}) } 0 .. $#mine;
		if (defined $hit || time > $deadline)
		{
			my @take = defined $hit ? @mine[ 0 .. $hit ] : @mine;
			my %take = map { ($_ => 1) } @take;
			@received = grep { !$take{$_} } @received;
			diag("timed out on $channel") unless defined $hit;
			return map { $_->{json} } @take;
		}
		usleep(50_000);
		pump();
	}
}

my $ts_re = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d*[1-9])?\+00:00$/;

# --- membership -------------------------------------------------------------

$listener->query_safe('LISTEN "dsync:cluster"');

q1("SELECT dsync_join('cluster', 'node-a', '1 hour', '{\"host\":\"a\"}')");
my @ev = events_until('dsync:cluster', sub { $_[0]{event} eq 'joined' });
is(scalar(@ev), 1, 'one event for the join');
is($ev[0]{group}, 'cluster', 'joined: group');
is($ev[0]{member}, 'node-a', 'joined: member');
like($ev[0]{expires_at}, $ts_re, 'joined: expires_at in UTC ISO 8601');
is( q1("SELECT expires_at = '$ev[0]{expires_at}'::timestamptz FROM dsync_members('cluster') WHERE member = 'node-a'"),
	't', 'joined: expires_at is the membership expiry');

# A refresh sends nothing: the next event on the channel is the leave.
q1("SELECT dsync_join('cluster', 'node-a', '2 hours')");
q1("BEGIN; SELECT dsync_join('cluster', 'node-z'); ROLLBACK;");
is(q1("SELECT dsync_leave('cluster', 'node-a')"), 't', 'node-a leaves');
@ev = events_until('dsync:cluster', sub { $_[0]{event} eq 'left' });
is_deeply([ map { "$_->{event}:$_->{member}" } @ev ],
	['left:node-a'], 'refresh and rolled-back join sent nothing; leave sent left');
is($ev[-1]{reason}, 'left', 'left: reason is left');

# Expiry: nobody refreshes node-b; the reaper deletes and announces it.
q1("SELECT dsync_join('cluster', 'node-b', '1 second')");
@ev = events_until('dsync:cluster', sub { $_[0]{event} eq 'joined' });
is($ev[-1]{member}, 'node-b', 'node-b joined');
@ev = events_until('dsync:cluster', sub { $_[0]{event} eq 'left' });
is_deeply([ map { "$_->{event}:$_->{member}:" . ($_->{reason} // '') } @ev ],
	['left:node-b:expired'], 'the reaper announces the expired member as left (expired)');
like($ev[-1]{expires_at}, $ts_re, 'left (expired): expires_at given');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM dsync_member WHERE grp = 'cluster' AND member = 'node-b'"),
	'the reaper deleted the expired member row');
is(q1("SELECT count(*) FROM dsync_members('cluster')"), '0', 'no members left');

# --- one-to-one events ------------------------------------------------------

$listener->query_safe('LISTEN "dsync:jobs"');
q1("BEGIN; SELECT dsync_event_set('jobs'); ROLLBACK;");
q1("SELECT dsync_event_set('jobs')");
@ev = events_until('dsync:jobs', sub { $_[0]{event} eq 'set' });
is_deeply([ map { { event => $_->{event}, name => $_->{name} } } @ev ],
	[ { event => 'set', name => 'jobs' } ], 'one set event for the committed set only');
is(q1("SELECT dsync_event_clear('jobs')"), '1', 'one signal was pending');

# Two waiters block; one set from here wakes exactly one of them.
my @waiters = map { $node->background_psql('postgres') } 1 .. 2;
$_->query_until(qr/waiting/, "\\echo waiting\nSELECT dsync_event_wait('jobs', '60 s') AS got;\n")
  for @waiters;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM dsync_waiters WHERE kind = 'event' AND name = 'jobs'"),
	'two waiters are blocked on the event');
is( q1("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND backend_type = 'client backend'"),
	'2', 'they sleep in an Extension wait');
q1("SELECT dsync_event_set('jobs')");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM dsync_waiters WHERE kind = 'event' AND name = 'jobs'"),
	'one waiter consumed the signal, the other still waits');
is(q1("SELECT dsync_event_is_set('jobs')"), 'f', 'the signal was consumed');
q1("SELECT dsync_event_set('jobs')");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM dsync_waiters WHERE kind = 'event' AND name = 'jobs'"),
	'a second set releases the second waiter');
$_->quit for @waiters;

# --- semaphore permits --------------------------------------------------------

$listener->query_safe('LISTEN "dsync:pool"');
q1("SELECT dsync_semaphore_create('pool', 2)");
my $t1 = q1("SELECT dsync_acquire('pool', 'p1', '1 hour')");
my $t2 = q1("SELECT dsync_acquire('pool', 'p2', '1 hour')");
is(q1("SELECT dsync_acquire('pool', 'p3') IS NULL"), 't', 'third holder refused');
@ev = events_until('dsync:pool', sub { $_[0]{event} eq 'acquired' && $_[0]{holder} eq 'p2' });
is_deeply([ map { "$_->{event}:$_->{holder}:$_->{fencing}" } @ev ],
	[ "acquired:p1:$t1", "acquired:p2:$t2" ], 'each permit announces its own grant');

$listener->quit;
done_testing();
