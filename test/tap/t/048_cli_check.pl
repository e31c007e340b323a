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
#   - --timeout bounds it: a query blocked by a lock on a view it reads
#     gives 69 and "timeout:" within it (status --json too), and the
#     statement is cancelled rather than left waiting in its backend;
#   - a role refused pg_settings (the probe) or dsync_stats gets 77, from
#     check and status;
#   - --json is valid UTF-8 for a non-ASCII database name and lease,
#     even with PGCLIENTENCODING=LATIN1 (status --json too);
#   - misuse of its options exits 64.
use strict;
use warnings;

use Encode;
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

my $offset = log_offset($node);
my ($code, $out, $err, $doc);
($code, $out, $err) = run_tool('--dsn', 'dbname=noext', 'check');
is($code, 78, 'check in a database without the extension exits 78');
like($out, qr/\Ano_extension: the dsync extension \(version 1.2 or later\) is not installed in database "noext"; run CREATE EXTENSION dsync there\n\z/,
	'check prints one line: what is wrong and what to do');
is($err, '', 'check: nothing on stderr');
no_error_since($node, \$offset, 'no ERROR in the server log from check there');

# --- a multi-host connection string, no host up ----------------------------------
# libpq's message has one line per host, with no indentation between them:
# making it one line in place overran its buffer (a segfault, in every
# command's connect and reconnect).
foreach my $cmd ('check', 'status')
{
	($code, $out, $err) = run_tool('--dsn', 'host=/nonexistent-a,/nonexistent-b port=1,2 dbname=x', $cmd);
	is($code, 69, "$cmd with a multi-host string and no host up exits 69");
	like($out . $err, qr/nonexistent-a.*nonexistent-b/, "$cmd names both hosts on one line");
}

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

# --- a check query that cannot finish: --timeout -------------------------------
# A session holds dsync_stats, a view check reads, in ACCESS EXCLUSIVE
# mode: check's query waits for the lock, and must give up at --timeout
# with 69 instead of hanging its probe (run_tool fails the test after 60 s
# rather than hang).  status --json reads it too.

my $locker = psql_client($node, 'postgres');
ok(send_wait($locker, "BEGIN; LOCK TABLE dsync_stats IN ACCESS EXCLUSIVE MODE; SELECT 'locked';",
		qr/^locked$/m),
	'a session holds dsync_stats locked');
($code, $out, $err) = run_tool('check', '--timeout', '2s');
is($code, 69, 'check exits 69 when its query cannot finish within --timeout');
like($out, qr/\Atimeout: the server did not answer within --timeout 2s: [^\n]*\n\z/,
	'and says so on one line');
($code, $out, $err) = run_tool('check', '--timeout', '2s', '--json');
$doc = eval { decode_json($out) } // {};
is_deeply([ @$doc{qw(status exit_code healthy)} ], [ 'timeout', 69, JSON::PP::false ],
	'check --json: timeout, 69');
($code, $out, $err) = run_tool('status', '--json', '--timeout', '2s');
is($code, 69, 'status --json exits 69 too when it cannot finish within --timeout');
like($err, qr/^dsync: timeout: the server did not answer within --timeout 2s$/m, 'and says so');
# The statements that timed out were cancelled: no backend of the tool
# still waits for the lock (a probe run every few seconds would otherwise
# pile them up while the lock is held).
ok(wait_for($node, "SELECT count(*) = 0 FROM pg_stat_activity "
		  . "WHERE application_name = 'dsync' AND wait_event_type = 'Lock'", 10),
	'the timed-out statements were cancelled: none waits for the lock');
ok(send_wait($locker, "COMMIT; SELECT 'unlocked';", qr/^unlocked$/m), 'the lock is released');
$locker->{in} .= "\\q\n";
$locker->{h}->finish;
($code, $out, $err) = run_tool('check', '--timeout', '5s');
is($code, 0, 'check exits 0 again');

# --- permission denied: 77, whichever query met it --------------------------------
# The probe reads pg_settings, which every role may read unless revoked:
# its refusal used to be lost (exit 69); it is 77 as for dsync's views.

$node->safe_psql('postgres',
	'CREATE ROLE monitor LOGIN; REVOKE SELECT ON pg_catalog.pg_settings FROM PUBLIC');
($code, $out, $err) = run_tool('--dsn', 'user=monitor', 'check');
is($code, 77, 'check exits 77 when the probe may not read pg_settings');
like($out, qr/\Aerror: could not read the catalogs: permission denied for view pg_settings\n\z/,
	'and says what was refused');
($code, $out, $err) = run_tool('--dsn', 'user=monitor', 'status');
is($code, 77, 'status exits 77 there too');
like($err, qr/could not read the catalogs: permission denied for view pg_settings/, 'and says why');
$node->safe_psql('postgres',
	'GRANT SELECT ON pg_catalog.pg_settings TO PUBLIC; REVOKE SELECT ON dsync_stats FROM PUBLIC');
($code, $out, $err) = run_tool('--dsn', 'user=monitor', 'check');
is($code, 77, 'check exits 77 when the role may not read dsync_stats');
like($out, qr/\Aerror: could not read dsync's views: permission denied for view dsync_stats\n\z/,
	'and says what was refused');
$node->safe_psql('postgres', 'GRANT SELECT ON dsync_stats TO PUBLIC');
($code, $out, $err) = run_tool('--dsn', 'user=monitor', 'check');
is($code, 0, 'with its rights back, the role gets 0');

# --- UTF-8 output whatever the client's encoding --------------------------------
# A UTF8 database with a non-ASCII name and a lease named café; the
# environment asks for LATIN1, which the tool overrides: its JSON is UTF-8.

my $db = "dsync_\x{e9}";
my $db_bytes = Encode::encode('UTF-8', $db);
my $lease_bytes = Encode::encode('UTF-8', "caf\x{e9}");
$node->safe_psql('postgres',
	qq{CREATE DATABASE "$db_bytes" ENCODING 'UTF8' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'});
$node->safe_psql($db_bytes, 'CREATE EXTENSION dsync');
$node->safe_psql($db_bytes, "SELECT dsync_acquire('$lease_bytes', 'h', '1 hour')");
{
	local $ENV{PGCLIENTENCODING} = 'LATIN1';
	($code, $out, $err) = run_tool('--dsn', "dbname=$db_bytes", 'check', '--json');
	$doc = eval { JSON::PP->new->utf8->decode($out) };
	ok($doc, 'check --json with a non-ASCII database name is valid UTF-8 JSON') or diag($out, $@);
	is(($doc // {})->{database}, $db, 'with the database\'s name');
	($code, $out, $err) = run_tool('--dsn', "dbname=$db_bytes", 'status', '--json');
	is($code, 0, 'status --json there exits 0 with PGCLIENTENCODING=LATIN1');
	$doc = eval { JSON::PP->new->utf8->decode($out) };
	ok($doc, 'and prints valid UTF-8 JSON') or diag($out, $@);
	is(($doc // {})->{leases}[0]{lease}, "caf\x{e9}", 'with the lease\'s name');
}
$node->safe_psql('postgres', qq{DROP DATABASE "$db_bytes" WITH (FORCE)});

# --- unreachable, and misuse -----------------------------------------------------------

($code, $out, $err) = run_tool('--dsn', 'host=/nonexistent-dsync-test port=1', 'check');
is($code, 69, 'check exits 69 when the server cannot be reached');
like($out, qr/\Aunreachable: the server cannot be reached: [^\n]*; check that it runs and that the connection settings \(--dsn, PGHOST, PGPORT, PGDATABASE\) are right\n\z/,
	'on one line');
for my $case ([ [ 'check', 'x' ], qr/check takes no name/ ],
	[ [ 'check', '--queue-threshold', '101' ], qr/invalid --queue-threshold "101"/ ],
	[ [ 'check', '--ttl', '3s' ], qr/check takes no --ttl/ ],
	[ [ 'check', '--queue-threshold', 'x' ], qr/invalid --queue-threshold "x"/ ],
	[ [ 'check', '--json', 'x' ], qr/check takes no name/ ],
	[ [ 'check', '--timeout', '0' ], qr/invalid --timeout "0"/ ],
	[ [ 'watch', 'g', '--timeout', '1s' ], qr/watch takes no --timeout/ ])
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

$offset = restart_without_dsync($node);
($code, $out, $err) = run_tool('check');
is($code, 72, 'check exits 72 when dsync is not preloaded');
like($out, qr/\Anot_preloaded: dsync is not loaded on this server .*add shared_preload_libraries = 'dsync' to postgresql.conf and restart the server\n\z/,
	'and says to preload it, on one line');
($code, $out, $err) = run_tool('check', '--json');
$doc = eval { decode_json($out) } // {};
is_deeply([ @$doc{qw(status exit_code preloaded extension_version)} ],
	[ 'not_preloaded', 72, JSON::PP::false, q1($node, "SELECT extversion FROM pg_extension WHERE extname = 'dsync'") ],
	'check --json: not_preloaded, the extension still installed');
no_error_since($node, \$offset, 'no ERROR in the server log from check without preloading');

done_testing();
