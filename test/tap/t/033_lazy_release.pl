# A release commits without waiting for its WAL flush, and that loses
# nothing a user relies on (src/base/lazycommit.c).
#
# A hand-off used to cost two flushes in a row: the release, then the next
# grant.  Now a transaction whose only writes are releases commits
# asynchronously.  Proven here with the WAL writer stopped (SIGSTOP), so
# that nothing but a synchronous commit flushes WAL, and crashes made with
# SIGKILL to every process of the server, so that WAL buffers that were
# not written are lost:
#
#  1. a release alone does not flush; lost in a crash, the lease is held
#     again by its old holder, with its token, until its ttl (nobody else
#     can take it);
#  2. a hand-off: the waiter's grant flushes, and carries the release: after
#     a crash the waiter holds the lease;
#  3. a release in the same transaction as another write (a row of the
#     caller's, a grant), before or after it, commits as synchronous_commit
#     says: after a crash both are there;
#  4. with a synchronous standby whose walsender is stalled, a release
#     returns at once (it used to wait for the standby); after failover
#     the lease is held by its old holder; a hand-off's grant waits for
#     the standby and, after failover, the waiter holds the lease; an
#     ephemeral grant of a released name waits for the standby too, and
#     when that wait is cancelled (statement_timeout) the acquire fails
#     (57014) and grants nothing: after failover the old holder holds the
#     name, and nobody else believes they do; under synchronous_commit =
#     local it does not wait for the standby at all;
#  5. (run before 4) a release's `released` event is heard only once the
#     release is on disk, with and without the event log;
#  6. (run after 5) an ephemeral grant writes no WAL, so it cannot carry a
#     release the way a durable grant does: when it takes a name a durable
#     holder released, it flushes that release before it returns, and
#     after a crash the old holder does not hold the name again (its
#     reentrant acquire would overlap the ephemeral holder).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/..";
use DsyncTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

# Nothing but a synchronous commit may flush WAL while a case runs.
my @quiet = ('bgwriter_lru_maxpages = 0', 'checkpoint_timeout = 1h',
	'max_prepared_transactions = 2', 'dsync.ephemeral_max_ttl = 2');

# The pid of a server process by backend_type.
sub aux_pid
{
	my ($node, $type) = @_;
	return q1($node, "SELECT pid FROM pg_stat_activity WHERE backend_type = '$type'");
}

# The WAL flush position before and after $sql, run in one psql session.
# The session first releases a lease nobody holds: a new backend's first
# catalog reads may prune a catalog page, which writes WAL, and WAL written
# after a release keeps the commit synchronous (lazycommit.c: it cannot
# tell a pruned page from the caller's own writes).
sub flushed_around
{
	my ($node, $sql) = @_;
	my $out = q1($node,
		"SELECT dsync_release('warm-up', 'nobody');\n"
		  . "SELECT pg_current_wal_flush_lsn();\n$sql;\nSELECT pg_current_wal_flush_lsn()");
	my @lines = split /\n/, $out;
	shift @lines;
	return ($lines[0], $lines[-1], @lines[ 1 .. $#lines - 1 ]);
}

# Release in a psql session of its own, after a release of a lease nobody
# holds (see flushed_around), with a 30 s limit; what psql printed.
sub release_warm
{
	my ($node, $lease, $holder) = @_;
	my ($out, $err) = ('', '');
	eval {
		IPC::Run::run(
			[
				'psql', '-XAtq', '-d', $node->connstr('postgres'),
				'-c', "SELECT dsync_release('warm-up', 'nobody')",
				'-c', "SELECT dsync_release('$lease', '$holder')"
			],
			'>', \$out, '2>', \$err, IPC::Run::timeout(30));
	};
	diag("release of $lease: $@") if $@;
	return (split /\n/, $out)[-1] // '';
}

my $node = dsync_node('lazy', @quiet);
$node->safe_psql('postgres', 'CREATE TABLE t (v int)');
reaper_pid($node);

# 1. A release alone.
my $token = q1($node, "SELECT dsync_acquire('a', 'A', '1 hour')");
my $ww = aux_pid($node, 'walwriter');
like($ww, qr/^\d+$/, 'found the WAL writer');
is(kill('STOP', $ww), 1, 'WAL writer stopped');
my ($before, $after, $released) =
  flushed_around($node, "SELECT dsync_release('a', 'A')");
is($released, 't', 'release: done');
is($after, $before, 'a release alone flushes no WAL');
crash_restart($node);
is( q1($node, "SELECT holder || ' ' || fencing FROM dsync_leases WHERE lease = 'a'"),
	"A $token",
	'a release lost in a crash: the lease is its old holder\'s again, same token');
is(q1($node, "SELECT dsync_acquire('a', 'B') IS NULL"),
	't', 'and nobody else can take it');

# 2. A hand-off: the grant's flush carries the release.
$token = q1($node, "SELECT dsync_acquire('h', 'A', '1 hour')");
reaper_pid($node);
my $waiter = psql_client($node, $node->safe_psql('postgres', 'SELECT current_user'));
$waiter->{in} .= "SELECT 'granted ' || dsync_acquire('h', 'B', '1 hour', '1 minute');\n";
$waiter->{h}->pump_nb;
ok( wait_for($node,
		"SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'h' AND holder = 'B'"),
	'B waits for h');
$ww = aux_pid($node, 'walwriter');
is(kill('STOP', $ww), 1, 'WAL writer stopped');
# Whether the release flushed cannot be told apart here from B's grant,
# which flushes at once; case 1 shows that a release alone does not.
is(q1($node, "SELECT dsync_release('h', 'A')"), 't', 'A releases h');
ok(send_wait($waiter, '', qr/granted (\d+)/), 'B got h');
my ($btoken) = $waiter->{out} =~ /granted (\d+)/;
cmp_ok($btoken, '>', $token, "B's token is above A's");
crash_restart($node);
is(q1($node, "SELECT holder || ' ' || fencing FROM dsync_leases WHERE lease = 'h'"),
	"B $btoken", 'after a crash B holds h: its grant carried the release');

# 3. A release with another write in its transaction.
q1($node,
	"SELECT dsync_acquire('r1', 'A', '1 hour'), dsync_acquire('r2', 'A', '1 hour'), "
	  . "dsync_acquire('r3', 'A', '1 hour')");
$ww = aux_pid($node, 'walwriter');
is(kill('STOP', $ww), 1, 'WAL writer stopped');
($before, $after) = flushed_around($node,
	"BEGIN; INSERT INTO t VALUES (1); SELECT dsync_release('r1', 'A'); COMMIT");
isnt($after, $before, 'a row then a release: the commit flushed');
($before, $after) = flushed_around($node,
	"BEGIN; SELECT dsync_release('r2', 'A'); INSERT INTO t VALUES (2); COMMIT");
isnt($after, $before, 'a release then a row: the commit flushed');
($before, $after) = flushed_around($node,
	"BEGIN; SELECT dsync_release('r3', 'A'); SELECT dsync_acquire('g', 'A', '1 hour'); COMMIT");
isnt($after, $before, 'a release then a grant: the commit flushed');
($before, $after) = flushed_around($node,
	"BEGIN; SELECT dsync_acquire('g2', 'A', '1 hour'); SELECT dsync_release('g', 'A'); COMMIT");
isnt($after, $before, 'a grant then a release: the commit flushed');
crash_restart($node);
is(q1($node, 'SELECT string_agg(v::text, \',\' ORDER BY v) FROM t'),
	'1,2', 'after a crash both rows are there');
is( q1($node,
		"SELECT string_agg(lease, ',' ORDER BY lease) FROM dsync_leases WHERE holder = 'A'"),
	'a,g2', 'and the releases and grants of those transactions held (a: from case 1)');

# The setting itself is never seen lowered.
is(q1($node, "BEGIN; SELECT dsync_release('g2', 'A'); SHOW synchronous_commit; COMMIT; SHOW synchronous_commit"),
	"t\non\non", 'synchronous_commit reads as the session set it, during and after');

# 5. A release's event is heard only once the release is on disk, with the
# event log running (its commit flushes) and without it (the worker
# flushes before it notifies).
for my $retention ('5min', '0')
{
	$node->safe_psql('postgres', "ALTER SYSTEM SET dsync.event_retention = '$retention'");
	$node->reload;
	reaper_pid($node);
	my $listener = Listener->new($node);
	my $channel = $listener->listen('n');
	q1($node, "SELECT dsync_acquire('n', 'A', '1 hour')");
	$listener->take($channel, 1);
	$ww = aux_pid($node, 'walwriter');
	is(kill('STOP', $ww), 1, "retention $retention: WAL writer stopped");
	is(q1($node, "SELECT dsync_release('n', 'A')"), 't', "retention $retention: n released");
	my @heard = $listener->take($channel, 1);
	is($heard[0]{json}{event}, 'released', "retention $retention: the release was heard");
	$listener->quit;
	crash_restart($node);
	is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'n'"),
		'0', "retention $retention: after a crash, the release heard is still there");
}
# 6. An ephemeral grant after a release: from a new session (the row is
# looked up in the index) and from one that looked at the row before (its
# location is cached).
$token = q1($node,
	"SELECT dsync_acquire('e1', 'A', '1 hour') + dsync_acquire('e2', 'A', '1 hour')");
my $b = psql_client($node, $node->safe_psql('postgres', 'SELECT current_user'));
ok( send_wait($b,
		"SELECT 'refused ' || (dsync_acquire('e2', 'B', '2 s', '10 s', NULL, false) IS NULL);",
		qr/refused t/),
	'B looks at e2 while A holds it');
$ww = aux_pid($node, 'walwriter');
is(kill('STOP', $ww), 1, 'WAL writer stopped');
($before, $after, $released) = flushed_around($node,
	"SELECT dsync_release('e1', 'A') AND dsync_release('e2', 'A')");
is($released, 't', 'A releases e1 and e2');
is($after, $before, 'the releases alone flush no WAL');
like(q1($node, "SELECT dsync_acquire('e1', 'B', '2 s', '10 s', NULL, false)"),
	qr/^\d+$/, 'B takes e1 as an ephemeral lease, from a new session');
ok( send_wait($b, "SELECT 'granted ' || dsync_acquire('e2', 'B', '2 s', '10 s', NULL, false);",
		qr/granted \d+/),
	'and e2, from the session that looked at it before');
crash_restart($node);
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease IN ('e1', 'e2')"),
	'0', 'after a crash A holds neither: the ephemeral grants flushed the releases');
$node->stop;

# 4. A synchronous standby.
my $primary = dsync_node('lazy_primary', @quiet);
$primary->backup('bkp');
my $standby = PostgreSQL::Test::Cluster->new('lazy_standby');
$standby->init_from_backup($primary, 'bkp', has_streaming => 1);
$standby->start;
stop_at_end($standby);
my $appname = $standby->name;
$primary->append_conf('postgresql.conf', "synchronous_standby_names = '$appname'\n");
$primary->reload;
$primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = '$appname'")
  or die 'standby did not become synchronous';
reaper_pid($primary);

$token = q1($primary, "SELECT dsync_acquire('x', 'A', '1 hour')");
my $htoken = q1($primary, "SELECT dsync_acquire('y', 'A', '1 hour')");
q1($primary, "SELECT dsync_acquire('z', 'A', '1 hour')");
q1($primary, "SELECT dsync_acquire('v', 'A', '1 hour')");
q1($primary, "SELECT dsync_acquire('u', 'A', '1 hour')");
# An ephemeral grant now, so that the durable record of ephemeral use
# (ephemeral_record.c, which flushes and waits for the standby itself) is
# fresh when the one below is made.
like(q1($primary, "SELECT dsync_acquire('w', 'C', '2 s', '10 s', NULL, false)"),
	qr/^\d+$/, 'an ephemeral grant writes the record of ephemeral use');
$primary->wait_for_catchup($standby);
$waiter = psql_client($primary, $primary->safe_psql('postgres', 'SELECT current_user'));
$waiter->{in} .= "SELECT 'granted ' || dsync_acquire('y', 'B', '1 hour', '1 minute');\n";
$waiter->{h}->pump_nb;
ok( wait_for($primary,
		"SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'y' AND holder = 'B'"),
	'B waits for y');
my $walsender = q1($primary,
	"SELECT pid FROM pg_stat_replication WHERE application_name = '$appname'");
is(kill('STOP', $walsender), 1, 'walsender stalled');
is(release_warm($primary, 'x', 'A'), 't', 'with the standby stalled, a release returns at once');
is(release_warm($primary, 'y', 'A'), 't', 'and so does the release B waits for');
ok( wait_for($primary,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
		  . "AND query LIKE '%dsync_acquire(''y''%'"),
	"B's grant waits for the standby");
# An ephemeral grant writes no WAL: it waits for the standby to have the
# release it relies on before it grants.
is(release_warm($primary, 'z', 'A'), 't', 'a release of z returns at once too');
my $eph = psql_client($primary, $primary->safe_psql('postgres', 'SELECT current_user'));
$eph->{in} .= "SELECT 'ephemeral ' || dsync_acquire('z', 'C', '2 s', '10 s', NULL, false);\n";
$eph->{h}->pump_nb;
ok( wait_for($primary,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
		  . "AND query LIKE '%dsync_acquire(''z''%'"),
	"C's ephemeral grant of z waits for the standby");
kill('CONT', $walsender);
ok(send_wait($waiter, '', qr/granted (\d+)/), 'B got y once the standby confirmed');
ok(send_wait($eph, '', qr/ephemeral \d+/), 'C got z once the standby confirmed');
($btoken) = $waiter->{out} =~ /granted (\d+)/;
# The durable record of ephemeral use must not need writing while the
# standby is stalled below (that would wait for the standby too, with an
# error of its own): it is moved to the present by hand, while it answers.
q1($primary,
	"SELECT setval('dsync_ephemeral_seq', "
	  . "(extract(epoch FROM clock_timestamp() - '2000-01-01 00:00:00+00') * 1000000)::bigint)");
$walsender = q1($primary,
	"SELECT pid FROM pg_stat_replication WHERE application_name = '$appname'");
is(kill('STOP', $walsender), 1, 'walsender stalled again');
is(q1($primary, "SELECT dsync_release('y', 'B')"), 't',
	'B releases y, which the standby will not hear of');

# A cancelled wait for the standby grants nothing.
is(release_warm($primary, 'v', 'A'), 't', 'with the standby stalled, A releases v');
my ($ret, $out, $err) = $primary->psql('postgres',
	"\\set VERBOSITY verbose\nSET statement_timeout = '2s';\n"
	  . "SELECT dsync_acquire('v', 'D', '2 s', '10 s', NULL, false);");
like($err, qr/WARNING:.*canceling wait for synchronous replication/,
	'an ephemeral acquire of v under statement_timeout: its wait for the standby is cancelled');
like(
	$err,
	qr/ERROR:\s+57014: canceled waiting for the synchronous standby to confirm a release/,
	'... and the acquire fails with 57014');
is($out, '', '... returning no token');
is(q1($primary, "SELECT count(*) FROM dsync_leases WHERE lease = 'v'"),
	'0', 'v is held by nobody afterwards');
is(q1($primary, "SELECT dsync_leader('v') IS NULL"), 't', '... nor has a leader');
# Under synchronous_commit = local a commit waits for no standby, and
# neither does the grant.
is(release_warm($primary, 'u', 'A'), 't', 'with the standby stalled, A releases u');
like(
	q1($primary,
		"SET synchronous_commit = local; SET statement_timeout = '30s';\n"
		  . "SELECT dsync_acquire('u', 'D', '2 s', '0', NULL, false)"),
	qr/^\d+$/,
	'under synchronous_commit = local an ephemeral grant of u does not wait for the standby');
$primary->stop('immediate');
$standby->promote;
is(q1($standby, "SELECT holder || ' ' || fencing FROM dsync_leases WHERE lease = 'y'"),
	"B $btoken", 'after failover B holds y: its grant carried the release');
like(q1($standby, "SELECT holder FROM dsync_leases WHERE lease = 'x'"),
	qr/^(A)?$/, 'x is free or its old holder\'s after failover, nobody else\'s');
is(q1($standby, "SELECT dsync_acquire('y', 'C') IS NULL"),
	't', 'nobody else takes y before its ttl');
is(q1($standby, "SELECT holder FROM dsync_leases WHERE lease = 'v'"),
	'A', 'after failover A holds v, whose ephemeral acquire by D failed');

done_testing();
