# dsync status: no ERROR in the server log where dsync is missing, and
# --json (issue 43).
#
# This test proves:
#   - dsync status in a database without the extension, and on a server
#     without dsync preloaded, exits 78 with its message and leaves no
#     ERROR in the server log (it used to query dsync_leases and log
#     "relation ... does not exist"; it now looks at pg_settings and the
#     catalogs first);
#   - dsync status --json prints one JSON document whose leases (holder,
#     fencing token as a JSON number, times RFC 3339 in UTC, info as
#     JSON), waiters, counters and worker are those of the SQL views; with
#     NAME, only that lease and its waiters;
#   - lock, elect and watch look the same way before calling a dsync
#     function: 78, status's line, and no ERROR in the log, both where
#     the extension is missing and where dsync is not preloaded;
#   - --queue-threshold is not status's (exit 64).
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $node = dsync_node('status');
$node->safe_psql('postgres', 'CREATE DATABASE noext');
tool_env($node);

# --- a database without the extension: no ERROR in the log --------------------

my $offset = log_offset($node);
my ($code, $out, $err) = run_tool('--dsn', 'dbname=noext', 'status');
is($code, 78, 'status in a database without the extension exits 78');
like($err, qr/^dsync: the dsync extension \(version 1.2 or later\) is not installed in database "noext"; run CREATE EXTENSION dsync there$/m,
	'and says to run CREATE EXTENSION there');
($code, $out, $err) = run_tool('--dsn', 'dbname=noext', 'status', '--json');
is($code, 78, 'status --json there exits 78 too');
is($out, '', 'and prints no JSON');
no_error_since($node, \$offset, 'no ERROR in the server log from status there');
# lock, elect and watch look first too (they used to call a dsync
# function, and the server logged that it did not exist).
for my $args ([ 'lock', 'x', '--', 'true' ], [ 'elect', 'x', '--', 'true' ], [ 'watch', 'x' ])
{
	($code, $out, $err) = run_tool('--dsn', 'dbname=noext', @$args);
	is($code, 78, "$args->[0] in a database without the extension exits 78");
	like($err, qr/^dsync: the dsync extension \(version 1.2 or later\) is not installed in database "noext"; run CREATE EXTENSION dsync there$/m,
		"$args->[0]: with status's line");
}
no_error_since($node, \$offset, 'no ERROR in the server log from lock, elect and watch there');

# The extension in a schema off the search_path: the views are still found.
$node->safe_psql('postgres', 'CREATE DATABASE elsewhere');
$node->safe_psql('elsewhere', 'CREATE SCHEMA ds; CREATE EXTENSION dsync SCHEMA ds;');
$node->safe_psql('elsewhere', "SELECT ds.dsync_acquire('far', 'h', '1 hour')");
($code, $out, $err) = run_tool('--dsn', 'dbname=elsewhere', 'status');
is($code, 0, 'status where the extension is in a schema off the search_path exits 0');
like($out, qr/^far\s+h\s+\d+\s/m, 'and lists its lease');
($code, $out, $err) = run_tool('--dsn', 'dbname=elsewhere', 'status', '--json');
is((eval { decode_json($out) } // {})->{leases}[0]{lease}, 'far', 'status --json there too');
no_error_since($node, \$offset, 'no ERROR in the server log from it');

# --- status --json against the views -----------------------------------------

my $token = q1($node, q{SELECT dsync_acquire('j1', 'holder "one"', '1 hour', info => '{"zone":"a","n":[1,2]}')});
q1($node, "SELECT dsync_acquire('j2', 'h2', '1 hour')");
# A waiter in a backend behind j1.
my $waiter = psql_client($node, 'postgres');
$waiter->{in} .= "SELECT dsync_acquire('j1', 'w', '1 minute', wait => '1 hour');\n";
$waiter->{h}->pump_nb;
ok(wait_for($node, "SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'j1'"), 'a waiter waits for j1');

($code, $out, $err) = run_tool('status', '--json');
is($code, 0, 'status --json exits 0');
is(scalar(() = $out =~ /\n/g), 1, 'status --json prints one line');
my $doc = eval { decode_json($out) };
ok($doc, 'status --json prints valid JSON') or diag($out, $@);
$doc //= {};
is_deeply([ sort keys %$doc ],
	[ sort qw(database at extension_version name leases waiters stats worker) ],
	'the document has the documented keys');
is($doc->{database}, 'postgres', 'database');
is($doc->{extension_version}, q1($node, "SELECT extversion FROM pg_extension WHERE extname = 'dsync'"),
	'extension_version');
is($doc->{name}, undef, 'name is null without NAME');
like($doc->{at}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'at is RFC 3339 in UTC');
is(join(',', map { $_->{lease} } @{ $doc->{leases} }), 'j1,j2', 'leases: both, in name order');
my ($j1) = grep { $_->{lease} eq 'j1' } @{ $doc->{leases} };
is($j1->{holder}, 'holder "one"', 'a lease\'s holder (quoted correctly)');
ok(!ref($j1->{fencing}) && $out =~ /"fencing" : $token\b/, 'its fencing token is a JSON number');
is($j1->{fencing}, $token, 'and the token dsync_acquire returned');
is($j1->{fencing}, q1($node, "SELECT fencing FROM dsync_leases WHERE lease = 'j1'"), 'as dsync_leases has it');
is($j1->{expires_at},
	q1($node, q{SELECT to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM dsync_leases WHERE lease = 'j1'}),
	'expires_at is dsync_leases.expires_at, RFC 3339 in UTC');
is($j1->{acquired_at},
	q1($node, q{SELECT to_char(acquired_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM dsync_leases WHERE lease = 'j1'}),
	'acquired_at too');
is($j1->{ttl_ms}, 3600000, 'ttl_ms');
ok($j1->{time_left_ms} > 3500000 && $j1->{time_left_ms} <= 3600000, 'time_left_ms');
is_deeply($j1->{info}, { zone => 'a', n => [ 1, 2 ] }, 'info is the JSON kept with the lease');
is($j1->{mode}, 'exclusive', 'mode');
is($j1->{permits}, 1, 'permits');
is($j1->{waiters}, 1, 'waiters: one for j1');
is($j1->{owner}, q1($node, "SELECT owner FROM dsync_leases WHERE lease = 'j1'"), 'owner');
is(scalar(@{ $doc->{waiters} }), 1, 'waiters: one');
is($doc->{waiters}[0]{name}, 'j1', 'the waiter waits for j1');
is($doc->{waiters}[0]{pid}, q1($node, "SELECT pid FROM dsync_waiters WHERE name = 'j1'"), 'with its pid');
is($doc->{waiters}[0]{holder}, q1($node, "SELECT holder FROM dsync_waiters WHERE name = 'j1'"), 'and holder');
like($doc->{waiters}[0]{since}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'since is RFC 3339');
my @stats = split /\|/, q1($node, 'SELECT grants, served, queue_size, events_lost FROM dsync_stats');
is($doc->{stats}{grants}, $stats[0], 'stats.grants is dsync_stats.grants');
ok($doc->{stats}{served} && $stats[1] eq 't', 'stats.served');
is($doc->{stats}{queue_size}, $stats[2], 'stats.queue_size');
is($doc->{stats}{events_lost}, $stats[3], 'stats.events_lost');
is_deeply([ sort keys %{ $doc->{stats} } ],
	[ sort qw(served sender_pid sender_pids grants renewals releases expiries waits wait_timeouts wait_time_ms events_sent events_lost queue_used queue_size) ],
	'stats has the documented keys');
my @db = split /\|/, q1($node, "SELECT state, served, worker_pid FROM dsync_databases WHERE datname = 'postgres'");
is($doc->{worker}{state}, $db[0], 'worker.state is dsync_databases.state');
ok($doc->{worker}{served}, 'worker.served');
is($doc->{worker}{worker_pid} // '', $db[2], 'worker.worker_pid');
is_deeply([ sort keys %{ $doc->{worker} } ],
	[ sort qw(state served worker_pid worker_since next_deadline queued_bytes) ],
	'worker has the documented keys');

($code, $out, $err) = run_tool('status', 'j2', '--json');
is($code, 0, 'status NAME --json exits 0');
$doc = eval { decode_json($out) } // {};
is($doc->{name}, 'j2', 'name is NAME');
is(join(',', map { $_->{lease} } @{ $doc->{leases} }), 'j2', 'only that lease');
is(scalar(@{ $doc->{waiters} }), 0, 'and only its waiters (none)');
($code, $out, $err) = run_tool('status', 'nothing-here', '--json');
$doc = eval { decode_json($out) } // {};
is_deeply([ $doc->{leases}, $doc->{waiters} ], [ [], [] ], 'a name nobody holds: empty arrays');
$node->safe_psql('postgres', "SELECT dsync_release('j1', 'holder \"one\"')");
ok(send_wait($waiter, '', qr/^\d+$/m), 'the waiter gets j1 once it is released');
$waiter->{in} .= "\\q\n";
$waiter->{h}->finish;

($code, $out, $err) = run_tool('status', '--queue-threshold', '50');
is($code, 64, 'status --queue-threshold exits 64');
like($err, qr/status takes no --queue-threshold/, 'and says why');

# --- a server without dsync preloaded ----------------------------------------------

$offset = restart_without_dsync($node);
($code, $out, $err) = run_tool('status');
is($code, 78, 'status on a server without dsync preloaded exits 78');
like($err, qr/^dsync: dsync is not loaded on this server \(it is not in shared_preload_libraries\); add shared_preload_libraries = 'dsync' to postgresql.conf and restart the server$/m,
	'and says to preload it');
for my $args ([ 'lock', 'x', '--', 'true' ], [ 'elect', 'x', '--', 'true' ], [ 'watch', 'x' ])
{
	($code, $out, $err) = run_tool(@$args);
	is($code, 78, "$args->[0] on a server without dsync preloaded exits 78");
	like($err, qr/^dsync: dsync is not loaded on this server/m, "$args->[0]: says to preload it");
}
no_error_since($node, \$offset, 'no ERROR in the server log from status, lock, elect and watch without preloading');

done_testing();
