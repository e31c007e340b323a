# A history-checked fault run: workers increment one fenced register under
# a lease bound to its table, while they are paused past their ttl
# (SIGSTOP), their backends are terminated and the whole server is killed
# (SIGKILL to every process, then crash recovery).
#
# Each worker (test/tap/register_faults.c) acquires the lease (durable or
# ephemeral, at random, ttl 500 ms), reads the register unfenced, works up
# to 600 ms (so it sometimes outlives its ttl, and another holder reads the
# register meanwhile), writes what it read plus one with its token, and in
# the same statement a row of a write log; it writes down everything it
# saw.  After
# the run, the history is checked, as a Jepsen checker would:
#   - the register holds exactly the number of writes that committed (the
#     write log's rows): no increment was lost, whatever was paused;
#   - the committed writes, in the order of the values they wrote (their
#     commit order, since each wrote one more than the last), have tokens
#     that never go down: no write of an older token after a newer one;
#   - every write a worker saw succeed is in the log, none it saw refused
#     is, and the ones whose answer was lost in a kill are one or the
#     other;
#   - faults did reach the read-to-write window: writes were refused as
#     stale, holders were paused past their ttl, backends and the server
#     were killed.
# Before dsync_fence_bind (with the trigger's lease argument), the old
# holder's late write was accepted and the new holder's write, built on
# its read, lost it.  The checker is shown to catch exactly that: the same
# checks over a table whose trigger has no lease, with one scripted late
# write, must fail.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/..";
use DsyncTest;
use File::Temp qw(tempdir);
use IPC::Run;
use List::Util qw(shuffle);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $workers = $ENV{FAULT_WORKERS} // 10;
my $seconds = $ENV{FAULT_SECONDS} // 40;

my $node = dsync_node('faults', 'dsync.ephemeral_max_ttl = 2', 'max_connections = 60');
$node->safe_psql('postgres', q{
	CREATE TABLE register (id int PRIMARY KEY, v int NOT NULL, token bigint NOT NULL);
	CREATE TRIGGER register_fenced BEFORE INSERT OR UPDATE ON register
		FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token', 'register');
	CREATE TABLE wlog (worker int, seq int, token bigint, v int, PRIMARY KEY (worker, seq));
	INSERT INTO register VALUES (1, 0, dsync_acquire('setup', 's'));
});

# Build the workers with the server's libpq.
my $dir = tempdir(CLEANUP => 1);
my $bin = "$dir/register_faults";
my $incdir = `pg_config --includedir`;
my $libdir = `pg_config --libdir`;
chomp($incdir, $libdir);
system_or_bail($ENV{CC} // 'cc', '-O2', '-Wall', '-Werror', "-I$incdir",
	"$FindBin::RealBin/../register_faults.c", "-L$libdir", '-lpq', '-o', $bin);

my $conninfo = $node->connstr('postgres') . ' application_name=register connect_timeout=2';
my ($out, $err) = ('', '');
my $run = IPC::Run::start([ $bin, $conninfo, $workers, $seconds, $dir ],
	'>', \$out, '2>', \$err);
my $started = time;
my @pids;
for (1 .. 100)
{
	@pids = map { /(\d+)/ ? $1 : () } split /\n/, slurp_file("$dir/pids") if -s "$dir/pids";
	last if @pids == $workers;
	usleep(50_000);
}
is(scalar @pids, $workers, 'the workers started');

# The faults, until the workers stop: the server is killed at a third and
# at two thirds of the run; otherwise a pause or a termination.
my %faults = (pauses => 0, terminations => 0, crashes => 0);
my @crash_at = ($started + $seconds / 3, $started + 2 * $seconds / 3);
while (time < $started + $seconds - 2)
{
	usleep(300_000 + int(rand(700_000)));
	my $r = rand;
	if (@crash_at && time >= $crash_at[0])
	{
		shift @crash_at;
		crash_restart($node);
		$faults{crashes}++;
	}
	elsif ($r < 0.65)
	{
		# A holder paused past its ttl (500 ms), then resumed.
		my $pid = $pids[ int(rand(@pids)) ];
		kill 'STOP', $pid;
		usleep(600_000 + int(rand(900_000)));
		kill 'CONT', $pid;
		$faults{pauses}++;
	}
	else
	{
		my ($rc) = $node->psql('postgres',
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
			  . "WHERE application_name = 'register' ORDER BY random() LIMIT 1");
		$faults{terminations}++ if defined $rc && $rc == 0;
	}
}
kill 'CONT', @pids;
$run->finish;
like($out, qr/workers done, 0 failed/, 'every worker ran to the end');
diag("faults: $faults{pauses} pauses past the ttl, $faults{terminations} backends "
	  . "terminated, $faults{crashes} server crashes");

# The history, and the checks of the header, over a register and its log.
sub check_history
{
	my ($table, $log, $history, $label) = @_;
	my %fail;
	my $v = q1($node, "SELECT v FROM $table WHERE id = 1");
	my @committed = map { [ split /\|/ ] } split /\n/,
	  q1($node, "SELECT worker, seq, token, v FROM $log ORDER BY v, worker, seq");
	$fail{lost} = $v != @committed;
	my ($prev_v, $prev_token) = (0, 0);
	my ($back, $gaps) = (0, 0);
	my %in_log;
	for my $w (@committed)
	{
		my ($worker, $seq, $token, $value) = @$w;
		$in_log{"$worker:$seq"} = 1;
		$gaps++ if $value != $prev_v + 1;
		$back++ if $token < $prev_token;
		($prev_v, $prev_token) = ($value, $token);
	}
	$fail{gaps} = $gaps > 0;
	$fail{backwards} = $back > 0;
	my %seen = (ok => 0, stale => 0, failed => 0, unknown => 0);
	my ($ok_missing, $stale_present) = (0, 0);
	for my $w (@$history)
	{
		my ($worker, $seq, $result) = @$w;
		$seen{$result}++;
		$ok_missing++ if $result eq 'ok' && !$in_log{"$worker:$seq"};
		$stale_present++ if $result eq 'stale' && $in_log{"$worker:$seq"};
	}
	$fail{answers} = $ok_missing + $stale_present > 0;
	diag("$label: register $v, " . scalar(@committed) . " committed writes "
		  . "(seen: $seen{ok} ok, $seen{stale} stale, $seen{failed} failed, "
		  . "$seen{unknown} unknown); $gaps values not one more than the last, "
		  . "$back tokens going back, $ok_missing acknowledged writes missing, "
		  . "$stale_present refused writes present");
	return (\%fail, \%seen);
}

# What the workers saw.
my @history;
my %acq = (durable => 0, ephemeral => 0);
for my $i (0 .. $workers - 1)
{
	for my $line (split /\n/, slurp_file("$dir/w$i.log"))
	{
		$acq{$1}++ if $line =~ /^acq \d+ (\w+)$/;
		push @history, [ $i, $1, $2 ] if $line =~ /^write (\d+) \d+ \d+ (\w+)$/;
	}
}
diag("grants: $acq{durable} durable, $acq{ephemeral} ephemeral");
my ($fail, $seen) = check_history('register', 'wlog', \@history, 'run');
ok(!$fail->{lost}, 'the register holds exactly the writes that committed: none lost');
ok(!$fail->{gaps}, 'each committed write wrote one more than the one before');
ok(!$fail->{backwards}, 'tokens never go down in commit order');
ok(!$fail->{answers}, 'acknowledged writes committed, refused ones did not');
ok($seen->{stale} > 0, 'late writes of paused holders were refused');
ok($acq{durable} > 0 && $acq{ephemeral} > 0, 'both kinds of grant took part');
ok($faults{pauses} > 0 && $faults{terminations} > 0 && $faults{crashes} > 0,
	'every kind of fault happened');

# The checker catches a lost update: the same table without a lease on its
# trigger, the new holder reads, the old one writes late, the new one
# writes what it read plus one.
$node->safe_psql('postgres', q{
	CREATE TABLE register2 (id int PRIMARY KEY, v int NOT NULL, token bigint NOT NULL);
	CREATE TRIGGER register2_fenced BEFORE INSERT OR UPDATE ON register2
		FOR EACH ROW EXECUTE FUNCTION dsync_fenced('token');
	CREATE TABLE wlog2 (worker int, seq int, token bigint, v int, PRIMARY KEY (worker, seq));
	CREATE TABLE t2 (name text PRIMARY KEY, token bigint, v int);
	INSERT INTO t2 VALUES ('old', dsync_acquire('register2', 'old', '500 ms'));
	INSERT INTO register2 SELECT 1, 0, token FROM t2 WHERE name = 'old';
	SELECT pg_sleep(0.6);
	INSERT INTO t2 VALUES ('new', dsync_acquire('register2', 'new', '30 s'));
	UPDATE t2 SET v = (SELECT v FROM register2) WHERE name = 'new';
	WITH u AS (UPDATE register2 SET v = v + 1, token = (SELECT token FROM t2 WHERE name = 'old') RETURNING v, token)
		INSERT INTO wlog2 SELECT 0, 1, token, v FROM u;
	WITH u AS (UPDATE register2 SET v = (SELECT v + 1 FROM t2 WHERE name = 'new'),
			   token = (SELECT token FROM t2 WHERE name = 'new') RETURNING v, token)
		INSERT INTO wlog2 SELECT 1, 1, token, v FROM u;
});
($fail) = check_history('register2', 'wlog2', [ [ 0, 1, 'ok' ], [ 1, 1, 'ok' ] ],
	'unbound, one late write');
ok($fail->{lost} && $fail->{gaps}, 'the checker catches the update an unbound fence loses');

done_testing();
