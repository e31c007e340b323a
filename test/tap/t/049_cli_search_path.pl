# The tool under a search_path that puts a schema of someone else's
# before pg_catalog and the extension's.
#
# A role's search_path (ALTER ROLE ... SET search_path, or PGOPTIONS)
# is the user's to set; a function of the same name in a schema that
# comes first in it would be called in place of dsync's, or of a
# built-in, by any statement that does not name the schema.
#
# This test proves:
#   - with a schema "evil" first in the search_path (even before
#     pg_catalog) that has a function of the name and argument types of
#     every dsync function the tool calls, of the built-ins it calls, and
#     views named like the extension's, each raising "evil called", the
#     tool never calls one of them: lock (in the line, in a backend,
#     --shared, --permits, --info, renewing, queued behind a holder and
#     granted, giving up after --wait), elect (renewing, leaving) and
#     watch (catching up after its backend was terminated) work, and
#     "evil called" is neither on the tool's stderr nor in the server log;
#   - the trap is real: an unqualified call under that search_path does
#     reach evil;
#   - lock and elect work where the extension is in a schema that is not
#     on the search_path at all.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use lib '.';
use DsyncTest;

my $node = dsync_node('searchpath');
tool_env($node);

my $evil_path = '-c search_path=evil,pg_catalog,public';

# A function that raises "evil called: NAME", of the given arguments
# (with their defaults, so that it matches the same calls) and result.
sub evil_function
{
	my ($name, $args, $returns) = @_;
	return "CREATE FUNCTION evil.$name($args) RETURNS $returns LANGUAGE plpgsql "
	  . "AS \$\$BEGIN RAISE EXCEPTION 'evil called: $name'; END\$\$;\n";
}

# A view named like one of the extension's, raising "evil called: NAME"
# when read.
sub evil_view
{
	my ($name) = @_;
	return evil_function("${name}_rows", '', "SETOF public.$name")
	  . "CREATE VIEW evil.$name AS SELECT * FROM evil.${name}_rows();\n";
}

$node->safe_psql('postgres',
	"CREATE SCHEMA evil;\n"
	  . evil_function('dsync_acquire',
		"lease text, holder text, ttl interval DEFAULT '30 seconds', wait interval DEFAULT '0', "
		  . 'info jsonb DEFAULT NULL, durable boolean DEFAULT true, session boolean DEFAULT false',
		'bigint')
	  . evil_function('dsync_acquire_shared',
		"lease text, holder text, ttl interval DEFAULT '30 seconds', wait interval DEFAULT '0', "
		  . 'info jsonb DEFAULT NULL, session boolean DEFAULT false',
		'bigint')
	  . evil_function('dsync_semaphore_create', 'name text, permits integer', 'boolean')
	  . evil_function('dsync_join',
		"grp text, member text, ttl interval DEFAULT '30 seconds', info jsonb DEFAULT NULL",
		'timestamptz')
	  . evil_function('dsync_renew', 'lease text, holder text, ttl interval DEFAULT NULL',
		'timestamptz')
	  . evil_function('dsync_release', 'lease text, holder text', 'boolean')
	  . evil_function('dsync_leave',   'grp text, member text',   'boolean')
	  . evil_function('dsync_channel', 'name text',               'text')
	  . evil_function('dsync_queue',
		"lease text, holder text, ttl interval DEFAULT '30 seconds', channel text DEFAULT NULL, "
		  . 'shared boolean DEFAULT false, durable boolean DEFAULT true',
		'bigint')
	  . evil_function('dsync_queue_channel', 'name text', 'text')
	  . evil_function('dsync_claim',
		'lease text, holder text, OUT state text, OUT fencing bigint, OUT expires_in interval',
		'record')
	  . evil_function('dsync_unqueue',        'lease text, holder text', 'boolean')
	  . evil_function('dsync_events_horizon', '',                        'bigint')
	  . evil_function('dsync_events_since', 'after bigint, names text[] DEFAULT NULL',
		'TABLE(seq bigint, channel text, payload jsonb, sent_at timestamptz)')
	  . evil_function('clock_timestamp',     '', 'timestamptz')
	  . evil_function('statement_timestamp', '', 'timestamptz')
	  . evil_function('now',                 '', 'timestamptz')
	  . evil_function('pg_backend_pid',      '', 'integer')
	  . evil_function('current_setting', 'name text', 'text')
	  . evil_function('date_part', 'field text, source interval', 'double precision')
	  . evil_function('extract',   'field text, source interval', 'numeric')
	  . evil_view('dsync_leases')
	  . evil_view('dsync_stats')
	  . evil_view('dsync_event_log'));

# The trap is real: unqualified, the names reach evil's.
for my $sql ("SELECT dsync_release('x', 'y')", 'SELECT clock_timestamp()',
	'SELECT * FROM dsync_stats')
{
	my ($ret, $stdout, $stderr) = $node->psql('postgres',
		"SET search_path = evil, pg_catalog, public; $sql");
	like($stderr, qr/evil called/, "unqualified under that search_path, $sql calls evil's");
}

my $offset = log_offset($node);

# run_tool with evil first in the search_path.
sub evil_tool
{
	local $ENV{PGOPTIONS} = $evil_path;
	return run_tool(@_);
}

# The tool's stderr must never say that evil's function was called.
sub no_evil
{
	my ($what, $code, $want, $err) = @_;
	is($code, $want, "$what exits $want");
	unlike($err, qr/evil called/, "$what: evil's functions were not called");
	return;
}

my ($code, $out, $err);

# --- lock -----------------------------------------------------------------

($code, $out, $err) = evil_tool('lock', 'sp1', '--', 'true');
no_evil('lock (in the line)', $code, 0, $err);
unlike($err, qr/waiting in a backend/, 'lock waited in the line, not in a backend');
($code, $out, $err) = evil_tool('lock', 'sp2', '--ttl', '600ms', '--info', '{"a":1}',
	'--', 'sh', '-c', 'sleep 1.5; test -n "$DSYNC_FENCING_TOKEN"');
no_evil('lock --info, renewed while the command runs', $code, 0, $err);
($code, $out, $err) = evil_tool('lock', 'sp3', '--no-queue', '--', 'true');
no_evil('lock --no-queue', $code, 0, $err);
($code, $out, $err) = evil_tool('lock', 'sp4', '--shared', '--no-queue', '--', 'true');
no_evil('lock --shared --no-queue', $code, 0, $err);
($code, $out, $err) = evil_tool('lock', 'sp4', '--shared', '--', 'true');
no_evil('lock --shared', $code, 0, $err);
($code, $out, $err) = evil_tool('lock', 'sp5', '--permits', '2', '--', 'true');
no_evil('lock --permits 2', $code, 0, $err);

# Queued behind a holder whose lease expires: granted from the line.
q1($node, "SELECT dsync_acquire('sp6', 'other', '1 second')");
($code, $out, $err) = evil_tool('lock', 'sp6', '--wait', '20s', '--ttl', '3s', '--', 'true');
no_evil('lock queued behind a holder, then granted', $code, 0, $err);
like($err, qr/acquired "sp6"/, 'and it acquired the lease');

# Queued behind a holder that stays: --wait runs out, the line is left.
q1($node, "SELECT dsync_acquire('sp7', 'other', '1 hour')");
($code, $out, $err) = evil_tool('lock', 'sp7', '--wait', '700ms', '--', 'true');
no_evil('lock giving up after --wait', $code, 75, $err);
is(q1($node, "SELECT count(*) FROM dsync_waiters WHERE name = 'sp7'"), '0',
	'and it left the line');
is(q1($node, "SELECT string_agg(lease, ',' ORDER BY lease) FROM dsync_leases WHERE holder <> 'other'"),
	'', 'every lease the tool took was released');

# --- elect ----------------------------------------------------------------

($code, $out, $err) = evil_tool('elect', 'spg', '--ttl', '600ms', '--', 'sleep', '1.5');
no_evil('elect, renewing while leader', $code, 0, $err);
like($err, qr/leader of "spg"/, 'elect led');
is(q1($node, "SELECT count(*) FROM dsync_members('spg')"), '0', 'elect left the group');
is(q1($node, "SELECT dsync_leader('spg') IS NULL"), 't', 'and released the lease');

# --- watch ----------------------------------------------------------------

my $w = { out => '', err => '' };
{
	local $ENV{PGOPTIONS} = $evil_path;
	$w->{h} = IPC::Run::start([ 'dsync', 'watch', 'spw' ],
		'<', \undef, '>', \$w->{out}, '2>', \$w->{err});
}

# Pump the watcher until its $stream matches $re (30 s at most).
sub watch_until
{
	my ($stream, $re) = @_;
	my $deadline = time + 30;
	while ($w->{$stream} !~ $re && time < $deadline && $w->{h}->pumpable)
	{
		$w->{h}->pump_nb;
		usleep(20_000);
	}
	return $w->{$stream} =~ $re;
}

ok(watch_until('err', qr/watching "spw"/), 'watch listens');
($code, $out, $err) = run_tool('lock', 'spw', '--', 'true');
is($code, 0, 'a lock of the watched name runs');
ok(watch_until('out', qr/ released /), 'watch prints the release');
# Its backend ends: it reconnects and catches up from the event log.
# (The locks above have ended: the watcher's is the only tool's backend.)
ok(wait_for($node,
		"SELECT count(pg_terminate_backend(pid)) = 1 FROM pg_stat_activity "
		  . "WHERE application_name = 'dsync'"),
	'the watcher\'s backend is terminated');
ok(watch_until('err', qr/connection lost/), 'watch lost its connection');
($code, $out, $err) = run_tool('lock', 'spw', '--', 'true');
is($code, 0, 'a second lock of the watched name runs');
ok(watch_until('out', qr/ released .*\n.* acquired .*\n.* released /), 'watch prints its events too');
$w->{h}->signal('TERM');
$w->{h}->finish;
no_evil('watch', $w->{h}->full_result >> 8, 0, $w->{err});
unlike($w->{err}, qr/does not say which process sends/, 'watch read dsync_stats');

# --- the extension in a schema off the search_path -------------------------

$node->safe_psql('postgres', 'CREATE DATABASE elsewhere');
$node->safe_psql('elsewhere', 'CREATE SCHEMA ds; CREATE EXTENSION dsync SCHEMA ds;');
($code, $out, $err) = run_tool('--dsn', 'dbname=elsewhere', 'lock', 'far', '--', 'true');
is($code, 0, 'lock where the extension is in a schema off the search_path exits 0')
  or diag($err);
($code, $out, $err) = run_tool('--dsn', 'dbname=elsewhere', 'elect', 'farg', '--', 'true');
is($code, 0, 'elect there too') or diag($err);

my ($log) = log_since($node, $offset);
unlike($log, qr/evil called/, 'no statement of the tool\'s called evil\'s (server log)');

done_testing();
