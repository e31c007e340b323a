# The dsync background workers: one launcher ('dsync launcher', connected
# to no database) and one reaper ('dsync reaper') per database that has the
# extension, never for a template database.
#
# API.md: "No server restart is needed after CREATE EXTENSION: the
# background worker for that database starts at once"; the workers "show in
# pg_stat_activity with a backend_type that starts with dsync (the
# per-database reaper with its database's datname)".  NOTES.md section 4:
# "A reaper whose database lost the extension exits"; "A worker connected
# to a database makes plain DROP DATABASE fail. Since dsync is preloaded, a
# ProcessUtility_hook can stop that database's reaper first".
#
# This test proves, on one server with no restart in between:
#   - two databases get reapers at once after CREATE EXTENSION; a template
#     database with the extension never gets one;
#   - a terminated reaper, and a terminated launcher, come back (new pid),
#     with exactly one reaper per database afterwards;
#   - a configuration reload (SIGHUP) stops no worker;
#   - DROP EXTENSION stops that database's reaper;
#   - plain DROP DATABASE, ALTER DATABASE ... RENAME TO and
#     CREATE DATABASE ... TEMPLATE work on a database whose reaper runs;
# and then, across an immediate shutdown and across a crash-restart of the
# server (a reaper killed with SIGKILL), that the workers come back and that
# a lease and the fencing-token order survive.
#
# Workers are shared between databases (launcher.c): a database keeps its
# worker as long as no other database needs the place.  This test gives
# dsync more worker slots (dsync.max_workers = 10) than it has databases,
# and keeps idle workers (dsync.worker_idle_timeout = -1), so every
# database with the extension keeps one worker, as with a worker per
# database; 018_many_databases.pl tests sharing on default settings.
#
# "Within a few seconds" is checked loosely (under 30 s): machines running
# the tests are shared and noisy; exact timings are not asserted.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use lib '.';
use DsyncTest qw(stop_at_end);
use Time::HiRes qw(time usleep);

# Generous bound for things the spec says happen within a few seconds.
my $few_seconds = 30;

my $node = PostgreSQL::Test::Cluster->new('worker');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dsync'\ndsync.max_workers = 10\ndsync.worker_idle_timeout = -1\n");
$node->start;
stop_at_end($node);


# --- helpers ---------------------------------------------------------------

sub reaper_sql
{
	my ($db) = @_;
	return "SELECT pid FROM pg_stat_activity "
	  . "WHERE backend_type = 'dsync reaper' AND datname = '$db'";
}

my $launcher_sql =
  "SELECT pid FROM pg_stat_activity WHERE backend_type = 'dsync launcher'";

# Run a query; its output, or "psql failed: ..." (so that a server that
# went away makes assertions fail instead of killing the script).
sub run_sql
{
	my ($db, $sql) = @_;
	my ($ret, $stdout, $stderr) = $node->psql($db, $sql);
	return $ret == 0 ? $stdout : "psql failed: $stderr";
}

# Pid of the one reaper of $db ('' if none, several lines if several).
sub reaper_pid
{
	my ($db) = @_;
	return run_sql('postgres', reaper_sql($db));
}

sub launcher_pid
{
	return run_sql('postgres', $launcher_sql);
}

# Poll (like poll_query_until, every 0.1 s) until $sql returns 't' in
# database $db (default postgres); false if that did not happen within
# $few_seconds.
sub wait_true
{
	my ($sql, $db) = @_;
	my $deadline = time + $few_seconds;
	my $last;
	while (time < $deadline)
	{
		$last = run_sql($db // 'postgres', $sql);
		return 1 if $last eq 't';
		# A server that shut down will not come back by itself.
		last unless -e $node->data_dir . '/postmaster.pid';
		usleep(100_000);
	}
	diag("not true within $few_seconds s (or the server stopped): $sql\nlast output: $last");
	return 0;
}

# Wait until $db has exactly one reaper (other than $old_pid, if given).
sub wait_reaper
{
	my ($db, $old_pid) = @_;
	my $cond =
	  "(SELECT count(*) = 1 FROM (" . reaper_sql($db) . ") r)"
	  . (defined $old_pid
		? " AND NOT EXISTS (SELECT 1 FROM (" . reaper_sql($db) . ") r WHERE pid = $old_pid)"
		: '');
	return wait_true("SELECT $cond");
}

sub wait_no_reaper
{
	my ($db) = @_;
	return wait_true("SELECT count(*) = 0 FROM (" . reaper_sql($db) . ") r");
}

sub wait_launcher
{
	my ($old_pid) = @_;
	my $cond = "(SELECT count(*) = 1 FROM ($launcher_sql) l)"
	  . (defined $old_pid
		? " AND NOT EXISTS (SELECT 1 FROM ($launcher_sql) l WHERE pid = $old_pid)"
		: '');
	return wait_true("SELECT $cond");
}

sub total_reapers
{
	return run_sql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dsync reaper'");
}

# Every token a client has seen, to check that later grants are larger.
my $max_token = 0;

sub acquire
{
	my ($db, $lease, $holder, $ttl) = @_;
	my $t = run_sql($db, "SELECT dsync_acquire('$lease', '$holder', '$ttl')");
	$max_token = $t if $t =~ /^\d+$/ && $t > $max_token;
	return $t;
}

# Make $db's reaper do something observable: a lease with a 1 s ttl must
# be cleared from dsync_lease by it once it expires.
sub reaper_clears_expired
{
	my ($db, $lease) = @_;
	my $t = acquire($db, $lease, 'ticker', '1 second');
	if ($t !~ /^\d+$/)
	{
		diag("acquire of $lease in $db: $t");
		return 0;
	}
	return wait_true("SELECT count(*) = 1 AND bool_and(holder IS NULL) FROM dsync_lease WHERE name = '$lease'", $db);
}

# --- the launcher, before any CREATE EXTENSION ---------------------------

ok(wait_launcher(), 'the launcher runs after server start');
is($node->safe_psql('postgres',
		"SELECT datname IS NULL FROM pg_stat_activity WHERE backend_type = 'dsync launcher'"),
	't', 'the launcher is connected to no database');
# At start the launcher sends a worker to look at database postgres, which
# leaves when it finds no extension there.
ok(wait_true("SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'dsync reaper'"),
	'no reaper stays before any CREATE EXTENSION');

# --- a template database with the extension gets no reaper ---------------

$node->safe_psql('postgres', 'CREATE DATABASE tmpl IS_TEMPLATE true');
$node->safe_psql('tmpl', 'CREATE EXTENSION dsync');
is($node->safe_psql('postgres', "SELECT datistemplate FROM pg_database WHERE datname = 'tmpl'"),
	't', 'tmpl is a template database with dsync');

# --- two databases at once, no restart ------------------------------------

$node->safe_psql('postgres', 'CREATE DATABASE alpha');
$node->safe_psql('postgres', 'CREATE DATABASE beta');
$node->safe_psql('alpha', 'CREATE EXTENSION dsync');
$node->safe_psql('beta',  'CREATE EXTENSION dsync');
ok(wait_reaper('alpha'), 'CREATE EXTENSION in alpha starts its reaper, no restart');
ok(wait_reaper('beta'),  'CREATE EXTENSION in beta starts its reaper, no restart');
my $alpha_pid = reaper_pid('alpha');
my $beta_pid  = reaper_pid('beta');
like($alpha_pid, qr/^\d+$/, 'alpha has exactly one reaper');
like($beta_pid,  qr/^\d+$/, 'beta has exactly one reaper');
isnt($alpha_pid, $beta_pid, 'alpha and beta have reapers of their own');
is(reaper_pid('tmpl'), '', 'the template database tmpl has no reaper');
is(total_reapers(), '2',
	'exactly two reapers: none for postgres, template0, template1 or tmpl');

# A lease change in a template database says that nothing is announced
# there, and brings no worker in (CREATE DATABASE ... TEMPLATE tmpl would
# fail while one is connected).
my ($tret, $tout, $terr) = $node->psql('tmpl',
	"SELECT dsync_acquire('in-template', 'h', interval '1 hour') IS NOT NULL");
is($tout, 't', 'a lease can be taken in a template database');
like($terr, qr/WARNING:  dsync does not serve template database "tmpl"/,
	'and the client is warned that it is not announced there');
($tret, $tout, $terr) = $node->psql('postgres', 'CREATE DATABASE fromtmpl TEMPLATE tmpl');
is($tret, 0, 'CREATE DATABASE ... TEMPLATE tmpl works afterwards');
is(reaper_pid('tmpl'), '', 'still no reaper in tmpl');
ok(wait_reaper('fromtmpl'), 'the copy of the template, which has dsync, gets a worker');
is($node->safe_psql('fromtmpl', "SELECT holder FROM dsync_lease WHERE name = 'in-template'"),
	'h', 'the copy has the lease taken in the template');
$node->safe_psql('postgres', 'DROP DATABASE fromtmpl');
ok(wait_no_reaper('fromtmpl'), 'no reaper once the copy is dropped');

my $lease_token = acquire('alpha', 'lifecycle', 'h1', '1 hour');
like($lease_token, qr/^\d+$/, 'a lease is granted in alpha');

# --- terminating a reaper --------------------------------------------------

$node->safe_psql('postgres', "SELECT pg_terminate_backend($alpha_pid)");
ok(wait_reaper('alpha', $alpha_pid),
	'a terminated reaper is replaced by a new one (new pid) within a few seconds');
my $alpha_pid2 = reaper_pid('alpha');
isnt($alpha_pid2, $alpha_pid, 'the new alpha reaper has a different pid');
is(reaper_pid('beta'), $beta_pid, "beta's reaper was not disturbed");
ok(reaper_clears_expired('alpha', 'tick-1'), 'the new alpha reaper clears expired leases');

# --- terminating the launcher ----------------------------------------------

my $launcher = launcher_pid();
like($launcher, qr/^\d+$/, 'exactly one launcher');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($launcher)");
ok(wait_launcher($launcher),
	'a terminated launcher is replaced by a new one (new pid) within a few seconds');
my $launcher2 = launcher_pid();
isnt($launcher2, $launcher, 'the new launcher has a different pid');
ok(wait_reaper('alpha'), 'after the launcher restart alpha has exactly one reaper');
ok(wait_reaper('beta'),  'after the launcher restart beta has exactly one reaper');

# The new launcher answers CREATE EXTENSION; once it has, still exactly one
# reaper per database (it did not start duplicates of the surviving ones).
$node->safe_psql('postgres', 'CREATE DATABASE gamma');
$node->safe_psql('gamma', 'CREATE EXTENSION dsync');
ok(wait_reaper('gamma'), 'the new launcher starts a reaper for a new CREATE EXTENSION');
like(reaper_pid('alpha'), qr/^\d+$/, 'alpha still has exactly one reaper');
like(reaper_pid('beta'),  qr/^\d+$/, 'beta still has exactly one reaper');
is(total_reapers(), '3', 'three reapers in all (alpha, beta, gamma), none for tmpl');
ok(reaper_clears_expired('alpha', 'tick-2'), 'alpha reaper works after the launcher restart');
ok(reaper_clears_expired('beta',  'tick-2'), 'beta reaper works after the launcher restart');

# --- SIGHUP and configuration reload ----------------------------------------

my %before = (
	launcher => launcher_pid(),
	alpha    => reaper_pid('alpha'),
	beta     => reaper_pid('beta'),
	gamma    => reaper_pid('gamma'));

# First each reaper alone gets a SIGHUP, then everyone (pg_reload_conf),
# so that a failure says which worker does not survive it.
for my $db (qw(alpha beta gamma))
{
	ok(kill('HUP', $before{$db}), "SIGHUP sent to the $db reaper");
}
for my $db (qw(alpha beta gamma))
{
	ok(reaper_clears_expired($db, 'tick-hup-1'), "$db reaper clears expired leases after its SIGHUP");
	is(reaper_pid($db), $before{$db}, "the $db reaper survives a SIGHUP (same pid)");
}

$node->append_conf('postgresql.conf', "work_mem = '5MB'\n");
$node->reload;
# Each worker has had its SIGHUP by the time it acts on something new: a
# new CREATE EXTENSION for the launcher, an expired lease for a reaper.
run_sql('postgres', 'CREATE DATABASE delta');
run_sql('delta', 'CREATE EXTENSION dsync');
ok(wait_reaper('delta'), 'after the reload the launcher starts a reaper for a new CREATE EXTENSION');
for my $db (qw(alpha beta gamma))
{
	ok(reaper_clears_expired($db, 'tick-hup-2'), "$db reaper clears expired leases after the reload");
}
is(launcher_pid(),       $before{launcher}, 'the launcher survives a reload (same pid)');
is(reaper_pid('alpha'),  $before{alpha},    'the alpha reaper survives a reload (same pid)');
is(reaper_pid('beta'),   $before{beta},     'the beta reaper survives a reload (same pid)');
is(reaper_pid('gamma'),  $before{gamma},    'the gamma reaper survives a reload (same pid)');
is(run_sql('postgres', 'SHOW work_mem'), '5MB', 'the reload took effect');
is(run_sql('postgres', 'SELECT 1'), '1', 'the server is still up after the reload')
  or die 'the server went away after a configuration reload; see '
  . $node->logfile . ' (' . join(' | ', grep { /terminated by signal|PANIC|shut down/ } split /\n/, slurp_file($node->logfile)) . ')';

# --- DROP EXTENSION ----------------------------------------------------------

$node->safe_psql('beta', 'DROP EXTENSION dsync');
ok(wait_no_reaper('beta'), 'DROP EXTENSION makes that database\'s reaper exit within a few seconds');
is(reaper_pid('alpha'), $before{alpha}, 'DROP EXTENSION in beta leaves the alpha reaper alone');
is(reaper_pid('gamma'), $before{gamma}, 'DROP EXTENSION in beta leaves the gamma reaper alone');

# --- plain DROP DATABASE of a database whose reaper runs -----------------

like(reaper_pid('gamma'), qr/^\d+$/, 'gamma has its reaper before DROP DATABASE');
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE gamma');
is($ret, 0, 'plain DROP DATABASE (no FORCE) of a database with a running reaper succeeds');
is($stderr, '', 'DROP DATABASE prints no error');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_database WHERE datname = 'gamma'"),
	'0', 'gamma is gone');
ok(wait_no_reaper('gamma'), 'no reaper for the dropped database');
($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE beta');
is($ret, 0, 'DROP DATABASE of a database whose extension was dropped succeeds');
($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE delta');
is($ret, 0, 'plain DROP DATABASE of another database with a running reaper succeeds');
ok(wait_no_reaper('delta'), 'no reaper for that dropped database either');
is(launcher_pid(), $before{launcher}, 'the launcher is unaffected by DROP DATABASE');

# --- ALTER DATABASE ... RENAME TO ----------------------------------------

($ret, $stdout, $stderr) =
  $node->psql('postgres', 'ALTER DATABASE alpha RENAME TO alpha2');
is($ret, 0, 'ALTER DATABASE RENAME of a database with a running reaper succeeds');
is($stderr, '', 'ALTER DATABASE RENAME prints no error');
ok(wait_reaper('alpha2'), 'the renamed database gets its reaper back');
ok(wait_no_reaper('alpha'), 'no reaper under the old name');
is($node->safe_psql('alpha2', "SELECT dsync_leader('lifecycle')"),
	'h1', 'the lease is still held in the renamed database');
ok(reaper_clears_expired('alpha2', 'tick-rename'), 'the reaper of the renamed database works');

# --- CREATE DATABASE ... TEMPLATE ----------------------------------------

($ret, $stdout, $stderr) =
  $node->psql('postgres', 'CREATE DATABASE alpha3 TEMPLATE alpha2');
is($ret, 0, 'CREATE DATABASE ... TEMPLATE of a database with a running reaper succeeds');
is($stderr, '', 'CREATE DATABASE ... TEMPLATE prints no error');
ok(wait_reaper('alpha2'), 'the template source gets its reaper back');
ok(wait_reaper('alpha3'), 'the copy (which has the extension) gets a reaper');
isnt(reaper_pid('alpha2'), reaper_pid('alpha3'), 'source and copy have reapers of their own');

($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE alpha3');
is($ret, 0, 'plain DROP DATABASE of the copy, whose reaper runs, succeeds');
ok(wait_no_reaper('alpha3'), 'no reaper for the dropped copy');
is(total_reapers(), '1', 'only alpha2 has a reaper now');

# --- immediate shutdown, then start ------------------------------------------

$lease_token = acquire('alpha2', 'survivor', 'h-crash', '1 hour');
like($lease_token, qr/^\d+$/, 'a 1-hour lease is granted before the crash');
my $max_before_crash = $max_token;

$node->stop('immediate');
$node->start;
ok(wait_launcher(), 'after an immediate shutdown and start, the launcher runs');
ok(wait_reaper('alpha2'), 'after an immediate shutdown and start, alpha2 has its reaper');
is(reaper_pid('tmpl'), '', 'still no reaper for the template database');
is(total_reapers(), '1', 'exactly one reaper after the restart');
is($node->safe_psql('alpha2', "SELECT dsync_leader('survivor')"),
	'h-crash', 'the 1-hour lease is still held after the crash');
is($node->safe_psql('alpha2', "SELECT dsync_leader('lifecycle')"),
	'h1', 'the older 1-hour lease is still held after the crash');
is($node->safe_psql('alpha2', "SELECT dsync_acquire('survivor', 'h-crash', '1 hour')"),
	$lease_token, 'reentrant acquire after the crash returns the same token');
my $after = acquire('alpha2', 'after-crash', 'h2', '1 hour');
cmp_ok($after, '>', $max_before_crash,
	"a token granted after the crash ($after) is above every token seen before it ($max_before_crash)");
ok(reaper_clears_expired('alpha2', 'tick-crash'), 'the reaper works after the restart');

# --- crash-restart: a reaper killed with SIGKILL -----------------------------

# The postmaster treats this as a crash: it kills every backend and worker,
# reinitialises shared memory and starts again without a server restart.
# Test clusters run with restart_after_crash = off; turn it on for this.
$node->append_conf('postgresql.conf', "restart_after_crash = on\n");
$node->reload;
is($node->safe_psql('postgres', 'SHOW restart_after_crash'), 'on', 'restart_after_crash is on');
$max_before_crash = $max_token;
my $old_reaper = reaper_pid('alpha2');
my $old_launcher = launcher_pid();
like($old_reaper, qr/^\d+$/, 'alpha2 has a reaper before the SIGKILL');
kill 'KILL', $old_reaper;
ok(wait_launcher($old_launcher), 'after a crash-restart a new launcher runs');
ok(wait_reaper('alpha2', $old_reaper), 'after a crash-restart alpha2 has a new reaper');
is($node->safe_psql('alpha2', "SELECT dsync_leader('survivor')"),
	'h-crash', 'the 1-hour lease is still held after the crash-restart');
$after = acquire('alpha2', 'after-crash-3', 'h3', '1 hour');
cmp_ok($after, '>', $max_before_crash,
	"a token granted after the crash-restart ($after) is above every token seen before it ($max_before_crash)");
ok(reaper_clears_expired('alpha2', 'tick-crash-2'), 'the reaper works after the crash-restart');

# --- a database's settings are its sessions', not the worker's ----------------

# ALTER DATABASE ... SET role made the worker work as that role, which may
# not read or write dsync's tables: its sweep of session records at start
# and its event log failed.  A new worker picks the settings up.
$node->safe_psql('postgres', "CREATE ROLE app NOLOGIN; ALTER DATABASE alpha2 SET role = app");
$old_reaper = reaper_pid('alpha2');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_reaper)");
ok(wait_reaper('alpha2', $old_reaper), 'alpha2 has a new reaper after ALTER DATABASE ... SET role');
my $listener = $node->background_psql('alpha2');
$listener->query_safe(q{SELECT format('LISTEN %I', dsync_channel('dbset')) \gexec});
acquire('alpha2', 'dbset', 'h', '1 second');
ok( wait_true(
		"SELECT count(*) > 0 FROM dsync_events_since(0, ARRAY['dbset']) WHERE payload->>'event' = 'expired'",
		'alpha2'),
	'the worker logs the expiry whatever role the database sets for its sessions');
$listener->quit;
unlike(slurp_file($node->logfile), qr/permission denied for table dsync_/,
	'the worker was never refused its own tables');

$node->stop;
done_testing();
