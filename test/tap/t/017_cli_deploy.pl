# The dsync tool as it is deployed: databases without the extension,
# arguments the server refuses, forged notifications, and PgBouncer.
#
#   - Exit 70 means only "a held lease was lost".  A database without the
#     extension used to give 70 with a raw "function dsync_acquire(...)
#     does not exist"; now every command says to run CREATE EXTENSION and
#     exits 78 (EX_CONFIG); an argument the server refuses exits 65.
#   - dsync watch prints only notifications sent by dsync's own process
#     (dsync_stats.sender_pid): a pg_notify on the channel by an ordinary
#     role is ignored (and said so on stderr).  Times are RFC 3339.
#   - Through PgBouncer in transaction mode LISTEN cannot work (the LISTEN
#     runs on whichever server connection the pool lends for that
#     transaction): dsync watch used to print "watching" and then nothing;
#     now it says why and exits 78.  In session mode it works.  dsync lock
#     works in transaction mode and says what the pool costs.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use lib '.';
use DsyncTest;

my $timeout = 30;
my $node = dsync_node('deploy');
$node->safe_psql('postgres', 'CREATE DATABASE noext; CREATE ROLE plain LOGIN;');
tool_env($node);
my @running;

END
{
	for my $p (@running)
	{
		eval { $p->{h}->kill_kill(grace => 1) };
	}
}

sub start_dsync
{
	my (@args) = @_;
	my $p = { out => '', err => '' };
	$p->{h} = IPC::Run::start([ 'dsync', @args ], '<', \undef, '>', \$p->{out}, '2>', \$p->{err});
	push @running, $p;
	return $p;
}

sub finish
{
	my ($p) = @_;
	my $deadline = time + $timeout;
	while ($p->{h}->pumpable && time < $deadline)
	{
		$p->{h}->pump_nb;
		usleep(20_000);
	}
	eval { $p->{h}->kill_kill(grace => 1) } if $p->{h}->pumpable;
	eval { $p->{h}->finish };
	return $p->{h}->result(0);
}

sub wait_output
{
	my ($p, $stream, $re) = @_;
	my $deadline = time + $timeout;
	while ($p->{$stream} !~ $re && time < $deadline)
	{
		$p->{h}->pump_nb if $p->{h}->pumpable;
		usleep(20_000);
	}
	return $p->{$stream} =~ $re;
}

# --- a database without the extension -----------------------------------------

for my $args ([ 'lock', 'x', '--', 'true' ], [ 'elect', 'x', '--', 'true' ],
	[ 'watch', 'x' ], [ 'status' ])
{
	my ($code, $out, $err) = run_tool('--dsn', 'dbname=noext', @$args);
	is($code, 78, "dsync $args->[0] in a database without the extension exits 78");
	like($err, qr/the dsync extension .* is not installed in database "noext"; run CREATE EXTENSION dsync/,
		"dsync $args->[0] says to run CREATE EXTENSION");
}
my ($code, $out, $err) = run_tool('lock', 'x', '--ttl', '2h', '--', 'true');
is($code, 0, 'a lock within dsync.max_ttl runs');
$node->append_conf('postgresql.conf', "dsync.max_ttl = 60s\n");
$node->reload;
($code, $out, $err) = run_tool('lock', 'x', '--ttl', '2h', '--', 'true');
is($code, 65, 'a ttl the server refuses exits 65, not 70');
like($err, qr/could not acquire "x": argument "ttl" exceeds dsync.max_ttl\n/, 'and says why, on one line');
unlike($err, qr/\n\n/, 'no blank line after the message');
$node->append_conf('postgresql.conf', "dsync.max_ttl = 1d\n");
$node->reload;

# --- forged notifications ------------------------------------------------------

my $w = start_dsync('watch', 'billing');
my $wj = start_dsync('watch', 'billing', '--json');
ok(wait_output($w, 'err', qr/watching "billing"/), 'watch is watching');
ok(wait_for($node, "SELECT count(*) = 2 FROM pg_stat_activity WHERE application_name = 'dsync'"
		  . " AND state = 'idle' AND (query LIKE 'LISTEN %' OR query LIKE '%dsync_events_since(%')"),
	'both watchers listen');
$node->safe_psql('postgres',
	qq{SELECT pg_notify('dsync:billing', '{"event":"acquired","lease":"billing","holder":"forged","fencing":1}')},
	extra_params => [ '-U', 'plain' ]);
q1($node, "SELECT dsync_acquire('billing', 'real', '1 hour')");
ok(wait_output($w, 'out', qr/acquired billing holder real/), 'watch prints the real acquire');
ok(wait_output($wj, 'out', qr/"holder":"real"/), 'watch --json prints it too');
unlike($w->{out} . $wj->{out}, qr/forged/, 'neither prints the forged notification');
like($w->{err}, qr/ignoring a notification from process \d+, which is not dsync's sender/,
	'watch says it ignored it');
like($w->{out}, qr/until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$/m, 'times are RFC 3339');
$_->{h}->signal('TERM') for ($w, $wj);
finish($_) for ($w, $wj);
q1($node, "SELECT dsync_release('billing', 'real')");

# --- PgBouncer -------------------------------------------------------------------

SKIP:
{
	my $pgbouncer = (grep { -x } '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer')[0];
	skip 'pgbouncer is not installed', 9 unless $pgbouncer;

	my $dir = PostgreSQL::Test::Utils::tempdir('pgbouncer');
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	open my $fh, '>', "$dir/users.txt" or die;
	print $fh qq{"$user" ""\n};
	close $fh;
	my $server = "host=" . $node->host . " port=" . $node->port . " dbname=postgres";
	open $fh, '>', "$dir/pgbouncer.ini" or die;
	print $fh <<"EOF";
[databases]
txn = $server pool_mode=transaction
sess = $server pool_mode=session

[pgbouncer]
listen_addr =
unix_socket_dir = $dir
listen_port = $port
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 4
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
	close $fh;
	system($pgbouncer, '-d', "$dir/pgbouncer.ini") == 0 or die 'pgbouncer did not start';
	END { system('sh', '-c', "kill \$(cat $dir/pgbouncer.pid) 2>/dev/null") if defined $dir; }
	my $via = "host=$dir port=$port";

	($code, $out, $err) = run_tool('--dsn', "$via dbname=txn", 'watch', 'pooled');
	is($code, 78, 'watch through a pooler in transaction mode exits 78');
	like($err, qr/LISTEN does not work through this connection: it goes through a connection pooler in transaction mode/,
		'and says why');
	unlike($err, qr/watching/, 'it never claims to be watching');

	my $ws = start_dsync('--dsn', "$via dbname=sess", 'watch', 'pooled');
	ok(wait_output($ws, 'err', qr/watching "pooled"/), 'watch through a pool in session mode watches');
	ok(wait_for($node, "SELECT count(*) = 1 FROM pg_stat_activity WHERE state = 'idle' AND "
			  . "(query LIKE 'LISTEN \"dsync:pooled\"' OR query LIKE '%dsync_events_since(%')"),
		'and listens');
	($code, $out, $err) = run_tool('--dsn', "$via dbname=txn", 'lock', 'pooled', '--', 'true');
	is($code, 0, 'dsync lock works through a pooler in transaction mode');
	like($err, qr/waiting for the lease holds one server connection/,
		'and says what the wait costs the pool');
	like($err, qr/LISTEN does not work: a lease taken away by someone else is noticed at the next renewal|pooler in transaction mode, where LISTEN does not work/,
		'and that a lost lease is noticed at the next renewal');
	ok(wait_output($ws, 'out', qr/released pooled/), 'the session-mode watcher sees its events');
	$ws->{h}->signal('TERM');
	finish($ws);
}

done_testing();
