# dsync check, the health probe (issue 43).
#
# This test proves:
#   - dsync check exits 0 and prints "ok: ..." where dsync works, and for
#     each problem its own code and one line on stdout saying what to do:
#     69 unreachable, 72 not preloaded, 78 extension missing, 79 no worker
#     serves the database (dsync.max_databases exhausted), 75 the event
#     queue fuller than --queue-threshold (the worker stopped with
#     SIGSTOP while a transaction queues 2,000 events); --json says the
#     same as one JSON object; none of them leaves an ERROR in the server
#     log;
#   - misuse of its options exits 64.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

# A small event queue (64 kB, about 1,600 events) that a stopped worker
# lets fill, and workers that never leave for being idle (the test stops
# one by its pid).
my $node = dsync_node('check', 'dsync.event_queue_size = 64', 'dsync.worker_idle_timeout = -1');
$node->safe_psql('postgres', 'CREATE DATABASE noext');
tool_env($node);

# --- a database without the extension -------------------------------------------

my $offset = length(slurp_file($node->logfile));
my ($code, $out, $err, $log, $doc);
($code, $out, $err) = run_tool('--dsn', 'dbname=noext', 'check');
is($code, 78, 'check in a database without the extension exits 78');
like($out, qr/\Ano_extension: the dsync extension \(version 1.2 or later\) is not installed in database "noext"; run CREATE EXTENSION dsync there\n\z/,
	'check prints one line: what is wrong and what to do');
is($err, '', 'check: nothing on stderr');
($log, $offset) = log_since($node, $offset);
unlike($log, qr/ERROR/, 'no ERROR in the server log from check there');

# --- check: healthy, and an overflowing queue -------------------------------------

($code, $out, $err) = run_tool('check');
is($code, 0, 'check exits 0 where dsync works');
like($out, qr/\Aok: database "postgres" is served by dsync [\d.]+; the event queue is \d+% full, \d+ events lost since the counters started\n\z/,
	'and prints one "ok: ..." line');
($code, $out, $err) = run_tool('check', '--json');
is($code, 0, 'check --json exits 0');
$doc = eval { decode_json($out) } // {};
is_deeply([ @$doc{qw(status healthy exit_code database preloaded served state)} ],
	[ 'ok', JSON::PP::true, 0, 'postgres', JSON::PP::true, JSON::PP::true, 'active' ],
	'check --json: ok, healthy, served');

ok(wait_for($node, "SELECT worker_pid IS NOT NULL FROM dsync_databases WHERE datname = 'postgres'"),
	'a worker serves postgres');
my $worker = q1($node, "SELECT worker_pid FROM dsync_databases WHERE datname = 'postgres'");
kill 'STOP', $worker;
$node->safe_psql('postgres', "SELECT count(dsync_acquire('q' || g, 'h', '1 hour')) FROM generate_series(1, 2000) AS g");
($code, $out, $err) = run_tool('check');
is($code, 75, 'check exits 75 when the event queue is fuller than 80%');
like($out, qr/\Aqueue_full: the event queue is \d+% full \(\d+ of \d+ bytes, above --queue-threshold 80%\): the workers do not keep up or cannot run, .*raise dsync.event_queue_size or dsync.max_workers\n\z/,
	'and says what to raise');
($code, $out, $err) = run_tool('check', '--json');
$doc = eval { decode_json($out) } // {};
is($doc->{status}, 'queue_full', 'check --json: queue_full');
ok($doc->{queue_used} > 0.8 * $doc->{queue_size}, 'queue_used is above 80% of queue_size');
($code, $out, $err) = run_tool('check', '--queue-threshold', '100');
is($code, 0, 'with --queue-threshold 100 the same queue passes');
kill 'CONT', $worker;
ok(wait_for($node, "SELECT sum(queued_bytes) = 0 FROM dsync_databases"), 'the worker empties the queue');
($code, $out, $err) = run_tool('check', '--json');
is($code, 0, 'check exits 0 again');
$doc = eval { decode_json($out) } // {};
is($doc->{events_lost}, q1($node, 'SELECT events_lost FROM dsync_stats'), 'check --json: events_lost is dsync_stats.events_lost');

# --- unreachable, and misuse -----------------------------------------------------------

($code, $out, $err) = run_tool('--dsn', 'host=/nonexistent-dsync-test port=1', 'check');
is($code, 69, 'check exits 69 when the server cannot be reached');
like($out, qr/\Aunreachable: the server cannot be reached: [^\n]*; check that it runs and that the connection settings \(--dsn, PGHOST, PGPORT, PGDATABASE\) are right\n\z/,
	'on one line');
for my $case ([ [ 'check', 'x' ], qr/check takes no name/ ],
	[ [ 'check', '--queue-threshold', '101' ], qr/invalid --queue-threshold "101"/ ],
	[ [ 'check', '--ttl', '3s' ], qr/check takes no --ttl/ ],
	[ [ 'check', '--queue-threshold', 'x' ], qr/invalid --queue-threshold "x"/ ],
	[ [ 'check', '--json', 'x' ], qr/check takes no name/ ])
{
	($code, $out, $err) = run_tool(@{ $case->[0] });
	is($code, 64, "dsync @{ $case->[0] } exits 64");
	like($err, $case->[1], "dsync @{ $case->[0] }: says why");
}

# --- a database no worker serves: dsync.max_databases exhausted ----------------

$node->append_conf('postgresql.conf', "dsync.max_databases = 1\n");
$node->safe_psql('postgres', 'DROP DATABASE noext');
$node->restart;
$node->safe_psql('postgres', 'CREATE DATABASE second');
$node->psql('second', 'CREATE EXTENSION dsync');
ok(wait_for($node, "SELECT state = 'no slot' AND NOT served FROM dsync_databases WHERE datname = 'second'"),
	'database second has no slot');
($code, $out, $err) = run_tool('--dsn', 'dbname=second', 'check');
is($code, 79, 'check exits 79 where no worker serves the database');
like($out, qr/\Anot_served: database "second" is not served: all dsync.max_databases \(1\) slots are taken by other databases, so expiries here are not announced; raise dsync.max_databases in postgresql.conf and restart the server\n\z/,
	'and says to raise dsync.max_databases');
($code, $out, $err) = run_tool('--dsn', 'dbname=second', 'check', '--json');
$doc = eval { decode_json($out) } // {};
is_deeply([ @$doc{qw(status exit_code state)} ], [ 'not_served', 79, 'no slot' ], 'check --json: not_served');
ok(!$doc->{served}, 'served is false');
($code, $out, $err) = run_tool('check');
is($code, 0, 'postgres, which has the slot, is healthy');

# --- a server without dsync preloaded ----------------------------------------------

$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
$offset = length(slurp_file($node->logfile));
($code, $out, $err) = run_tool('check');
is($code, 72, 'check exits 72 when dsync is not preloaded');
like($out, qr/\Anot_preloaded: dsync is not loaded on this server .*add shared_preload_libraries = 'dsync' to postgresql.conf and restart the server\n\z/,
	'and says to preload it, on one line');
($code, $out, $err) = run_tool('check', '--json');
$doc = eval { decode_json($out) } // {};
is_deeply([ @$doc{qw(status exit_code preloaded extension_version)} ],
	[ 'not_preloaded', 72, JSON::PP::false, q1($node, "SELECT extversion FROM pg_extension WHERE extname = 'dsync'") ],
	'check --json: not_preloaded, the extension still installed');
($log) = log_since($node, $offset);
unlike($log, qr/ERROR/, 'no ERROR in the server log from check without preloading');

done_testing();
