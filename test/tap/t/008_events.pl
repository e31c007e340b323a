# Lease events: NOTIFY on dsync_channel(lease), sent by the reaper for
# committed changes only, one JSON object per event, in commit order.
#
# API.md (Notifications): "Payload: one JSON object, e.g.
# {"event":"acquired","lease":"billing","holder":"w2","fencing":42,
# "expires_at":"2026-11-21T10:00:30.5+00"}"; "Sent only for committed
# changes. For expiry, the background worker sends expired as soon as a
# lease's time passes".  NOTES.md section 5: events are batched and sent by
# the worker, not by the committing transaction.  dsync_reap() is for
# administrators only and runs a reap pass now.
#
# This test proves:
#   - acquired / released / expired payloads carry every field (event,
#     lease, holder, fencing as a JSON number equal to the token that
#     dsync_acquire returned, expires_at in UTC as ISO 8601 with a T and
#     +00, equal to the lease's expiry), on channel 'dsync:<lease>', sent
#     by the reaper's process;
#   - a rolled-back acquire or release (also one rolled back to a
#     savepoint) sends nothing; a reentrant acquire and dsync_renew send
#     nothing; dsync_force_release sends released;
#   - an expired lease taken over before the reaper cleared it is
#     announced as expired (old holder) then acquired (new holder);
#   - several changes on one lease arrive in commit order;
#   - an expired lease is deleted from dsync_lease once reaped;
#   - dsync_reap() is refused to an ordinary role (42501) and clears an
#     expired lease when a superuser runs it.
#
# "Nothing was sent" is checked deterministically: after the change that
# must send nothing, a committed change on the same lease is made, and the
# events received up to its event must be exactly the expected ones (events
# of one lease arrive in commit order).  Timings are never asserted; waits
# for events give up after a generous timeout.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use lib '.';
use DsyncTest qw(stop_at_end);
use Time::HiRes qw(time usleep);

my $event_timeout = 30;    # seconds; events normally arrive in milliseconds

my $node = PostgreSQL::Test::Cluster->new('events');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dsync'\n");
$node->start;
stop_at_end($node);

$node->safe_psql('postgres', 'CREATE EXTENSION dsync');
$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');

my $reaper_sql = "SELECT pid FROM pg_stat_activity "
  . "WHERE backend_type = 'dsync reaper' AND datname = 'postgres'";
$node->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($reaper_sql) r")
  or die 'the reaper of database postgres did not start';
my $reaper = $node->safe_psql('postgres', $reaper_sql);

# --- the reaper can be frozen (SIGSTOP) to make a race deterministic --------

my %stopped;

END
{
	# Never leave a frozen process behind, whatever happened.
	kill 'CONT', $_ for keys %stopped;
}

# Freeze the reaper while it sleeps (not while it holds a lock): stop it,
# and if pg_stat_activity does not show it waiting on its latch or a
# timeout, let it run a moment and try again.
sub freeze_reaper
{
	for (1 .. 200)
	{
		kill('STOP', $reaper) or die "cannot SIGSTOP reaper $reaper: $!";
		$stopped{$reaper} = 1;
		my $w = $node->safe_psql('postgres',
			"SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $reaper");
		return 1 if $w =~ /^(Activity|Extension|Timeout)$/;
		kill 'CONT', $reaper;
		delete $stopped{$reaper};
		usleep(20_000);
	}
	die 'the reaper never showed as sleeping';
}

sub thaw_reaper
{
	kill 'CONT', $reaper;
	delete $stopped{$reaper};
	return;
}

# --- receiving notifications ---------------------------------------------

# A psql session that LISTENs.  psql prints each notification on stdout
# after the result of the next command it runs, so we keep sending
# "SELECT 1" and collect the notification lines.
my $listener = $node->background_psql('postgres');
$listener->set_query_timer_restart;
my $listener_pid = $listener->query_safe('SELECT pg_backend_pid()');
my @received;    # every notification not yet consumed, in arrival order
my %channel;     # lease => channel

sub listen_to
{
	my ($lease) = @_;
	$channel{$lease} =
	  $node->safe_psql('postgres', "SELECT dsync_channel('$lease')");
	$listener->query_safe(qq{LISTEN "$channel{$lease}"});
	return $channel{$lease};
}

sub pump_notifications
{
	my $out = $listener->query_safe('SELECT 1');
	for my $line (split /\r?\n/, $out)
	{
		next
		  unless $line =~
		  /^Asynchronous notification "(.*?)"(?: with payload "(.*)")? received from server process with PID (\d+)\.$/;
		my %n = (channel => $1, raw => $2 // '', pid => $3);
		$n{json} = eval { JSON::PP->new->decode($n{raw}) };
		diag("payload is not JSON: $n{raw}") unless ref $n{json} eq 'HASH';
		$n{json} = {} unless ref $n{json} eq 'HASH';
		push @received, \%n;
	}
	return;
}

# Wait until an event on $lease's channel satisfies $pred; remove and
# return all events of that channel up to and including it (all of them,
# if it never came within the timeout).
sub events_until
{
	my ($lease, $pred) = @_;
	my $ch = $channel{$lease} // die "not listening to $lease";
	my $deadline = time + $event_timeout;
	while (1)
	{
		my @mine = grep { $_->{channel} eq $ch } @received;
		my ($hit) = grep { $pred->($mine[$_]{json}) } 0 .. $#mine;
		if (defined $hit || time > $deadline)
		{
			my @take = defined $hit ? @mine[ 0 .. $hit ] : @mine;
			my %take = map { ($_ => 1) } @take;
			@received = grep { !$take{$_} } @received;
			diag("timed out waiting for an event on $ch; got: "
				  . join(' ', map { $_->{raw} } @take))
			  unless defined $hit;
			return @take;
		}
		usleep(50_000);
		pump_notifications();
	}
}

# Events up to the first one of kind $kind for $holder.
sub events_until_kind
{
	my ($lease, $kind, $holder) = @_;
	return events_until($lease,
		sub { ($_[0]{event} // '') eq $kind && ($_[0]{holder} // '') eq $holder });
}

# "event:holder:fencing" for comparing sequences.
sub summary
{
	return map {
		my $j = $_->{json};
		join(':', map { $_ // 'undef' } $j->{event}, $j->{holder}, $j->{fencing})
	} @_;
}

sub q1
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

my $ts_re = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d*[1-9])?\+00:00$/;

# --- acquired and released --------------------------------------------------

is(listen_to('billing'), 'dsync:billing', "dsync_channel('billing') is dsync:billing");
my $t_billing = q1("SELECT dsync_acquire('billing', 'w2', '1 hour')");
like($t_billing, qr/^\d+$/, 'w2 acquires billing');
my @ev = events_until_kind('billing', 'acquired', 'w2');
is(scalar(@ev), 1, 'exactly one event for the acquire');
my $acq = $ev[-1];
is($acq->{channel}, 'dsync:billing', 'the event comes on channel dsync:billing');
is($acq->{json}{event},   'acquired', 'acquired: event');
is($acq->{json}{lease},   'billing',  'acquired: lease');
is($acq->{json}{holder},  'w2',       'acquired: holder');
is($acq->{json}{fencing}, $t_billing, 'acquired: fencing is the token dsync_acquire returned');
like($acq->{raw}, qr/"fencing"\s*:\s*$t_billing\s*[,}]/, 'acquired: fencing is a JSON number');
like($acq->{json}{expires_at} // '', $ts_re,
	'acquired: expires_at is ISO 8601 in UTC (T separator, fractional seconds trimmed, +00)');
is( q1("SELECT expires_at = '$acq->{json}{expires_at}'::timestamptz FROM dsync_leases "
		  . "WHERE lease = 'billing' AND holder = 'w2'"),
	't', 'acquired: expires_at is the expiry shown in dsync_leases');
is($acq->{pid}, $reaper, 'the event is sent by the reaper');
isnt($acq->{pid}, $listener_pid, 'the event is not sent by the listening session');

is(q1("SELECT dsync_release('billing', 'w2')"), 't', 'w2 releases billing');
@ev = events_until_kind('billing', 'released', 'w2');
is(scalar(@ev), 1, 'exactly one event for the release');
my $rel = $ev[-1];
is($rel->{json}{event},   'released', 'released: event');
is($rel->{json}{lease},   'billing',  'released: lease');
is($rel->{json}{holder},  'w2',       'released: holder');
is($rel->{json}{fencing}, $t_billing, 'released: fencing is the token of the released grant');
like($rel->{raw}, qr/"fencing"\s*:\s*$t_billing\s*[,}]/, 'released: fencing is a JSON number');
is($rel->{pid}, $reaper, 'the released event is sent by the reaper');

# --- rolled back: nothing ---------------------------------------------------

listen_to('rb');
q1("BEGIN; SELECT dsync_acquire('rb', 'r1', '1 hour'); ROLLBACK;");
my $t_rb2 = q1("SELECT dsync_acquire('rb', 'r2', '1 hour')");
is_deeply([ summary(events_until_kind('rb', 'acquired', 'r2')) ],
	["acquired:r2:$t_rb2"], 'a rolled-back acquire sends nothing');

q1("BEGIN; SELECT dsync_release('rb', 'r2'); ROLLBACK;");
q1("SELECT dsync_force_release('rb', 'r2')");
is_deeply([ summary(events_until_kind('rb', 'released', 'r2')) ],
	["released:r2:$t_rb2"], 'a rolled-back release sends nothing');

my @rb3 = split /\n/, q1(
	"BEGIN; SAVEPOINT s; SELECT dsync_acquire('rb', 'r-sub', '1 hour'); ROLLBACK TO SAVEPOINT s; "
	  . "SELECT dsync_acquire('rb', 'r3', '1 hour'); COMMIT;");
my $t_rb3 = $rb3[-1];
like($t_rb3, qr/^\d+$/, 'r3 acquires rb after a rolled-back savepoint');
is_deeply([ summary(events_until_kind('rb', 'acquired', 'r3')) ],
	["acquired:r3:$t_rb3"], 'an acquire rolled back to a savepoint sends nothing');
q1("SELECT dsync_release('rb', 'r3')");
is_deeply([ summary(events_until_kind('rb', 'released', 'r3')) ],
	["released:r3:$t_rb3"], 'release after the savepoint case: one released event');

# --- reentrant acquire and renew: nothing -----------------------------------

listen_to('quiet');
my $t_quiet = q1("SELECT dsync_acquire('quiet', 'q1', '1 hour')");
is(q1("SELECT dsync_acquire('quiet', 'q1', '1 hour')"), $t_quiet,
	'reentrant acquire returns the same token');
like(q1("SELECT dsync_renew('quiet', 'q1')"), qr/^\d{4}-/, 'renew returns the new expiry');
like(q1("SELECT dsync_renew('quiet', 'q1', '2 hours')"), qr/^\d{4}-/,
	'renew with a new ttl returns the new expiry');
is(q1("SELECT dsync_release('quiet', 'q1')"), 't', 'q1 releases quiet');
is_deeply([ summary(events_until_kind('quiet', 'released', 'q1')) ],
	[ "acquired:q1:$t_quiet", "released:q1:$t_quiet" ],
	'reentrant acquire and renew send nothing: only acquired then released');

# --- force_release ----------------------------------------------------------

listen_to('force');
my $t_force = q1("SELECT dsync_acquire('force', 'f1', '1 hour')");
is(q1("SELECT dsync_force_release('force')"), '1', 'dsync_force_release releases one holder');
@ev = events_until_kind('force', 'released', 'f1');
is_deeply([ summary(@ev) ], [ "acquired:f1:$t_force", "released:f1:$t_force" ],
	'dsync_force_release sends released');
is($ev[-1]{json}{lease}, 'force', 'force_release: released event names the lease');

# --- order of several changes on one lease ---------------------------------

listen_to('order');
my @out = split /\n/, q1(
	"SELECT dsync_acquire('order', 'o1', '1 hour');\n"
	  . "SELECT dsync_release('order', 'o1');\n"
	  . "SELECT dsync_acquire('order', 'o2', '1 hour');\n"
	  . "SELECT dsync_renew('order', 'o2') IS NOT NULL;\n"
	  . "SELECT dsync_force_release('order', 'o2');\n"
	  . "SELECT dsync_acquire('order', 'o3', '1 hour');\n");
is(scalar(@out), 6, 'six statements, each its own transaction');
my ($t_o1, $t_o2, $t_o3) = @out[ 0, 2, 5 ];
cmp_ok($t_o2, '>', $t_o1, 'o2 got a larger token than o1');
cmp_ok($t_o3, '>', $t_o2, 'o3 got a larger token than o2');
is_deeply(
	[ summary(events_until_kind('order', 'acquired', 'o3')) ],
	[
		"acquired:o1:$t_o1", "released:o1:$t_o1",
		"acquired:o2:$t_o2", "released:o2:$t_o2",
		"acquired:o3:$t_o3"
	],
	'five changes on one lease arrive once each, in commit order');

# --- expiry ---------------------------------------------------------------

listen_to('exp');
my $t_exp = q1("SELECT dsync_acquire('exp', 'e1', '1 second')");
my ($exp_acq) = grep { $_->{json}{event} eq 'acquired' }
  events_until_kind('exp', 'acquired', 'e1');
@ev = events_until_kind('exp', 'expired', 'e1');
is_deeply([ summary(@ev) ], ["expired:e1:$t_exp"],
	'a lease nobody renews is announced as expired (within a few seconds)');
my $expd = $ev[-1];
is($expd->{json}{event},  'expired', 'expired: event');
is($expd->{json}{lease},  'exp',     'expired: lease');
is($expd->{json}{holder}, 'e1',      'expired: holder');
is($expd->{json}{fencing}, $t_exp, 'expired: fencing is the token of the expired grant');
like($expd->{raw}, qr/"fencing"\s*:\s*$t_exp\s*[,}]/, 'expired: fencing is a JSON number');
like($expd->{json}{expires_at} // '', $ts_re, 'expired: expires_at is ISO 8601 in UTC');
is($expd->{json}{expires_at}, $exp_acq->{json}{expires_at},
	'expired: expires_at is the expiry announced when it was acquired');
is($expd->{pid}, $reaper, 'the expired event is sent by the reaper');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 AND bool_and(holder IS NULL) FROM dsync_lease WHERE name = 'exp'"),
	'the reaped lease is cleared in dsync_lease (its row stays for the next grant)');

# --- takeover of an expired lease before the reaper cleared it -------------

listen_to('takeover');
my $t_old = q1("SELECT dsync_acquire('takeover', 'old', '2 seconds')");
my ($to_acq) = events_until_kind('takeover', 'acquired', 'old');
freeze_reaper();
$node->poll_query_until('postgres', "SELECT dsync_leader('takeover') IS NULL")
  or die 'the takeover lease never expired';
is(q1("SELECT holder FROM dsync_lease WHERE name = 'takeover' AND expires_at < now()"),
	'old', 'the expired lease is still in dsync_lease (the reaper is frozen)');
my $t_new = q1("SELECT dsync_acquire('takeover', 'new', '1 hour')");
like($t_new, qr/^\d+$/, 'new takes over the expired lease');
cmp_ok($t_new, '>', $t_old, 'the takeover token is larger');
thaw_reaper();
@ev = events_until_kind('takeover', 'acquired', 'new');
is_deeply([ summary(@ev) ], [ "expired:old:$t_old", "acquired:new:$t_new" ],
	'a takeover of an expired lease sends expired (old holder) then acquired (new holder)');
is($ev[0]{json}{expires_at}, $to_acq->{json}{expires_at},
	'takeover: expired event carries the old expiry');
like($ev[1]{json}{expires_at} // '', $ts_re, 'takeover: acquired event has expires_at');
is(q1("SELECT expires_at = '" . ($ev[1]{json}{expires_at} // 'infinity')
		  . "'::timestamptz FROM dsync_leases WHERE lease = 'takeover'"),
	't', 'takeover: acquired expires_at is the new expiry');

# --- dsync_reap -------------------------------------------------------------

my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT dsync_reap();",
	extra_params => [ '-U', 'plain' ]);
isnt($ret, 0, 'dsync_reap fails for an ordinary role');
like($stderr, qr/ERROR:\s+42501:/, 'dsync_reap by an ordinary role: SQLSTATE 42501');
is(q1("SELECT has_function_privilege('plain', 'dsync_reap()', 'EXECUTE')"),
	'f', 'an ordinary role has no EXECUTE right on dsync_reap');
is(q1("SELECT pg_typeof(dsync_reap())"), 'bigint', 'dsync_reap returns a bigint');
like(q1("SELECT dsync_reap()"), qr/^\d+$/, 'dsync_reap returns a count >= 0 for a superuser');

listen_to('reaped');
my $t_reaped = q1("SELECT dsync_acquire('reaped', 'r1', '2 seconds')");
events_until_kind('reaped', 'acquired', 'r1');
freeze_reaper();
$node->poll_query_until('postgres', "SELECT dsync_leader('reaped') IS NULL")
  or die 'the reaped lease never expired';
is(q1("SELECT count(*) FROM dsync_lease WHERE name = 'reaped' AND holder = 'r1'"),
	'1', 'the expired lease is still held in dsync_lease while the reaper is frozen');
cmp_ok(q1("SELECT dsync_reap()"), '>=', 1,
	'dsync_reap clears the expired lease the frozen reaper did not');
is(q1("SELECT count(*) FROM dsync_lease WHERE name = 'reaped' AND holder IS NOT NULL"),
	'0', 'after dsync_reap the expired lease is cleared in dsync_lease');
is(q1("SELECT dsync_reap()"), '0', 'a second dsync_reap finds nothing to clear');
thaw_reaper();
is_deeply([ summary(events_until_kind('reaped', 'expired', 'r1')) ],
	["expired:r1:$t_reaped"], 'a lease cleared by dsync_reap is announced as expired');

# --- nothing else was sent ----------------------------------------------------

# Free the two leases still held, then make a last committed change on
# every lease we listen to: nothing may arrive before its event that we did
# not expect (no duplicates, no late events).
is(q1("SELECT dsync_release('order', 'o3')"), 't', 'o3 releases order');
is_deeply([ summary(events_until_kind('order', 'released', 'o3')) ],
	["released:o3:$t_o3"], 'released event for o3, nothing else');
is(q1("SELECT dsync_release('takeover', 'new')"), 't', 'new releases takeover');
is_deeply([ summary(events_until_kind('takeover', 'released', 'new')) ],
	["released:new:$t_new"], 'released event for new, nothing else');
for my $lease (sort keys %channel)
{
	my $t = q1("SELECT dsync_acquire('$lease', 'last', '1 hour')");
	my @expect = ("acquired:last:$t");
	is_deeply([ summary(events_until_kind($lease, 'acquired', 'last')) ],
		\@expect, "no unexpected event on $channel{$lease}");
}

$listener->quit;
$node->stop;
done_testing();
