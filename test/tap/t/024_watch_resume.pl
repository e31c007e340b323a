# dsync watch resumes after a disconnect from the retained event log
# (dsync_events_since), printing every event it missed exactly once, and
# says so when events it missed are older than dsync.event_retention.
#
# This test proves:
#   - a watcher (--json) whose connection is cut and whose role cannot log
#     in for 5 s, while 1,000 events of the watched name are committed,
#     prints all of them after it reconnects, in seq order, with no
#     duplicate (the seqs it printed are exactly the server's log for the
#     name) and then goes on printing live events;
#   - the log's payloads are the notifications' (same seq, event, holder);
#   - a watcher that was away longer than dsync.event_retention says on
#     stderr that events may have been missed: when the log's horizon
#     passed its last seq (another listener kept the log going), and when
#     it was away longer than the log runs on after the last watcher left;
#   - events are logged with the time they were sent, so a worker that has
#     run for longer than the retention does not prune a batch at once;
#   - a watcher back within the retention after a quiet spell and a new
#     worker (whose first seq jumps to the clock) is not told it may have
#     missed events, nor is one that started on an empty log;
#   - with no retention, the events sent are past the horizon.
use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $timeout = 60;

my $node = PostgreSQL::Test::Cluster->new('resume');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dsync'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dsync; CREATE ROLE watcher LOGIN');

$ENV{PGHOST}     = $node->host;
$ENV{PGPORT}     = $node->port;
$ENV{PGDATABASE} = 'postgres';

my @running;
END
{
	local $?;
	eval { $_->{h}->kill_kill(grace => 1) } for grep { defined $_->{h} } @running;
}

sub q1 { return $node->safe_psql('postgres', $_[0]); }

# The tool in the background as role watcher, output captured.
sub start_watch
{
	my (@args) = @_;
	my $p = { out => '', err => '', what => "dsync @args" };
	local $ENV{PGUSER} = 'watcher';
	$p->{h} = IPC::Run::start([ 'dsync', @args ], '<', \undef, '>', \$p->{out}, '2>', \$p->{err});
	push @running, $p;
	return $p;
}

sub wait_output
{
	my ($p, $stream, $re) = @_;
	my $deadline = time + $timeout;
	while ($p->{$stream} !~ $re && time < $deadline)
	{
		$p->{h}->pump_nb if $p->{h}->pumpable;
		usleep(20_000);
	}
	return 1 if $p->{$stream} =~ $re;
	diag("$p->{what}: no $re on $stream\nstdout: " . substr($p->{out}, -2000) . "\nstderr: $p->{err}");
	return 0;
}

# Events of the name the server has logged, as seq => payload.
sub logged
{
	my ($name) = @_;
	my %log;
	for (split /\n/, q1("SELECT seq, payload FROM dsync_events_since(0, ARRAY['$name'])"))
	{
		my ($seq, $payload) = split /\|/, $_, 2;
		$log{$seq} = decode_json($payload);
	}
	return \%log;
}

# Cut the watcher off: it may not log in again until allowed.
sub cut_off
{
	q1("ALTER ROLE watcher NOLOGIN");
	q1("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'watcher'");
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE usename = 'watcher'"),
		'the watcher is disconnected');
}

# --- a watcher that started on an empty log ------------------------------------------
# Nothing was ever logged here, and the reaper has sent nothing yet: the
# first event it logs has its seq moved up to the clock.  A watcher that
# started before and missed that event must get it, not be told it may
# have missed events (1.4's horizon, one below the oldest row, jumped
# with that seq, and it was told so and never given the event).
my $empty = start_watch('watch', 'empty', '--json');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'watcher' AND state = 'idle'"
		  . " AND query LIKE '%dsync_events_horizon() AS h%'"),
	'a watcher started on an empty log has caught up');
cut_off();
q1("SELECT dsync_acquire('empty', 'e1', '1 minute')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM dsync_events_since(0, ARRAY['empty'])"),
	'the first event is logged');
cmp_ok(q1("SELECT min(seq) FROM dsync_events_since(0)"), '>', 1_000_000,
	'its seq is the clock\'s');
q1("ALTER ROLE watcher LOGIN");
ok(wait_output($empty, 'out', qr/"event":\s*"acquired",\s*"lease":\s*"empty"/),
	'the watcher, back, prints the event it missed');
unlike($empty->{err}, qr/missed/, 'and is not told it may have missed some');
$empty->{h}->kill_kill(grace => 1);
q1("SELECT dsync_release('empty', 'e1')");

# --- 1,000 events while disconnected for 5 s ---------------------------------------

my $w = start_watch('watch', 'wr', '--json');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'watcher' AND state = 'idle'"),
	'the watcher is connected');
q1("SELECT dsync_acquire('wr', 'before', '1 minute'); SELECT dsync_release('wr', 'before')");
ok(wait_output($w, 'out', qr/"holder":"before".*\n.*"released"/s), 'it prints live events');

cut_off();
my $cut_at = time;
my $script = join '', map { "SELECT dsync_acquire('wr', 'h$_', '1 minute'); SELECT dsync_release('wr', 'h$_');\n" } 1 .. 500;
q1($script);
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 1002 FROM dsync_events_since(0, ARRAY['wr'])"),
	'the reaper logged the 1,000 events');
my $left = 5 - (time - $cut_at);
usleep($left * 1_000_000) if $left > 0;
note(sprintf('disconnected for %.1f s', time - $cut_at));
q1("ALTER ROLE watcher LOGIN");

ok(wait_output($w, 'out', qr/"holder": ?"h500".*\n.*"released"/s), 'after reconnecting it prints the last missed event');
q1("SELECT dsync_acquire('wr', 'after', '1 minute'); SELECT dsync_release('wr', 'after')");
ok(wait_output($w, 'out', qr/"holder":"after".*\n.*"released"/s), 'and then live events again');

my @lines = grep { length } split /\n/, $w->{out};
my @events = map { decode_json($_) } @lines;
my @seqs = map { $_->{seq} } @events;
my %printed;
$printed{$_}++ for @seqs;
my $log = logged('wr');
is(scalar(@events), 1004, 'the watcher printed 1,004 events: 2 before, 1,000 missed, 2 after');
is(scalar(grep { $printed{$_} > 1 } keys %printed), 0, 'no event twice');
is_deeply([ sort { $a <=> $b } keys %printed ], [ sort { $a <=> $b } keys %$log ],
	"the seqs printed are exactly the server's log of the name");
is_deeply(\@seqs, [ sort { $a <=> $b } @seqs ], 'in seq order');
my $mismatch = grep { $log->{ $_->{seq} }{event} ne $_->{event}
	  || ($log->{ $_->{seq} }{holder} // '') ne ($_->{holder} // '') } @events;
is($mismatch, 0, 'each printed event is the logged one (event and holder)');
is(scalar(grep { $_->{event} eq 'acquired' } @events), 502, 'acquired 502 times');
unlike($w->{err}, qr/no longer kept/, 'and says nothing was lost');
$w->{h}->kill_kill(grace => 1);
$w->{h}->finish;

# --- away longer than the retention --------------------------------------------------

$node->append_conf('postgresql.conf', "dsync.event_retention = 1\n");
$node->reload;

# Another listener keeps the database's events logged (and pruned).
my $keep = { in => "LISTEN \"dsync:keep\";\n", out => '', err => '' };
$keep->{h} = IPC::Run::start([ 'psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', 'postgres' ],
	'<', \$keep->{in}, '>', \$keep->{out}, '2>', \$keep->{err});
push @running, $keep;
$keep->{h}->pump_nb while length $keep->{in};
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'LISTEN \"dsync:keep\"%'"),
	'another session listens');

my $g = start_watch('watch', 'gap');
ok(wait_output($g, 'err', qr/watching "gap"/), 'a second watcher is watching');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'watcher' AND state = 'idle'"),
	'and idle');
cut_off();
q1("SELECT dsync_acquire('gap', 'g1', '1 minute'); SELECT dsync_release('gap', 'g1')");
sleep 3;
# Later events prune the first ones (older than 1 s), all but the newest of
# those, which stays as the horizon's mark until a later prune (at most one
# a second) finds a newer event older than the retention.
q1("SELECT dsync_acquire('other', 'o', '1 minute'); SELECT dsync_release('other', 'o')");
sleep 2;
q1("SELECT dsync_acquire('other', 'o', '1 minute'); SELECT dsync_release('other', 'o')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM dsync_events_since(0, ARRAY['gap'])"),
	'the missed events were pruned');
q1("ALTER ROLE watcher LOGIN");
ok(wait_output($g, 'err', qr/are no longer kept; some of "gap" may have been missed/),
	'the watcher says events may have been missed (the log\'s horizon passed it)');
unlike($g->{out}, qr/g1/, 'and prints none it does not have');
$g->{h}->kill_kill(grace => 1);

# With nobody listening, the log runs on for the retention after the last
# watcher left, and then stops: a watcher away for longer is told by the
# time it was away.
$keep->{h}->kill_kill(grace => 1);
my $h = start_watch('watch', 'gap2');
ok(wait_output($h, 'err', qr/watching "gap2"/), 'a third watcher is watching, alone');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'watcher' AND state = 'idle'"),
	'and idle');
cut_off();
sleep 3;
q1("SELECT dsync_acquire('gap2', 'h1', '1 minute'); SELECT dsync_release('gap2', 'h1')");
q1("ALTER ROLE watcher LOGIN");
ok(wait_output($h, 'err', qr/disconnected for \d+ s, longer than dsync.event_retention \(1 s\): events of "gap2" may have been missed/),
	'the watcher away longer than the retention says events may have been missed');
$h->{h}->kill_kill(grace => 1);

# --- the log's time is the time of sending ------------------------------------------
# The reaper has been running for far longer than the retention (1 s).  The
# events it logs now are stamped with the time they are sent, not with its
# own start, so a batch is not pruned by age the moment it is logged.
my $r = start_watch('watch', 'ret1');
ok(wait_output($r, 'err', qr/watching "ret1"/), 'a watcher keeps the log running');
sleep 3;
q1("SELECT dsync_acquire('ret' || i, 'h', '1 minute') FROM generate_series(1, 5) AS i");
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM dsync_events_since(0) WHERE payload->>'lease' = 'ret5'"),
	'the batch is logged');
is(q1("SELECT count(*) FROM dsync_events_since(0) WHERE payload->>'lease' LIKE 'ret_'"),
	5, 'all five events of the batch are kept');
is(q1("SELECT bool_and(abs(extract(epoch FROM clock_timestamp() - sent_at)) < 2) "
	  . "FROM dsync_events_since(0) WHERE payload->>'lease' LIKE 'ret_'"),
	't', 'their sent_at is the time they were sent');
$r->{h}->kill_kill(grace => 1);

# --- a quiet spell, a new worker, a short disconnect ---------------------------------
# The last event is older than the retention when a new worker (after a
# failover, a crash, an idle exit) logs the next one, whose seq jumps to
# the clock.  A watcher that saw that last event and was away for less
# than the retention missed nothing and must not be told otherwise: the
# newest event older than the retention stays as the horizon's mark.
$node->append_conf('postgresql.conf', "dsync.event_retention = 4\n");
$node->reload;
my $quiet = start_watch('watch', 'quiet', '--json');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'watcher' AND state = 'idle'"),
	'a watcher of a quiet name');
q1("SELECT dsync_acquire('quiet', 'q1', '1 minute')");
ok(wait_output($quiet, 'out', qr/"holder":"q1"/), 'it sees the last event before a quiet spell');
sleep 5;
q1("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'dsync reaper'");
cut_off();
q1("SELECT dsync_release('quiet', 'q1')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM dsync_events_since(0, ARRAY['quiet']) WHERE payload->>'event' = 'released'"),
	'the next event is logged by a new worker');
cmp_ok(q1("SELECT max(seq) - min(seq) FROM dsync_events_since(0, ARRAY['quiet'])"), '>', 1_000_000,
	'its seq jumped');
q1("ALTER ROLE watcher LOGIN");
ok(wait_output($quiet, 'out', qr/"event":\s*"released",\s*"lease":\s*"quiet"/),
	'the watcher, back within the retention, prints the event it missed');
unlike($quiet->{err}, qr/missed/, 'and is not told it may have missed some');
$quiet->{h}->kill_kill(grace => 1);

# --- no retention: an event sent and not kept is past the horizon --------------------
# With dsync.event_retention = 0 nothing is logged, so nothing is pruned
# either: the events sent are recorded as gone as they are sent, or a
# watcher resuming from before them would not be told it missed them.
$node->append_conf('postgresql.conf', "dsync.event_retention = 0\n");
$node->reload;
my $zero = start_watch('watch', 'zero', '--json');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'watcher' AND state = 'idle'"
		  . " AND query LIKE '%dsync_events_horizon() AS h%'"),
	'a watcher with no retention');
q1("SELECT dsync_acquire('zero', 'z1', '1 minute')");
my $zero_re = qr/"seq":\s*(\d+),\s*"event":\s*"acquired",\s*"lease":\s*"zero"/;
ok(wait_output($zero, 'out', $zero_re), 'it hears the event');
my ($zero_seq) = $zero->{out} =~ $zero_re;
cmp_ok(q1("SELECT dsync_events_horizon()"), '>=', $zero_seq,
	'the event, not kept, is past the horizon');
$zero->{h}->kill_kill(grace => 1);

done_testing();
