# Notifications as a listener relies on them: one per committed change,
# numbered, with RFC 3339 times, and told apart from forgeries.
#
# PostgreSQL drops a notification whose channel and payload repeat one
# already sent in the same transaction (async.c); the reaper sends a batch
# in one transaction, so 2,000 dsync_event_set('q') used to reach listeners
# as 1,794 notifications, and join/leave/join/leave as joined, left,
# joined.  Every payload now carries "seq", so none repeat.  This test
# proves:
#   - 2,000 sets in one transaction are 2,000 notifications, seq strictly
#     increasing by one;
#   - join, leave, join, leave in one transaction are four notifications
#     in that order;
#   - expires_at is RFC 3339 with a full offset (+00:00), which JavaScript's
#     Date parses (checked with node where it is installed);
#   - seq keeps increasing across a restart and a crash;
#   - dsync_stats.sender_pid is the process that sends every notification,
#     and a NOTIFY on a dsync channel by an ordinary role comes from
#     another process;
#   - events lost because dsync's queue was full use up their numbers:
#     the gap in seq is exactly dsync_stats.events_lost;
#   - dsync_stats counts grants, renewals, releases and expiries, and
#     dsync_stats_reset zeroes it;
#   - events nobody listens to are not sent (no NOTIFY transaction for
#     them), counting from a LISTEN on a dsync channel until the listener
#     leaves or commits UNLISTEN * or DISCARD ALL (not one rolled back to
#     a savepoint); whether one is sent is
#     decided as it commits, so a later listener never gets old ones.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

# Without the event log (dsync.event_retention = 0), changes nobody hears
# are not sent at all; with it they are (024_watch_resume).
my $node = dsync_node('notify', 'dsync.event_retention = 0');
$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
my $reaper = reaper_pid($node);
my $listener = Listener->new($node);

# --- 2,000 identical sets in one transaction --------------------------------

my $ch = $listener->listen('q');
q1($node, "SELECT count(dsync_event_set('q')) FROM generate_series(1, 2000)");
my @n = $listener->take($ch, 2000);
is(scalar(@n), 2000, '2,000 sets in one transaction are 2,000 notifications');
is(scalar(grep { ($_->{json}{event} // '') eq 'set' } @n), 2000, 'every one is a set event');
my @seq = map { $_->{json}{seq} // 0 } @n;
is(scalar(grep { $seq[$_] != $seq[ $_ - 1 ] + 1 } 1 .. $#seq), 0,
	'their seq numbers rise by one, in the order received');
like($seq[0], qr/^[1-9]\d*$/, 'seq is a positive integer');
like($n[0]{raw}, qr/^\{"seq":\d+,"event":"set","name":"q"\}$/, 'set payload: seq first');
q1($node, "SELECT dsync_event_clear('q')");

# --- join, leave, join, leave in one transaction ----------------------------

$ch = $listener->listen('grp');
q1($node, "BEGIN; SELECT dsync_join('grp', 'm'); SELECT dsync_leave('grp', 'm');"
	  . " SELECT dsync_join('grp', 'm'); SELECT dsync_leave('grp', 'm'); COMMIT;");
@n = $listener->take($ch, 4);
is_deeply([ map { "$_->{json}{event}:" . ($_->{json}{reason} // '') } @n ],
	[ 'joined:', 'left:left', 'joined:', 'left:left' ],
	'join, leave, join, leave in one transaction: four notifications in order');

# --- times, sender, forgeries --------------------------------------------------

$ch = $listener->listen('lease');
my $token = q1($node, "SELECT dsync_acquire('lease', 'h', '1 hour')");
($n[0]) = $listener->take($ch, 1);
my $expires = $n[0]{json}{expires_at} // '';
like($expires, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$/,
	'expires_at is RFC 3339 with a full offset');
is(q1($node, "SELECT '$expires'::timestamptz = expires_at FROM dsync_leases WHERE lease = 'lease'"),
	't', 'expires_at is the lease expiry');
SKIP:
{
	my $node_js = `command -v node 2>/dev/null`;
	chomp $node_js;
	skip 'node is not installed', 1 unless $node_js;
	my $ok = system($node_js, '-e',
		"process.exit(isNaN(new Date(process.argv[1]).getTime()) ? 1 : 0)", $expires);
	is($ok, 0, "JavaScript's Date parses expires_at");
}
my $sender = q1($node, "SELECT sender_pid FROM dsync_stats");
is($sender, $reaper, 'dsync_stats.sender_pid is the reaper');
is(scalar(grep { $_->{pid} ne $sender } @n), 0, 'the notification came from sender_pid');
$node->safe_psql('postgres',
	qq{SELECT pg_notify('dsync:lease', '{"event":"acquired","lease":"lease","holder":"forged"}')},
	extra_params => [ '-U', 'plain' ]);
($n[0]) = $listener->take($ch, 1);
is($n[0]{json}{holder} // '', 'forged', 'an ordinary role can NOTIFY a dsync channel');
isnt($n[0]{pid}, $sender, 'but the forgery does not come from sender_pid');

# --- seq across a restart and a crash -------------------------------------------

sub last_seq
{
	my ($name) = @_;
	my $c = $listener->listen($name);
	q1($node, "SELECT dsync_event_set('$name')");
	my ($got) = $listener->take($c, 1);
	return $got->{json}{seq} // 0;
}
my $before = last_seq('s1');
$listener->quit;
$node->restart;
$listener = Listener->new($node);
my $after = last_seq('s2');
cmp_ok($after, '>', $before, 'seq keeps increasing across a restart');
$listener->quit;
$node->stop('immediate');
$node->start;
$listener = Listener->new($node);
my $after_crash = last_seq('s3');
cmp_ok($after_crash, '>', $after, 'seq keeps increasing across a crash');

# --- lost events leave a gap --------------------------------------------------

$listener->quit;
$node->append_conf('postgresql.conf', "dsync.event_queue_size = 64kB\n");
$node->restart;
$listener = Listener->new($node);
my $last = last_seq('lost');
$ch = $listener->listen('lost');
q1($node, "SELECT dsync_stats_reset()");
# More events than half the queue (the smallest allowed, 64 kB, holds about
# 1,600): the transaction does not wait for room.
q1($node, "SELECT count(dsync_event_set('lost')) FROM generate_series(1, 3000)");
my $lost = 0;
wait_for($node, "SELECT events_lost > 0 FROM dsync_stats");
$lost = q1($node, "SELECT events_lost FROM dsync_stats");
cmp_ok($lost, '>', 0, 'events were lost (the queue is 64 kB)');
@n = $listener->take($ch, 3000 - $lost);
is(scalar(@n), 3000 - $lost, 'the events that were not lost arrive');
@seq = map { $_->{json}{seq} // 0 } @n;
is($seq[0] - $last - 1, $lost, 'the gap in seq before them is exactly the number lost');
is(scalar(grep { $seq[$_] != $seq[ $_ - 1 ] + 1 } 1 .. $#seq), 0,
	'the rest are consecutive');

# --- counters ---------------------------------------------------------------------

q1($node, "SELECT dsync_stats_reset()");
q1($node, "SELECT dsync_acquire('c', 'h', '1 hour'), dsync_renew('c', 'h'), dsync_release('c', 'h')");
q1($node, "SELECT dsync_acquire('c', 'h', '100 ms')");
wait_for($node, "SELECT expiries = 1 FROM dsync_stats");
is(q1($node, "SELECT grants || ' ' || renewals || ' ' || releases || ' ' || expiries FROM dsync_stats"),
	'2 1 1 1', 'dsync_stats counts grants, renewals, releases and expiries');
q1($node, "SELECT dsync_acquire('c', 'h2', '1 hour'), dsync_acquire('c', 'w', '1 hour', '10 ms')");
is(q1($node, "SELECT waits || ' ' || wait_timeouts || ' ' || (wait_time > '0') FROM dsync_stats"),
	'1 1 true', 'dsync_stats counts waits, timeouts and time waited');
q1($node, "SELECT dsync_stats_reset()");
is(q1($node, "SELECT grants + renewals + releases + expiries + waits FROM dsync_stats"),
	'0', 'dsync_stats_reset zeroes the counters');

# --- events nobody listens to are not sent -----------------------------------------

# quiet_then_heard: changes nobody hears (acquired, set, expired), taken by
# the worker (it wakes for the expiry), then one change on a name just
# listened to.  Once that one arrives, the worker has sent whatever it was
# going to send of the others: events_sent tells how many went out in all.
sub quiet_then_heard
{
	my ($who, $quiet, $heard) = @_;
	q1($node, "SELECT dsync_stats_reset()");
	q1($node, "SELECT dsync_acquire('$quiet', 'h', '200 ms'), dsync_event_set('$quiet')");
	ok(wait_for($node, "SELECT queue_used = 0 AND expiries = 1 FROM dsync_stats"),
		"$quiet: expired, and the worker has taken every queued event");
	my $c = $who->listen($heard);
	q1($node, "SELECT dsync_event_set('$heard')");
	my @got = $who->take($c, 1);
	return scalar(@got) . ' ' . q1($node, "SELECT events_sent FROM dsync_stats");
}

$listener->quit;
wait_for($node, "SELECT count(*) = 0 FROM pg_stat_activity"
	  . " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()");
$listener = Listener->new($node);
is(quiet_then_heard($listener, 'quiet1', 'heard1'), '1 1',
	'with nobody listening, acquired, set and expired are not sent; the next heard one is');
$listener->{psql}->query_safe('UNLISTEN *');
is(quiet_then_heard($listener, 'quiet2', 'heard2'), '1 1',
	'after UNLISTEN * nothing is sent either');
$listener->{psql}->query_safe('DISCARD ALL');
is(quiet_then_heard($listener, 'quiet3', 'heard3'), '1 1', 'nor after DISCARD ALL');
$listener->listen('quiet4');
is(quiet_then_heard($listener, 'quiet4', 'heard4'), '1 4',
	'a listener on another dsync channel: every event is sent');
my $other = Listener->new($node);
$listener->{psql}->query_safe('BEGIN');
$listener->{psql}->query_safe('UNLISTEN *');
$listener->{psql}->query_safe('ROLLBACK');
is(quiet_then_heard($other, 'quiet5', 'heard5'), '1 4',
	'an UNLISTEN * that rolls back changes nothing');
$other->quit;
wait_for($node, "SELECT count(*) = 1 FROM pg_stat_activity"
	  . " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()");
$listener->{psql}->query_safe($_)
  for ('BEGIN', 'SAVEPOINT s', 'UNLISTEN *', 'ROLLBACK TO SAVEPOINT s', 'COMMIT');
$other = Listener->new($node);
is(quiet_then_heard($other, 'quiet5b', 'heard5b'), '1 4',
	'nor one in a savepoint that is rolled back (the session still listens)');

# Whether a change is sent is decided as it commits: changes made while
# nobody listened are not sent to a listener that arrives before the
# worker has taken them (they would reach it late and out of date).
$listener->quit;
$other->quit;
wait_for($node, "SELECT count(*) = 0 FROM pg_stat_activity"
	  . " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()");
q1($node, "SELECT dsync_stats_reset()");
q1($node, "SELECT dsync_acquire('quiet6', 'h', '1 hour'), dsync_event_set('quiet6'), dsync_release('quiet6', 'h')");
$listener = Listener->new($node);
$listener->listen('quiet6');
$ch = $listener->listen('heard6');
q1($node, "SELECT dsync_event_set('heard6')");
@n = $listener->take($ch, 1);
is(scalar(@n) . ' ' . q1($node, "SELECT events_sent FROM dsync_stats"), '1 1',
	'changes committed while nobody listened are not sent to a later listener');
$listener->quit;
done_testing();
