# Ephemeral leases (dsync_acquire(..., durable => false)) on real servers.
#
# API.md, "Ephemeral leases": an ephemeral lease is kept in shared memory
# only; it takes effect at once, is not written to WAL and does not survive
# a restart or failover; after either, no ephemeral grant is made until
# dsync.ephemeral_max_ttl has passed, so that a holder from before can never
# overlap a new one.  Fencing tokens stay durable and increasing.  Renew,
# release, leader, assert_held, waits, events and the views work for both
# kinds.
#
# This test proves, with dsync.ephemeral_max_ttl = 3 (seconds):
#   1. right after a start, an ephemeral acquire with wait 0 returns NULL
#      (the grace) and a blocking one is granted once the grace is over,
#      never before the dsync launcher's start + ephemeral_max_ttl (server
#      clock);
#   2. an ephemeral lease is gone after a clean restart and after a crash
#      restart (a backend killed with SIGKILL); the grace applies again
#      after each; the new grant's token is above every token granted
#      before;
#   3. after a promotion, an ephemeral lease of the old primary is not on
#      the new one; the grace applies there too, and the token granted
#      after it is above the old primary's tokens;
#   4. the role that acquired owns the lease: another role gets "not held"
#      from renew, release and assert_held (NULL, false, SQLSTATE 55000),
#      a member of the owner role and the owner itself succeed, and
#      dsync_leases shows the owner;
#   5. a LISTENing session receives acquired, released and expired (from
#      the reaper) in order with increasing seq; with nobody listening,
#      nothing is sent and the reaper still clears an expired lease;
#   6. a ttl above dsync.ephemeral_max_ttl is SQLSTATE 22023; with
#      dsync.ephemeral_max_leases = 2 the third concurrent holder gets
#      SQLSTATE 53200 ("too many ephemeral leases"), and after a release a
#      new grant works;
#   7. a client terminated (pg_terminate_backend) while blocked in an
#      ephemeral wait leaves no waiter in dsync_waiters and never gets the
#      lease.
#
# Only lower bounds that are guaranteed are asserted on time: a grant is
# never before launcher start + ephemeral_max_ttl.  "Returns NULL right
# after start" is asserted only when the server's own clock shows the call
# ended inside the grace (otherwise the machine was too slow to see it, and
# the assertion is skipped with a note).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use lib '.';
use DsyncTest;

my $max_ttl = 3;    # dsync.ephemeral_max_ttl, seconds
my @conf = ("dsync.ephemeral_max_ttl = $max_ttl", 'restart_after_crash = on');

my @clients;

END
{
	for my $h (@clients)
	{
		eval { $h->kill_kill(grace => 1) };
	}
}

my $launcher_sql =
  "SELECT pid FROM pg_stat_activity WHERE backend_type = 'dsync launcher'";

# Wait until a launcher (other than $old_pid, if given) runs; its pid.
sub launcher_pid
{
	my ($node, $old_pid) = @_;
	my $other = defined $old_pid ? " AND pid <> $old_pid" : '';
	wait_for($node,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dsync launcher'$other",
		60)
	  or die 'no dsync launcher started';
	return $node->safe_psql('postgres', $launcher_sql);
}

# A helper for grants that must be looked at as the server saw them: when
# the call began, the token, and the grant's acquired_at from dsync_leases,
# read at once in the same function (the lease has a 3-second ttl), with
# the launcher's start time.
sub create_grant_function
{
	my ($node) = @_;
	$node->safe_psql(
		'postgres', qq{
CREATE FUNCTION eph_grant(l text, h text, w interval,
	OUT called_at timestamptz, OUT token bigint,
	OUT acquired_at timestamptz, OUT launcher_start timestamptz)
LANGUAGE plpgsql AS \$\$
BEGIN
	SELECT a.backend_start INTO launcher_start
	  FROM pg_stat_activity a WHERE a.backend_type = 'dsync launcher';
	called_at := clock_timestamp();
	token := dsync_acquire(l, h, '$max_ttl s', w, NULL, durable => false);
	SELECT d.acquired_at INTO acquired_at
	  FROM dsync_leases d WHERE d.lease = l AND d.holder = h;
END
\$\$;
});
	return;
}

# A blocking ephemeral acquire (wait 30 s) made during or after the
# grace: checks that it is granted, and not before launcher start +
# ephemeral_max_ttl.  Returns the token.
sub grant_after_grace
{
	my ($node, $what, $lease, $holder) = @_;
	my $row = $node->safe_psql('postgres',
		"SELECT coalesce(token::text, 'NULL'), "
		  . "called_at < launcher_start + interval '$max_ttl s', "
		  . "coalesce((acquired_at >= launcher_start + interval '$max_ttl s')::int::text, 'no row'), "
		  . "acquired_at - launcher_start "
		  . "FROM eph_grant('$lease', '$holder', '30 s')");
	my ($token, $in_grace, $not_before, $after) = split /\|/, $row;
	like($token, qr/^\d+$/,
		"$what: a blocking ephemeral acquire (wait 30 s) is granted after the grace");
	is($not_before, '1',
		"$what: the grant is not before the launcher's start + ephemeral_max_ttl ($after after it)");
	note("$what: the blocking acquire was "
		  . ($in_grace eq 't' ? '' : 'not ')
		  . 'called inside the grace');
	return $token;
}

# An ephemeral acquire with wait 0 right after a (re)start or promotion:
# NULL, if the call ended inside the grace by the server's clock.
sub null_in_grace
{
	my ($node, $what, $lease) = @_;
	my $row = $node->safe_psql('postgres',
		"SELECT t IS NULL, clock_timestamp() < l.backend_start + interval '$max_ttl s' "
		  . "FROM (SELECT dsync_acquire('$lease', 'early', '$max_ttl s', '0', NULL, durable => false) AS t OFFSET 0) a, "
		  . "(SELECT backend_start FROM pg_stat_activity WHERE backend_type = 'dsync launcher') l");
	my ($is_null, $in_grace) = split /\|/, $row;
  SKIP:
	{
		skip "$what: the call ended after the grace (slow machine); cannot observe it", 1
		  unless ($in_grace // '') eq 't';
		is($is_null, 't', "$what: an ephemeral acquire with wait 0 during the grace returns NULL");
	}
	return;
}

# psql as a role, verbose errors; (exit code, stdout, stderr).
sub as_role
{
	my ($node, $role, $sql) = @_;
	return $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $role ]);
}

sub eph
{
	my ($node, $lease, $holder, $ttl, $wait) = @_;
	$ttl //= "$max_ttl s";
	$wait //= '0';
	return $node->safe_psql('postgres',
		"SELECT dsync_acquire('$lease', '$holder', '$ttl', '$wait', NULL, durable => false)");
}

# =========================================================================
# 1. The grace right after a start
# =========================================================================

# Without the event log, changes nobody hears are not sent (part 4).
my $node = dsync_node('eph', @conf, 'dsync.event_retention = 0');
launcher_pid($node);
null_in_grace($node, 'start', 'g-start');
create_grant_function($node);
my $max_token = 0;
my $t = grant_after_grace($node, 'start', 'g-block', 'b1');
$max_token = $t if $t =~ /^\d+$/ && $t > $max_token;
is(q1($node, "SELECT dsync_leader('g-block')"), 'b1', 'start: dsync_leader shows the ephemeral holder');
is(q1($node, "SELECT dsync_acquire('g-start', 'early', '$max_ttl s', '0', NULL, durable => false) IS NOT NULL"),
	't', 'start: after the grace an ephemeral acquire with wait 0 is granted');
q1($node, "SELECT dsync_release('g-start', 'early')");

# =========================================================================
# 2. Gone after a clean restart and after a crash restart; tokens rise
# =========================================================================

# Draw tokens of both kinds, and leave an ephemeral lease held.
sub churn
{
	my ($tag) = @_;
	my $sql = '';
	for my $i (1 .. 20)
	{
		$sql .= "SELECT dsync_acquire('churn-$tag', 'c', '$max_ttl s', '0', NULL, durable => false);\n";
		$sql .= "SELECT dsync_release('churn-$tag', 'c')::int - 2;\n";    # -1: not a token
	}
	$sql .= "SELECT dsync_acquire('dur-$tag', 'c', '1 hour');\n";
	$sql .= "SELECT dsync_acquire('held-$tag', 'keeper', '$max_ttl s', '0', NULL, durable => false);\n";
	my @out = split /\n/, $node->safe_psql('postgres', $sql);
	my @tokens = grep { $_ > 0 } @out;
	is(scalar(@tokens), 22, "$tag: 22 grants before");
	is(scalar(grep { $_ eq '-1' } @out), 20, "$tag: 20 ephemeral releases returned true");
	for (@tokens)
	{
		$max_token = $_ if $_ > $max_token;
	}
	is(q1($node, "SELECT dsync_leader('held-$tag')"), 'keeper',
		"$tag: the ephemeral lease is held before");
	is(q1($node, "SELECT holder || ' ' || fencing FROM dsync_leases WHERE lease = 'held-$tag'"),
		"keeper $tokens[-1]", "$tag: dsync_leases shows it before");
	return;
}

# Renew the ephemeral lease just before the restart; its expiry.
sub renew_held
{
	my ($tag) = @_;
	my $exp = q1($node, "SELECT dsync_renew('held-$tag', 'keeper')");
	like($exp, qr/^\d{4}-/, "$tag: the ephemeral lease renewed just before");
	return $exp;
}

sub after_restart
{
	my ($tag, $old_expiry) = @_;
	my $row = q1($node, "SELECT dsync_leader('held-$tag') IS NULL, "
		  . "clock_timestamp() < '$old_expiry'::timestamptz");
	my ($gone, $early) = split /\|/, $row;
	is($gone, 't', "$tag: the ephemeral lease is gone (dsync_leader NULL)");
	note("$tag: looked " . ($early eq 't' ? 'before' : 'after')
		  . " the lease's old expiry");
	is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'held-$tag'"), '0',
		"$tag: dsync_leases has no row for it");
	is(q1($node, "SELECT dsync_leader('dur-$tag')"), 'c', "$tag: the durable lease survived");
	my $old_max = $max_token;
	my $t = grant_after_grace($node, $tag, "held-$tag", 'newcomer');
	cmp_ok($t, '>', $old_max,
		"$tag: the new grant's token ($t) is above every token granted before ($old_max)");
	$max_token = $t if $t =~ /^\d+$/ && $t > $max_token;
	return;
}

churn('restart');
my $old_expiry = renew_held('restart');
$node->restart;
launcher_pid($node);
null_in_grace($node, 'restart', 'held-restart');
after_restart('restart', $old_expiry);

churn('crash');
my $old_launcher = launcher_pid($node);
my $victim = $node->background_psql('postgres');
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
like($victim_pid, qr/^\d+$/, 'crash: a backend to kill');
$old_expiry = renew_held('crash');
is(kill('KILL', $victim_pid), 1, 'crash: backend killed with SIGKILL');
eval { $victim->quit };
ok($node->poll_query_until('postgres', 'SELECT pg_is_in_recovery() = false'),
	'crash: the server accepts connections again');
launcher_pid($node, $old_launcher);
null_in_grace($node, 'crash restart', 'held-crash');
ok(scalar(grep { /terminated by signal 9/ } split /\n/, slurp_file($node->logfile)),
	'crash: the server log shows a crash restart');
after_restart('crash', $old_expiry);

# =========================================================================
# 3. Promotion
# =========================================================================

my $primary = dsync_node('primary', @conf);
create_grant_function($primary);
my $p_max = 0;
$t = grant_after_grace($primary, 'primary', 'p-first', 'p');
$p_max = $t if $t =~ /^\d+$/ && $t > $p_max;

$primary->backup('bkp');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bkp', has_streaming => 1);
$standby->start;
stop_at_end($standby);

for my $i (1 .. 10)
{
	$t = eph($primary, "p-churn-$i", 'p');
	$p_max = $t if $t > $p_max;
}
# The sequence's WAL reaches the standby with a durable grant.
$t = q1($primary, "SELECT dsync_acquire('p-durable', 'p', '1 hour')");
$p_max = $t if $t > $p_max;
$primary->wait_for_catchup($standby);

my ($ret, $stdout, $stderr) = $standby->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT dsync_acquire('s-eph', 's', '$max_ttl s', '0', NULL, durable => false);");
like($stderr, qr/ERROR:\s+25006:/, 'standby: an ephemeral acquire on a hot standby fails with 25006');

$t = eph($primary, 'p-eph', 'p-holder');
like($t, qr/^\d+$/, 'primary: ephemeral lease p-eph granted');
$p_max = $t if $t > $p_max;
is(q1($primary, "SELECT dsync_leader('p-eph')"), 'p-holder', 'primary: p-eph is held there');
is(q1($standby, "SELECT dsync_leader('p-eph') IS NULL"), 't',
	'standby: the primary\'s ephemeral lease is not on the standby');
is(q1($standby, "SELECT dsync_leader('p-durable')"), 'p', 'standby: the durable lease is');

like(q1($primary, "SELECT dsync_renew('p-eph', 'p-holder')"), qr/^\d{4}-/,
	'primary: p-eph renewed just before the failover');
$primary->stop('immediate');
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');
is(q1($standby, "SELECT dsync_leader('p-eph') IS NULL"), 't',
	'promoted: the old primary\'s ephemeral lease is not held');
is(q1($standby, "SELECT count(*) FROM dsync_leases WHERE lease = 'p-eph'"), '0',
	'promoted: dsync_leases has no row for it');
launcher_pid($standby);
null_in_grace($standby, 'promoted', 'p-eph');
$t = grant_after_grace($standby, 'promoted', 'p-eph', 'new-holder');
cmp_ok($t, '>', $p_max,
	"promoted: the new ephemeral grant's token ($t) is above every token of the old primary ($p_max)");
is(q1($standby, "SELECT dsync_leader('p-durable')"), 'p', 'promoted: the durable lease survived');
$standby->stop;

# =========================================================================
# 4. The role that acquired owns it
# =========================================================================

$node->safe_psql('postgres',
	'CREATE ROLE app LOGIN; CREATE ROLE other LOGIN; CREATE ROLE appmember LOGIN IN ROLE app;');
($ret, $stdout, $stderr) = as_role($node, 'app',
	"SELECT dsync_acquire('owned', 'h', '$max_ttl s', '0', NULL, durable => false);");
like($stdout, qr/^\d+$/, 'role: app acquires an ephemeral lease') or diag($stderr);
my $t_owned = $stdout;
is(q1($node, "SELECT owner::text FROM dsync_leases WHERE lease = 'owned'"),
	'app', 'role: dsync_leases shows owner app');

($ret, $stdout, $stderr) = as_role($node, 'other', "SELECT dsync_renew('owned', 'h') IS NULL;");
is($stdout, 't', 'role: another role\'s renew returns NULL (not held)') or diag($stderr);
($ret, $stdout, $stderr) = as_role($node, 'other', "SELECT dsync_release('owned', 'h');");
is($stdout, 'f', 'role: another role\'s release returns false (not held)') or diag($stderr);
($ret, $stdout, $stderr) = as_role($node, 'other', "SELECT dsync_assert_held('owned', 'h');");
like($stderr, qr/ERROR:\s+55000:/, 'role: another role\'s assert_held fails with 55000');
($ret, $stdout, $stderr) = as_role($node, 'other',
	"SELECT dsync_acquire('owned', 'h', '$max_ttl s', '0', NULL, durable => false) IS NULL;");
is($stdout, 't', 'role: another role cannot take it with the same holder string') or diag($stderr);
is(q1($node, "SELECT holder || ' ' || fencing || ' ' || owner::text FROM dsync_leases WHERE lease = 'owned'"),
	"h $t_owned app", 'role: still held by app after the other role\'s tries');

($ret, $stdout, $stderr) = as_role($node, 'appmember', "SELECT dsync_renew('owned', 'h') IS NOT NULL;");
is($stdout, 't', 'role: a member of app can renew it') or diag($stderr);
($ret, $stdout, $stderr) = as_role($node, 'app', "SELECT dsync_renew('owned', 'h') IS NOT NULL;");
is($stdout, 't', 'role: app\'s renew returns the new expiry') or diag($stderr);
($ret, $stdout, $stderr) = as_role($node, 'app', "SELECT dsync_assert_held('owned', 'h');");
is($stdout, $t_owned, 'role: app\'s assert_held returns the token') or diag($stderr);
($ret, $stdout, $stderr) = as_role($node, 'app', "SELECT dsync_release('owned', 'h');");
is($stdout, 't', 'role: app\'s release returns true') or diag($stderr);
is(q1($node, "SELECT dsync_leader('owned') IS NULL"), 't', 'role: released');

# =========================================================================
# 5. Events
# =========================================================================

my $reaper = reaper_pid($node);
my $listener = Listener->new($node);
my $channel = $listener->listen('eph-ev');
my $t1 = eph($node, 'eph-ev', 'e1');
is(q1($node, "SELECT dsync_release('eph-ev', 'e1')"), 't', 'events: e1 releases');
my $t2 = eph($node, 'eph-ev', 'e2', '1 s');
like($t2, qr/^\d+$/, 'events: e2 acquires with a 1-second ttl and never releases');
my @ev = $listener->take($channel, 4);
is_deeply(
	[ map { join(':', map { $_ // 'undef' } @{ $_->{json} }{qw(event holder fencing)}) } @ev ],
	[ "acquired:e1:$t1", "released:e1:$t1", "acquired:e2:$t2", "expired:e2:$t2" ],
	'events: acquired, released, acquired, expired arrive in order with their tokens');
my @seq = map { $_->{json}{seq} // 0 } @ev;
ok(scalar(@seq) == 4 && !grep({ $seq[$_] <= $seq[ $_ - 1 ] } 1 .. $#seq),
	'events: seq strictly increases (' . join(' ', @seq) . ')');
is(scalar(grep { $_->{pid} eq $reaper } @ev), scalar(@ev), 'events: all sent by the reaper');
is(scalar(grep { ($_->{json}{lease} // '') eq 'eph-ev' } @ev), scalar(@ev),
	'events: all name the lease');
$listener->quit;

# With nobody listening the same changes send nothing, and the expiry is
# still cleared on time: the reaper learns ephemeral deadlines from the
# database's slot, not from queued events.  Once a change on a name just
# listened to arrives, the reaper has sent whatever it would have.
ok(wait_for($node, "SELECT count(*) = 0 FROM pg_stat_activity"
		  . " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"),
	'events: the listener has left');
q1($node, "SELECT dsync_stats_reset()");
eph($node, 'eph-quiet', 'q1');
q1($node, "SELECT dsync_release('eph-quiet', 'q1')");
eph($node, 'eph-quiet', 'q2', '1 s');
ok(wait_for($node, "SELECT expiries = 1 FROM dsync_stats"),
	'events: with nobody listening, the reaper still clears the expired lease');
is(q1($node, "SELECT dsync_leader('eph-quiet') IS NULL"), 't', 'events: eph-quiet is free');
$listener = Listener->new($node);
$channel = $listener->listen('eph-heard');
my $t5 = eph($node, 'eph-heard', 'h');
@ev = $listener->take($channel, 1);
is(scalar(@ev) . ' ' . ($ev[0]{json}{fencing} // ''), "1 $t5", 'events: the next heard change arrives');
is(q1($node, "SELECT grants || ' ' || releases || ' ' || expiries || ' ' || events_sent FROM dsync_stats"),
	'3 1 1 1', 'events: of 5 changes only the one heard was sent (grants, releases, expiries, sent)');
$listener->quit;
q1($node, "SELECT dsync_release('eph-heard', 'h')");

# =========================================================================
# 6. Limits
# =========================================================================

($ret, $stdout, $stderr) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT dsync_acquire('long', 'h', '" . ($max_ttl + 1)
	  . " s', '0', NULL, durable => false);");
like($stderr, qr/ERROR:\s+22023:.*ephemeral_max_ttl/,
	'limits: an ephemeral ttl above dsync.ephemeral_max_ttl is SQLSTATE 22023');
like(eph($node, 'long', 'h'), qr/^\d+$/, 'limits: a ttl of exactly ephemeral_max_ttl is granted');
($ret, $stdout, $stderr) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT dsync_renew('long', 'h', '" . ($max_ttl + 1) . " s');");
like($stderr, qr/ERROR:\s+22023:/,
	'limits: renewing an ephemeral lease beyond dsync.ephemeral_max_ttl is SQLSTATE 22023');
q1($node, "SELECT dsync_release('long', 'h')");

my $cap = dsync_node('cap', @conf, 'dsync.ephemeral_max_leases = 2');
launcher_pid($cap);
like(eph($cap, 'c1', 'h', "$max_ttl s", '30 s'), qr/^\d+$/, 'cap: first holder (after the grace)');
like(q1($cap, "SELECT dsync_renew('c1', 'h')"), qr/^\d{4}-/, 'cap: first holder renewed');
like(eph($cap, 'c2', 'h'), qr/^\d+$/, 'cap: second holder');
# Both renewed in the same session just before, so that both are live.
($ret, $stdout, $stderr) = $cap->psql('postgres',
	"\\set VERBOSITY verbose\n"
	  . "SELECT dsync_renew('c1', 'h') IS NOT NULL AND dsync_renew('c2', 'h') IS NOT NULL;\n"
	  . "SELECT dsync_acquire('c3', 'h', '$max_ttl s', '0', NULL, durable => false);");
like($stderr, qr/ERROR:\s+53200:\s+too many ephemeral leases/,
	'cap: the third concurrent holder gets SQLSTATE 53200 "too many ephemeral leases"')
  or diag("stdout: $stdout; held: "
	  . q1($cap, "SELECT string_agg(lease, ',' ORDER BY lease) FROM dsync_leases"));
# If it was granted anyway, let it go, so that what follows still means something.
q1($cap, "SELECT dsync_release('c3', 'h')");
is(q1($cap, "SELECT dsync_release('c1', 'h')"), 't', 'cap: first holder releases');
like(eph($cap, 'c3', 'h'), qr/^\d+$/, 'cap: after a release a new grant works');
is(q1($cap, "SELECT string_agg(lease, ',' ORDER BY lease) FROM dsync_leases"), 'c2,c3',
	'cap: c2 and c3 are held');
$cap->stop;

# =========================================================================
# 7. A terminated waiter leaves the queue
# =========================================================================

my $t_w = eph($node, 'w-eph', 'h1');
like($t_w, qr/^\d+$/, 'waiter: h1 holds w-eph');
# A guard in an open transaction keeps it held, however long this takes.
my $guard = $node->background_psql('postgres');
is($guard->query_safe("BEGIN; SELECT dsync_assert_held('w-eph', 'h1');"),
	$t_w, 'waiter: h1 guards it in an open transaction');

my ($wout, $werr) = ('', '');
my $wh = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"SELECT dsync_acquire('w-eph', 'w2', '$max_ttl s', '30 s', NULL, durable => false)" ],
	'<', \undef, '>', \$wout, '2>', \$werr);
push @clients, $wh;
ok(wait_for($node, "SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'w-eph' AND holder = 'w2'"),
	'waiter: w2 is queued in dsync_waiters');
my $wpid = q1($node, "SELECT pid FROM dsync_waiters WHERE name = 'w-eph' AND holder = 'w2'");
is(q1($node, "SELECT pg_terminate_backend($wpid)"), 't', 'waiter: pg_terminate_backend of w2');
eval { $wh->finish };
like($werr, qr/terminating connection due to administrator command/,
	'waiter: the waiting client was terminated');
ok(wait_for($node, "SELECT count(*) = 0 FROM dsync_waiters WHERE name = 'w-eph'"),
	'waiter: no waiter left in dsync_waiters');
is(q1($node, "SELECT count(*) FROM dsync_waiters"), '0', 'waiter: dsync_waiters is empty');
$guard->query_safe('COMMIT');
$guard->quit;
q1($node, "SELECT dsync_release('w-eph', 'h1')");
ok(wait_for($node, "SELECT dsync_leader('w-eph') IS NULL"), 'waiter: w-eph is free');
like(eph($node, 'w-eph', 'after'), qr/^\d+$/,
	'waiter: a wait-0 acquire gets it (no ghost waiter, the terminated one never got it)');

$node->stop;
done_testing();
