# Many databases on default worker settings (issue 11).
#
# One server with PostgreSQL's default max_worker_processes (8) and
# dsync's default dsync.max_workers (3: the launcher and two workers that
# go where work is due), 30 databases with the extension besides postgres,
# and 5 without.  In every database with dsync an expiry and a release
# must be announced to a listener, and the expired lease must be cleared;
# dsync must never hold more than dsync.max_workers background worker
# slots (sampled all along); a parallel query must still get its workers;
# the databases without the extension end up "absent" and keep no worker.
# All of it again after a crash restart (a worker killed with SIGKILL) and
# on a standby after promotion.
#
# Bounds on waiting are generous (machines running the tests are shared);
# no timing is asserted here: test/bench/ondemand_bench.sh measures it.
use strict;
use warnings;

use lib '.';
use DsyncTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $with    = 30;
my $without = 5;
my @dbs     = map { sprintf('dsync_%02d', $_) } 1 .. $with;
my @plain   = map { "plain_$_" } 1 .. $without;

# max_connections as PostgreSQL ships it (Cluster.pm sets 10 for streaming
# nodes): one listener per database is connected at once.
my $primary = dsync_node('many', 'max_connections = 100', 'restart_after_crash = on');
is(q1($primary, 'SHOW max_worker_processes'), '8', 'max_worker_processes is the default (8)');
is(q1($primary, 'SHOW dsync.max_workers'), '3', 'dsync.max_workers is the default (3)');

for my $db (@dbs, @plain)
{
	$primary->safe_psql('postgres', "CREATE DATABASE $db");
}
for my $db (@dbs)
{
	$primary->safe_psql($db, 'CREATE EXTENSION dsync');
}
$primary->safe_psql('postgres',
	'CREATE TABLE big AS SELECT g AS id, md5(g::text) AS pad FROM generate_series(1, 200000) g; '
	  . 'ANALYZE big');

# Most background worker slots dsync has held at once while a sampler ran.
# The sampler is a session of its own that reads pg_stat_activity every
# 10 ms (clearing its snapshot each time) until told to stop.
package Sampler;

sub new
{
	my ($class, $node) = @_;
	my $self = bless { node => $node }, $class;
	$node->safe_psql('postgres',
		'CREATE TABLE IF NOT EXISTS sampler_stop (stop boolean); TRUNCATE sampler_stop');
	$self->{psql} = $node->background_psql('postgres');
	$self->{psql}->query_until(qr/sampling/, q{
\echo sampling
DO $$
DECLARE
	most int := 0;
	n int;
BEGIN
	LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT count(*) INTO n FROM pg_stat_activity WHERE backend_type LIKE 'dsync%';
		most := greatest(most, n);
		EXIT WHEN EXISTS (SELECT 1 FROM sampler_stop);
		PERFORM pg_sleep(0.01);
	END LOOP;
	RAISE NOTICE 'most dsync workers: %', most;
END $$;
});
	return $self;
}

sub finish
{
	my ($self) = @_;
	$self->{node}->safe_psql('postgres', 'INSERT INTO sampler_stop VALUES (true)');
	$self->{psql}->quit;
	return $self->{psql}->{stderr} =~ /most dsync workers: (\d+)/ ? $1 : -1;
}

package main;

# Workers a parallel query got (Workers Launched), with dsync busy.
sub parallel_workers
{
	my ($node) = @_;
	my $plan = $node->safe_psql('postgres', q{
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM big WHERE pad LIKE 'a%';
});
	return $plan =~ /Workers Launched: (\d+)/ ? $1 : 0;
}

# In every database with dsync: a listener for two leases, one acquired
# with a short ttl (to expire), one acquired and released; then wait for
# both announcements everywhere, and for the expired row to be cleared.
sub announce_everywhere
{
	my ($node, $tag) = @_;
	my $sampler = Sampler->new($node);
	my (%listener, %chan_e, %chan_r);

	for my $db (@dbs)
	{
		$listener{$db} = Listener->new($node, $db);
		$chan_e{$db} = $listener{$db}->listen("e-$tag");
		$chan_r{$db} = $listener{$db}->listen("r-$tag");
	}
	for my $db (@dbs)
	{
		$node->safe_psql($db,
			"SELECT dsync_acquire('e-$tag', 'h', '2 seconds'); "
			  . "SELECT dsync_acquire('r-$tag', 'h', '1 hour'); "
			  . "SELECT dsync_release('r-$tag', 'h')");
	}
	my $workers = parallel_workers($node);

	my (%expired, %released);
	my $deadline = time + 120;
	while (time < $deadline && (keys %expired < @dbs || keys %released < @dbs))
	{
		for my $db (@dbs)
		{
			next if $expired{$db} && $released{$db};
			$listener{$db}->pump;
			for my $n (@{ $listener{$db}->{received} })
			{
				$expired{$db} = 1
				  if $n->{channel} eq $chan_e{$db} && ($n->{json}{event} // '') eq 'expired';
				$released{$db} = 1
				  if $n->{channel} eq $chan_r{$db} && ($n->{json}{event} // '') eq 'released';
			}
		}
		usleep(100_000);
	}
	$_->quit for values %listener;

	my @no_expiry  = grep { !$expired{$_} } @dbs;
	my @no_release = grep { !$released{$_} } @dbs;
	is("@no_expiry", '', "$tag: every database with dsync announced its expiry");
	is("@no_release", '', "$tag: every database with dsync announced its release");

	my @not_cleared = grep {
		q1($node, "SELECT count(*) FROM dsync_lease WHERE name = 'e-$tag' AND holder IS NOT NULL", $_) ne '0'
	} @dbs;
	is("@not_cleared", '', "$tag: every database had its expired row cleared");

	my @unserved = split /\n/, q1($node,
		"SELECT datname FROM dsync_databases WHERE datname LIKE 'dsync\\_%' AND NOT (state = 'active' AND served) ORDER BY 1");
	is("@unserved", '', "$tag: dsync_databases shows every database with dsync as active and served");
	ok(wait_for($node,
			"SELECT bool_and(state = 'absent' AND worker_pid IS NULL) FROM dsync_databases WHERE datname LIKE 'plain\\_%'"),
		"$tag: the databases without dsync are absent and have no worker");

	my $most = $sampler->finish;
	cmp_ok($most, '<=', 3, "$tag: dsync held at most dsync.max_workers (3) worker slots (saw $most)");
	cmp_ok($most, '>=', 2, "$tag: the sampler saw dsync's workers at all (saw $most)");
	is($workers, 2, "$tag: a parallel query got its 2 workers meanwhile");
	return;
}

# Leases that expire only after the next crash or promotion: the workers
# must find them in the tables, since nothing about them is in memory then.
sub acquire_everywhere
{
	my ($node, $lease, $ttl) = @_;
	$node->safe_psql($_, "SELECT dsync_acquire('$lease', 'h', '$ttl')") for @dbs;
	return;
}

sub cleared_everywhere
{
	my ($node, $lease) = @_;
	my @left = grep {
		!wait_for($node,
			"SELECT count(*) = 1 AND bool_and(holder IS NULL) FROM dsync_lease WHERE name = '$lease'",
			60, $_)
	} @dbs;
	return "@left";
}

announce_everywhere($primary, 'start');
acquire_everywhere($primary, 'before-crash', '4 seconds');

# --- crash restart ---------------------------------------------------------

# The launcher, the one dsync process sure to be there at this moment.
my $launcher = q1($primary, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'dsync launcher'");
like($launcher, qr/^\d+$/, 'the launcher runs');
my $victim = $launcher;
kill 'KILL', $victim;

# While the server restarts, connections fail: poll with psql, not safe_psql.
my $restarted = 0;
for (1 .. 600)
{
	my ($ret, $out) = $primary->psql('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dsync launcher' AND pid <> $launcher");
	if ($ret == 0 && $out eq 't')
	{
		$restarted = 1;
		last;
	}
	usleep(100_000);
}
ok($restarted, 'after the launcher is killed with SIGKILL the server restarts and a new launcher runs');
announce_everywhere($primary, 'crash');
is(cleared_everywhere($primary, 'before-crash'), '',
	'a lease granted before the crash and expiring after it is cleared in every database');

# --- promotion -------------------------------------------------------------

acquire_everywhere($primary, 'before-promotion', '15 seconds');
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('many_standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'dsync%'"),
	'0', 'no dsync worker runs on the standby');
$primary->stop;
$standby->promote;
ok(wait_for($standby, 'SELECT NOT pg_is_in_recovery()'), 'the standby was promoted');
announce_everywhere($standby, 'promoted');
is(cleared_everywhere($standby, 'before-promotion'), '',
	'a lease granted on the old primary and expiring after promotion is cleared in every database');
$standby->stop;

done_testing();
