# DROP EXTENSION dsync while dsync calls run concurrently: the drop waits
# for them or wins, and nobody gets a deadlock (40P01).
#
# Four clients loop over leases, shared holds, a semaphore's permits,
# signals and session leases, one transaction per step, and go on through
# the errors a missing extension gives them; meanwhile the extension is
# dropped and created again 20 times.  Every DROP EXTENSION must succeed,
# and no client may have seen SQLSTATE 40P01.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $node = PostgreSQL::Test::Cluster->new('drop');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dsync'\ndeadlock_timeout = 100ms\n");
$node->start;
stop_at_end($node);

$node->safe_psql('postgres', q{
CREATE EXTENSION dsync;
SELECT dsync_semaphore_create('drop-sem', 2);
CREATE TABLE churn_seen (client int, sqlstate text, n int, PRIMARY KEY (client, sqlstate));
-- One step of work per transaction; errors (the extension is gone, or
-- being made again) are counted by SQLSTATE and the loop goes on.
CREATE PROCEDURE churn(me int, steps int) LANGUAGE plpgsql AS $$
DECLARE
	calls text[] := ARRAY[
		'SELECT dsync_acquire(''drop-l'' || ($1 % 3), ''c'' || $1, ''5 s'', ''50 ms'')',
		'SELECT dsync_release(''drop-l'' || ($1 % 3), ''c'' || $1)',
		'SELECT dsync_acquire_shared(''drop-s'', ''c'' || $1, ''5 s'', ''50 ms'')',
		'SELECT dsync_release(''drop-s'', ''c'' || $1)',
		'SELECT dsync_acquire(''drop-sem'', ''c'' || $1, ''5 s'', ''50 ms'')',
		'SELECT dsync_release(''drop-sem'', ''c'' || $1)',
		'SELECT dsync_event_set(''drop-e'' || $1)',
		'SELECT dsync_acquire(''drop-x'' || $1, ''c'', ''5 s'', session => true)',
		'SELECT dsync_release(''drop-x'' || $1, ''c'')'];
	st text;
BEGIN
	FOR i IN 1..steps LOOP
		BEGIN
			EXECUTE calls[1 + i % array_length(calls, 1)] USING me;
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
			INSERT INTO churn_seen VALUES (me, st, 1)
				ON CONFLICT ON CONSTRAINT churn_seen_pkey DO UPDATE SET n = churn_seen.n + 1;
		END;
		COMMIT;
	END LOOP;
END $$;
});

my @clients;
for my $c (1 .. 4)
{
	my $h = $node->background_psql('postgres', on_error_stop => 0);
	$h->query_until(qr/started/, "\\echo started\nCALL churn($c, 1000000);\n");
	push @clients, $h;
}
ok(wait_for($node,
	"SELECT count(*) = 4 FROM pg_stat_activity WHERE query LIKE 'CALL churn%'"),
	'four clients are calling dsync');

my ($ok, $deadlocks) = (0, 0);
for my $round (1 .. 20)
{
	my ($ret, $out, $err) = $node->psql('postgres', 'DROP EXTENSION dsync');
	$ok++ if $ret == 0;
	$deadlocks++ if $err =~ /deadlock/;
	diag("round $round: $err") if $ret != 0;
	$node->safe_psql('postgres',
		"CREATE EXTENSION IF NOT EXISTS dsync; SELECT dsync_semaphore_create('drop-sem', 2);");
	select(undef, undef, undef, 0.2);
}
is($ok, 20, 'every DROP EXTENSION succeeded');
is($deadlocks, 0, 'no DROP EXTENSION was a deadlock victim');

$_->{run}->kill_kill for @clients;
# The clients did go through the drops (the functions were missing at times).
ok(q1($node, "SELECT coalesce(sum(n), 0) FROM churn_seen WHERE sqlstate <> '40P01'") > 0,
	'the clients saw the extension missing, so they ran across the drops');
is(q1($node, "SELECT coalesce(sum(n), 0) FROM churn_seen WHERE sqlstate = '40P01'"),
	'0', 'no client was a deadlock victim');
note('errors the clients saw: '
	  . q1($node, "SELECT string_agg(sqlstate || ' x' || s, ', ') FROM "
		  . "(SELECT sqlstate, sum(n) s FROM churn_seen GROUP BY 1) e"));

done_testing();
