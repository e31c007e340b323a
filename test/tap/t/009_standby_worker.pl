# The dsync background workers on a hot standby and after its promotion.
#
# API.md: the background workers "run on the primary only and start on
# promotion"; "On a hot standby, the read functions and views work;
# functions that change state fail with SQLSTATE 25006"; "For expiry, the
# background worker sends expired as soon as a lease's time passes".
# NOTES.md section 4: "BgWorkerStart_RecoveryFinished: nothing runs on a
# standby, and the worker starts on promotion, where it must rebuild its
# deadlines from the table."
#
# This test proves:
#   - a hot standby runs no dsync worker at all (no launcher, no reaper);
#   - reads (dsync_leader, dsync_leases) work there, and writes
#     (dsync_acquire, dsync_release, dsync_reap) fail with SQLSTATE 25006;
#   - after promotion a launcher and a reaper start;
#   - a lease granted on the old primary with a 2-second ttl, expired
#     before the promotion and never cleared, is cleared by the promoted
#     node's reaper (its row leaves dsync_lease) and announced by an
#     expired event to a LISTENing client there;
#   - a 1-hour lease survives and new tokens are larger than old ones.
#
# Two races are made deterministic rather than timed:
#   - the old primary's reaper is frozen (SIGSTOP) so that it cannot clear
#     the short lease before the standby has it;
#   - LISTEN is not allowed during recovery, so the client can only listen
#     once the node is promoted, when the new reaper may already be running.
#     A prepared transaction made on the old primary holds an ACCESS
#     EXCLUSIVE lock on dsync_lease; it survives the promotion, so the new
#     reaper cannot clear anything until the test, already listening, runs
#     ROLLBACK PREPARED.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use lib '.';
use DsyncTest qw(stop_at_end);
use Time::HiRes qw(time usleep);

my $event_timeout = 30;    # seconds

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dsync'\nmax_prepared_transactions = 5\n");
$primary->start;
stop_at_end($primary);

$primary->safe_psql('postgres', 'CREATE EXTENSION dsync');

my $reaper_sql = "SELECT pid FROM pg_stat_activity "
  . "WHERE backend_type = 'dsync reaper' AND datname = 'postgres'";
my $launcher_sql =
  "SELECT pid FROM pg_stat_activity WHERE backend_type = 'dsync launcher'";
my $dsync_workers_sql =
  "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dsync%'";

ok($primary->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($launcher_sql) l"),
	'the primary runs a launcher');
ok($primary->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($reaper_sql) r"),
	'the primary runs a reaper for postgres');
my $primary_reaper = $primary->safe_psql('postgres', $reaper_sql);

my $max_token = 0;

sub primary_acquire
{
	my ($lease, $holder, $ttl) = @_;
	my $t = $primary->safe_psql('postgres',
		"SELECT dsync_acquire('$lease', '$holder', '$ttl')");
	$max_token = $t if $t =~ /^\d+$/ && $t > $max_token;
	return $t;
}

my $t_long = primary_acquire('long', 'keeper', '1 hour');
like($t_long, qr/^\d+$/, 'primary grants a 1-hour lease');

$primary->backup('bkp');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bkp', has_streaming => 1);
$standby->start;
stop_at_end($standby);
$primary->wait_for_catchup($standby);

# --- the hot standby: no workers, reads work, writes fail ------------------

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is in recovery');
is($standby->safe_psql('postgres', $dsync_workers_sql),
	'0', 'no dsync worker runs on the hot standby');
is($standby->safe_psql('postgres', "SELECT dsync_leader('long')"),
	'keeper', 'dsync_leader works on the standby');
is($standby->safe_psql('postgres',
		"SELECT holder || '|' || fencing FROM dsync_leases WHERE lease = 'long'"),
	"keeper|$t_long", 'dsync_leases works on the standby');

my %writes = (
	'dsync_acquire' => "SELECT dsync_acquire('a', 'b')",
	'dsync_release' => "SELECT dsync_release('long', 'keeper')",
	'dsync_reap'    => "SELECT dsync_reap()");
for my $what (sort keys %writes)
{
	my ($ret, $stdout, $stderr) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$writes{$what};", on_error_stop => 1);
	isnt($ret, 0, "$what fails on the standby");
	like($stderr, qr/ERROR:\s+25006:/, "$what on the standby: SQLSTATE 25006");

	($ret, $stdout, $stderr) = $standby->psql(
		'postgres', qq{
DO \$\$
BEGIN
	PERFORM ($writes{$what});
	RAISE NOTICE 'no error';
EXCEPTION WHEN OTHERS THEN
	RAISE NOTICE 'sqlstate=%', SQLSTATE;
END
\$\$;
});
	like($stderr, qr/NOTICE:\s+sqlstate=25006/,
		"$what on the standby, caught in a DO block: SQLSTATE 25006");
}

# --- a short lease, expired before promotion and never cleared --------------

# Freeze the primary's reaper so that it cannot clear the lease.  Freeze
# it while it sleeps (not while it holds a lock): if pg_stat_activity does
# not show it waiting, let it run a moment and try again.
my $frozen = 0;

END
{
	kill 'CONT', $frozen if $frozen;
}

for my $try (1 .. 200)
{
	kill('STOP', $primary_reaper) or die "cannot SIGSTOP $primary_reaper: $!";
	$frozen = $primary_reaper;
	my $w = $primary->safe_psql('postgres',
		"SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $primary_reaper");
	last if $w =~ /^(Activity|Extension|Timeout)$/;
	kill 'CONT', $primary_reaper;
	$frozen = 0;
	die 'the primary reaper never showed as sleeping' if $try == 200;
	usleep(20_000);
}

my $t_short = primary_acquire('short', 'gone', '2 seconds');
like($t_short, qr/^\d+$/, 'primary grants a 2-second lease');
my $short_expiry = $primary->safe_psql('postgres',
	"SELECT expires_at FROM dsync_leases WHERE lease = 'short'");
like($short_expiry, qr/^\d{4}-/, 'the 2-second lease shows its expiry');
$primary->wait_for_catchup($standby);
ok($standby->poll_query_until('postgres', "SELECT dsync_leader('short') IS NULL"),
	'the 2-second lease expires (seen on the standby)');
is($standby->safe_psql('postgres',
		"SELECT count(*) FROM dsync_lease WHERE name = 'short' AND holder = 'gone'"),
	'1', 'the expired lease was never cleared: its row is on the standby');
is($standby->safe_psql('postgres', $dsync_workers_sql),
	'0', 'still no dsync worker on the standby');

# Lock dsync_lease in a prepared transaction, so that after the promotion
# nothing can clear the lease until we are listening.
$primary->safe_psql('postgres',
	"BEGIN; LOCK TABLE dsync_lease IN ACCESS EXCLUSIVE MODE; PREPARE TRANSACTION 'hold_lease_table';");
$primary->wait_for_catchup($standby);
kill 'CONT', $frozen;
$frozen = 0;
$primary->stop('immediate');

# --- promotion ----------------------------------------------------------------

$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');

my $listener = $standby->background_psql('postgres');
$listener->set_query_timer_restart;
my $channel = $standby->safe_psql('postgres', "SELECT dsync_channel('short')");
is($channel, 'dsync:short', 'channel of the short lease');
$listener->query_safe(qq{LISTEN "$channel"});

$standby->safe_psql('postgres', "ROLLBACK PREPARED 'hold_lease_table'");

ok($standby->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($launcher_sql) l"),
	'a launcher starts on the promoted node');
ok($standby->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($reaper_sql) r"),
	'a reaper for postgres starts on the promoted node');
my $new_reaper = $standby->safe_psql('postgres', $reaper_sql);

# Collect notifications: psql prints them after the next command's result.
my @events;
my $deadline = time + $event_timeout;
while (time < $deadline)
{
	my $out = $listener->query_safe('SELECT 1');
	for my $line (split /\r?\n/, $out)
	{
		next
		  unless $line =~
		  /^Asynchronous notification "(.*?)"(?: with payload "(.*)")? received from server process with PID (\d+)\.$/;
		my %n = (channel => $1, raw => $2 // '', pid => $3);
		$n{json} = eval { JSON::PP->new->decode($n{raw}) } // {};
		push @events, \%n;
	}
	last if grep { ($_->{json}{event} // '') eq 'expired' } @events;
	usleep(50_000);
}
my @expired = grep { ($_->{json}{event} // '') eq 'expired' } @events;
is(scalar(@expired), 1, 'the promoted node announces the expired lease once')
  or diag('received: ' . join(' ', map { $_->{raw} } @events));
my $e = $expired[0] // { json => {} };
is($e->{channel},         'dsync:short', 'expired: channel');
is($e->{json}{lease},     'short',       'expired: lease');
is($e->{json}{holder},    'gone',        'expired: holder');
is($e->{json}{fencing},   $t_short,      'expired: fencing is the token of the old grant');
like($e->{json}{expires_at} // '',
	qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d*[1-9])?\+00:00$/,
	'expired: expires_at is RFC 3339 in UTC');
is($standby->safe_psql('postgres',
		"SELECT '" . ($e->{json}{expires_at} // 'infinity')
		  . "'::timestamptz = '$short_expiry'::timestamptz"),
	't', 'expired: expires_at is the expiry granted on the old primary');
is($e->{pid} // '', $new_reaper, 'the expired event is sent by the new reaper');
ok($standby->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM dsync_lease WHERE name = 'short' AND holder IS NOT NULL"),
	'the expired lease is cleared in dsync_lease on the promoted node');

# The long lease survives; the promoted node grants larger tokens.
is($standby->safe_psql('postgres', "SELECT dsync_leader('long')"),
	'keeper', 'the 1-hour lease is still held after promotion');
my $t_new = $standby->safe_psql('postgres', "SELECT dsync_acquire('after', 'new', '1 hour')");
cmp_ok($t_new, '>', $max_token,
	"a token granted after promotion ($t_new) is above every token of the old primary ($max_token)");
like($standby->safe_psql('postgres', 'SELECT dsync_reap()'), qr/^\d+$/,
	'dsync_reap works on the promoted node');

$listener->quit;
$standby->stop;
done_testing();
