# The dsync command-line tool (cli/), run as a user would run it,
# against a server with the extension.
#
# The tool's contract (its usage text and header comment): "lock runs
# COMMAND while holding the lease NAME (or one permit of an N-permit
# semaphore), renewing it every ttl/3, and releases it when COMMAND exits;
# exits with COMMAND's status, or 75 if --wait ran out"; "elect ... runs
# COMMAND only while leader"; "If the lease is lost, COMMAND gets SIGTERM at
# once and SIGKILL after --grace; if the server cannot be reached in time,
# COMMAND is stopped before the lease expires.  SIGINT, SIGTERM and SIGHUP
# are passed on to COMMAND.  COMMAND sees DSYNC_LEASE, DSYNC_HOLDER and
# DSYNC_FENCING_TOKEN"; "Exit codes: 64 usage, 69 server unavailable,
# 70 lease lost, 75 wait ran out"; "On Linux the command is killed if the
# tool itself dies (PR_SET_PDEATHSIG)".
#
# This test proves:
#   - --help and --version exit 0; no command, an unknown command, bad
#     durations, a missing "-- COMMAND", bad --permits (and other misuse)
#     exit 64 with a message on stderr; an unreachable server exits 69;
#   - lock (NAME before or after its options) runs the command with
#     DSYNC_LEASE, DSYNC_HOLDER and DSYNC_FENCING_TOKEN (the token being
#     dsync_leases.fencing while it runs), exits with the command's status
#     and releases the lease; the holder defaults to host:pid:random and is
#     printed on stderr, --holder sets it;
#   - --wait 300ms on a held lease exits 75 without running the command;
#     lock waits in the lease's line on an idle connection (a queued
#     waiter with no backend, its place kept past its ttl), --no-queue in
#     a backend, and the two are served in the order they came;
#     a signal while waiting ends the wait at once (128 + signal, no
#     waiter and no lease left behind);
#     a lock that had to wait longer than its ttl for the lease still runs
#     its command to the end;
#   - --permits 2: two locks run at once, a third with --wait 300ms exits 75;
#   - --shared: two read locks run at once, an exclusive one with --wait
#     300ms exits 75;
#   - the lease is renewed while a command runs longer than the ttl;
#   - status lists live leases (all, or one by name) with holder and token;
#   - watch prints acquired and released events, as sentences or, with
#     --json, as JSON lines;
#   - SIGTERM, SIGINT and SIGHUP are passed on to the command, whose exit
#     status becomes the tool's, and the lease is released;
#   - a lease taken away (dsync_force_release) stops the command at once,
#     not at the next renewal (measured: well below ttl/3), a command that
#     ignores SIGTERM is killed after --grace (below grace + 1 s), and the
#     tool exits 70;
#   - the tool reconnects after pg_terminate_backend of its connection and
#     keeps the lease (same holder throughout, new backend pid);
#   - elect: two candidates, the leader's tool killed with SIGKILL; the other
#     one leads within ttl + 1 s (measured), the killed one's command is gone
#     (PR_SET_PDEATHSIG) before the other is granted the lease,
#     dsync_members shows the candidates and is_leader;
#   - and last: when the server goes away (immediate shutdown) while the tool
#     holds a lease, the command gets SIGTERM and then SIGKILL before the
#     lease would expire, and the tool exits 70.
#
# Machines running the tests are shared and noisy: only the bounds the
# tool's contract implies are asserted, generously (ttl/3, grace + 1 s,
# ttl + 1 s, the lease's expiry); the measured figures are reported with
# note().  Linux only (the command's pid is watched through /proc).
use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Sys::Hostname;
use Test::More;
use Time::HiRes qw(time usleep);
use lib '.';
use DsyncTest qw(run_tool tool_env);

# Generous bound for things that should happen within a few seconds.
my $timeout = 30;

my $node = PostgreSQL::Test::Cluster->new('cli');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dsync'\n");
$node->start;

# The tool connects through the libpq environment.
tool_env($node);

my @running;    # harnesses still to be stopped at the end

END
{
	for my $p (grep { defined $_->{h} } @running)
	{
		eval { $p->{h}->kill_kill(grace => 1) };
	}
	$node->stop('immediate', fail_ok => 1)
	  if defined $node && !-e $node->data_dir . '/postmaster.pid';
}

$node->safe_psql('postgres', 'CREATE EXTENSION dsync');
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dsync reaper'")
  or die 'no reaper';

my $dir = PostgreSQL::Test::Utils::tempdir('cli');

# --- helpers ---------------------------------------------------------------

sub q1 { return $node->safe_psql('postgres', $_[0]); }

# Start the tool in the background, stdout and stderr captured.
sub start_dsync
{
	my (@args) = @_;
	my $p = { out => '', err => '', what => "dsync @args" };
	$p->{h} = IPC::Run::start([ 'dsync', @args ],
		'<', \undef, '>', \$p->{out}, '2>', \$p->{err});
	push @running, $p;
	return $p;
}

sub pump_nb
{
	my ($p) = @_;
	$p->{h}->pump_nb if $p->{h} && $p->{h}->pumpable;
	return;
}

# Wait for the tool to end: its exit code, "signal N" if a signal ended
# it, or "still running" (then it is killed) after $secs.
sub wait_exit
{
	my ($p, $secs) = @_;
	$secs //= $timeout;
	my $deadline = time + $secs;
	while ($p->{h}->pumpable && time < $deadline)
	{
		$p->{h}->pump_nb;
		usleep(10_000);
	}
	if ($p->{h}->pumpable)
	{
		diag("$p->{what}: still running after $secs s\nstdout: $p->{out}\nstderr: $p->{err}");
		$p->{h}->kill_kill(grace => 1);
		@running = grep { $_ != $p } @running;
		return 'still running';
	}
	$p->{h}->finish;
	@running = grep { $_ != $p } @running;
	my $r = $p->{h}->full_result(0);
	return ($r & 127) ? 'signal ' . ($r & 127) : $r >> 8;
}

# Wait until the tool's stdout or stderr matches $re.
sub wait_output
{
	my ($p, $stream, $re) = @_;
	my $deadline = time + $timeout;
	while ($p->{$stream} !~ $re && time < $deadline)
	{
		pump_nb($p);
		usleep(10_000);
	}
	return 1 if $p->{$stream} =~ $re;
	diag("$p->{what}: no $re on $stream\nstdout: $p->{out}\nstderr: $p->{err}");
	return 0;
}

# The command line of a child that runs the shell code $setup (traps),
# then records "its pid, its parent's pid" in "$base.pid", then runs the
# shell code $body (both see $base as $1).  Once "$base.pid" exists, what
# $setup does (traps, files) is done.
sub child
{
	my ($base, $body, $setup) = @_;
	return ('sh', '-c',
		($setup // '') . 'echo $$ $PPID > "$1.tmp" && mv "$1.tmp" "$1.pid"; ' . $body,
		'sh', $base);
}

# Shell code: wait until "$1.go" exists (touched by go()).
my $until_go = 'while [ ! -e "$1.go" ]; do sleep 0.05; done';

sub go
{
	my ($base) = @_;
	open my $fh, '>', "$base.go" or die "$base.go: $!";
	close $fh;
	return;
}

# Wait for the child started with $base: (its pid, the tool's pid), or ()
# if the tool $p[0] ended first.  Keeps pumping the given harnesses.
sub child_pids
{
	my ($base, @p) = @_;
	my $deadline = time + $timeout;
	while (!-e "$base.pid" && time < $deadline)
	{
		last unless $p[0]->{h}->pumpable;
		pump_nb($_) for @p;
		usleep(10_000);
	}
	return () unless -e "$base.pid";
	my $line = slurp_file("$base.pid");
	return ($line =~ /^(\d+) (\d+)$/) ? ($1, $2) : ();
}

# True if process $pid is gone (or a zombie nobody reaped yet).
sub gone
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 1;
	my $stat = <$fh>;
	close $fh;
	return 1 unless defined $stat;
	return ($stat =~ /^\d+ \(.*\) (\S)/ && $1 eq 'Z') ? 1 : 0;
}

# Seconds until $pid is gone, polling every 5 ms (pumping @p), or undef
# after $timeout.
sub time_until_gone
{
	my ($pid, $t0, @p) = @_;
	my $deadline = $t0 + $timeout;
	while (time < $deadline)
	{
		return time - $t0 if gone($pid);
		pump_nb($_) for @p;
		usleep(5_000);
	}
	return undef;
}

# Wait until $n dsync connections have done their LISTEN: idle after the
# LISTEN, or after a renewal (which comes only after it).
sub wait_listening
{
	my ($n) = @_;
	return wait_true(
		"SELECT count(*) >= $n FROM pg_stat_activity WHERE application_name = 'dsync'"
		  . " AND state = 'idle' AND (query LIKE 'LISTEN %' OR query LIKE '%dsync_events_since(%'"
		  . " OR query LIKE '%dsync_renew(%')");
}

# Poll until $sql returns 't'; false after $timeout (not the harness's
# 180 s: a failure here must not stall the rest of the test).
sub wait_true
{
	my ($sql) = @_;
	my $deadline = time + $timeout;
	my $last = '';
	while (time < $deadline)
	{
		$last = q1($sql);
		return 1 if $last eq 't';
		usleep(50_000);
	}
	diag("not true within $timeout s: $sql (last: $last)");
	return 0;
}

# --- usage and exit codes ----------------------------------------------------

my ($code, $out, $err) = run_tool('--help');
is($code, 0, '--help exits 0');
like($out, qr/^Usage:.*dsync \[--dsn DSN\] lock NAME/ms, '--help prints the usage on stdout');
like($out, qr/Exit codes: 64 usage, 65 bad argument, 69 server unavailable or error,\n70 lease lost \(and only then\), 71 system error, 75 wait ran out,\n77 permission denied, 78 dsync is not preloaded or the extension is not\ninstalled/,
	'--help lists the exit codes');

($code, $out, $err) = run_tool('--version');
is($code, 0, '--version exits 0');
# The one version of everything: the file VERSION at the top of the tree.
my $version = PostgreSQL::Test::Utils::slurp_file('../../VERSION');
chomp $version;
is($out, "dsync $version\n", '--version prints VERSION');

my @usage_cases = (
	[ [],                                        qr/no command given/,          'no command' ],
	[ ['frob'],                                  qr/unknown command "frob"/,    'unknown command' ],
	[ [ 'lock', 'L', '--ttl', '5x', '--', 'true' ], qr/invalid --ttl "5x"/,     'unknown duration unit' ],
	[ [ 'lock', 'L', '--ttl', 'soon', '--', 'true' ], qr/invalid --ttl "soon"/, 'duration that is no number' ],
	[ [ 'lock', 'L', '--ttl', '0', '--', 'true' ], qr/invalid --ttl "0"/,       'zero ttl' ],
	[ [ 'lock', 'L', '--ttl', '100ms', '--', 'true' ], qr/--ttl must be at least 300ms/, 'ttl below 300ms' ],
	[ [ 'lock', 'L', '--wait', '-1', '--', 'true' ], qr/invalid --wait "-1"/,   'negative wait' ],
	[ [ 'lock', 'L', '--grace', '2d', '--', 'true' ], qr/invalid --grace "2d"/, 'bad grace' ],
	[ [ 'lock', 'L', 'true' ],                   qr/unexpected argument "true" \(the command goes after "--"\)/, 'lock without --' ],
	[ [ 'lock', 'L', '--' ],                     qr/lock needs "-- COMMAND/,    'lock with nothing after --' ],
	[ [ 'lock', 'L' ],                           qr/lock needs "-- COMMAND/,    'lock without a command' ],
	[ [ 'lock', '--', 'true' ],                  qr/lock needs a lease name/,   'lock without a name' ],
	[ [ 'elect', 'G', '--ttl', '3s' ],           qr/elect needs "-- COMMAND/,   'elect without a command' ],
	[ [ 'lock', 'L', '--permits', '0', '--', 'true' ], qr/invalid --permits "0"/, 'zero permits' ],
	[ [ 'lock', 'L', '--permits', 'two', '--', 'true' ], qr/invalid --permits "two"/, 'permits that is no number' ],
	[ [ 'lock', 'L', '--permits', '65536', '--', 'true' ], qr/invalid --permits "65536"/, 'too many permits' ],
	[ [ 'elect', 'G', '--permits', '2', '--', 'true' ], qr/elect takes no --permits, --shared or --wait/, 'elect with --permits' ],
	[ [ 'elect', 'G', '--shared', '--', 'true' ], qr/elect takes no --permits, --shared or --wait/, 'elect with --shared' ],
	[ [ 'lock', 'L', '--shared', '--permits', '2', '--', 'true' ], qr/--shared and --permits cannot be used together/, '--shared with --permits' ],
	[ [ 'lock', 'L', '--json', '--', 'true' ],   qr/lock takes no --json/,      'lock with --json' ],
	[ [ 'watch' ],                               qr/watch needs a group or lease name/, 'watch without a name' ],
	[ [ 'status', '--ttl', '3s' ],               qr/status takes no --ttl/,     'status with --ttl' ],
	[ [ 'status', 'a', 'b' ],                    qr/unexpected argument "b"/,   'status with two names' ],
	[ [ 'lock', 'L', '--bogus', '--', 'true' ],  qr/invalid option "--bogus" for "lock"/, 'unknown option' ],
	[ [ '--ttl', '3s', 'lock', 'L', '--', 'true' ], qr/only --dsn may come before the command/, 'command option before the command' ],
	[ [ 'lock', 'L', '--ttl' ],                  qr/option "--ttl" needs a value/, 'option without its value' ],
);
for my $case (@usage_cases)
{
	my ($args, $msg_re, $what) = @$case;
	($code, $out, $err) = run_tool(@$args);
	is($code, 64, "$what: exit 64");
	like($err, qr/(?:^|\n)dsync: [^\n]*$msg_re[^\n]*\nTry "dsync --help" for more information\.\n\z/,
		"$what: message on stderr");
	is($out, '', "$what: nothing on stdout");
}

($code, $out, $err) = run_tool('--dsn', 'host=/nonexistent-dsync-test port=1', 'status');
is($code, 69, 'an unreachable server: exit 69');
like($err, qr/could not connect/, 'an unreachable server: message on stderr');

is(q1("SELECT count(*) FROM dsync_leases"), '0', 'no usage error took a lease');

# --- lock: environment, token, exit status, release, default holder ---------

my $cb = "$dir/basic";
my $p = start_dsync('lock', 'basic', '--ttl', '3s',
	'--', child($cb, "$until_go; exit 7",
		'printf "%s\n%s\n%s\n" "$DSYNC_LEASE" "$DSYNC_HOLDER" "$DSYNC_FENCING_TOKEN" > "$1.env"; '));
my ($child_pid, $tool_pid) = child_pids($cb, $p);
ok(defined $child_pid, 'lock starts the command');
my ($env_lease, $env_holder, $env_token) = split /\n/, (-e "$cb.env" ? slurp_file("$cb.env") : "");
is($env_lease, 'basic', 'the command sees DSYNC_LEASE');
my $host = hostname();
like($env_holder, qr/^\Q$host\E:$tool_pid:[0-9a-f]{8}$/,
	'the holder defaults to host:pid:random (pid of the tool)');
is(q1("SELECT dsync_leader('basic')"), $env_holder, 'DSYNC_HOLDER holds the lease');
like($env_token, qr/^\d+$/, 'the command sees DSYNC_FENCING_TOKEN');
is(q1("SELECT fencing FROM dsync_leases WHERE lease = 'basic'"), $env_token,
	'DSYNC_FENCING_TOKEN is dsync_leases.fencing while the command runs');
go($cb);
$code = wait_exit($p);
is($code, 7, 'lock exits with the status of the command (7)');
like($p->{err}, qr/^dsync: holder \Q$env_holder\E$/m, 'the default holder is printed on stderr');
like($p->{err}, qr/^dsync: acquired "basic" \(fencing token $env_token\)$/m,
	'the acquire is reported on stderr');
is(q1("SELECT dsync_leader('basic') IS NULL"), 't', 'the lease is released after the command');

# A second run gets a new holder and a larger token.
($code, $out, $err) = run_tool('lock', 'basic', '--',
	'sh', '-c', 'echo "$DSYNC_HOLDER $DSYNC_FENCING_TOKEN"');
is($code, 0, 'lock exits 0 when the command does');
my ($holder2, $token2) = $out =~ /^(\S+) (\d+)$/m;
ok(defined $holder2 && $holder2 ne $env_holder, 'another run has another default holder');
cmp_ok($token2 // 0, '>', $env_token, 'another run gets a larger fencing token');

# --holder
$cb = "$dir/holder";
$p = start_dsync('lock', 'named', '--holder', 'worker-7', '--ttl', '3s',
	'--', child($cb, $until_go, 'echo "$DSYNC_HOLDER" > "$1.env"; '));
ok(scalar(child_pids($cb, $p)), 'lock --holder starts the command');
is(q1("SELECT dsync_leader('named')"), 'worker-7', '--holder sets the holder of the lease');
is(-e "$cb.env" ? slurp_file("$cb.env") : "", "worker-7\n", 'the command sees DSYNC_HOLDER = --holder');
go($cb);
is(wait_exit($p), 0, 'lock --holder exits 0');
like($p->{err}, qr/^dsync: holder worker-7$/m, 'the given holder is printed on stderr');
is(q1("SELECT dsync_leader('named') IS NULL"), 't', 'lease released');

# The name may also come after the lock's options (cli/main.c: "The
# command's operand may come before or after its options").
($code, $out, $err) = run_tool('lock', '--ttl', '3s', '--holder', 'ho', 'late-name',
	'--', 'sh', '-c', 'echo "$DSYNC_LEASE $DSYNC_HOLDER"');
is($code, 0, 'lock with its options before the name: exit 0');
is($out, "late-name ho\n", 'lock with its options before the name: the command ran under that lease');
unlike($err, qr/Try "dsync --help"/, 'lock with its options before the name: no usage error');

# A command that cannot be run: 127, lease released.
($code, $out, $err) = run_tool('lock', 'nocmd', '--', "$dir/no-such-program");
is($code, 127, 'a command that cannot be run: exit 127');
like($err, qr/could not run/, 'a command that cannot be run: message on stderr');
is(q1("SELECT dsync_leader('nocmd') IS NULL"), 't', 'lease released after a command that cannot be run');

# --- --wait on a held lease ---------------------------------------------------

q1("SELECT dsync_acquire('busy', 'other', '1 hour')");
my $t0 = time;
($code, $out, $err) = run_tool('lock', 'busy', '--wait', '300ms', '--', 'touch', "$dir/busy.ran");
my $waited = time - $t0;
is($code, 75, '--wait 300ms on a held lease: exit 75');
ok(!-e "$dir/busy.ran", '--wait ran out: the command did not run');
like($err, qr/could not get "busy" within the wait/, '--wait ran out: message on stderr');
note(sprintf('lock --wait 300ms gave up after %.3f s', $waited));
is(q1("SELECT dsync_leader('busy')"), 'other', 'the other holder still holds the lease');
is(q1("SELECT count(*) FROM dsync_waiters"), '0', 'no waiter left behind');

# A signal while waiting (no --wait: as long as it takes) ends the wait at
# once, not when the lease comes free, and leaves no lease behind.  The
# other holder's lease ends by itself after 8 s.
q1("SELECT dsync_acquire('intr', 'other', '8 seconds')");
$p = start_dsync('lock', 'intr', '--holder', 'hin', '--', 'touch', "$dir/intr.ran");
ok(wait_true("SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'intr' AND holder = 'hin'"),
	'lock without --wait waits in the server');
$t0 = time;
$p->{h}->signal('TERM');
$code = wait_exit($p, $timeout);
my $ended_after = time - $t0;
is($code, 128 + 15, 'SIGTERM while waiting: exit 143');
note(sprintf('SIGTERM while waiting: the tool exited %.3f s after the signal (the lease comes free after 8 s)',
		$ended_after));
cmp_ok($ended_after, '<', 4, 'SIGTERM while waiting ends the wait at once, not when the lease comes free');
like($p->{err}, qr/interrupted while waiting for "intr"/, 'SIGTERM while waiting: message on stderr');
ok(!-e "$dir/intr.ran", 'SIGTERM while waiting: the command did not run');
ok(wait_true("SELECT count(*) = 0 FROM dsync_waiters WHERE name = 'intr'"),
	'SIGTERM while waiting: the waiter left the queue');
ok(wait_true("SELECT dsync_leader('intr') IS DISTINCT FROM 'other'"),
	"the other holder's lease ends");
is(q1("SELECT coalesce(dsync_leader('intr'), '(none)')"), '(none)',
	'the interrupted lock holds no lease');

# Waiting in the line: lock waits on an idle connection (a queued waiter,
# no pid), --no-queue in a running statement; both kinds share one line
# and are served in the order they came.
q1("SELECT dsync_acquire('line', 'other', '1 hour')");
my @line = map { "$dir/line$_" } 1 .. 2;
my $qa = start_dsync('lock', 'line', '--holder', 'qa', '--ttl', '3s', '--', child($line[0], $until_go));
ok(wait_true("SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'line' AND holder = 'qa'"
	  . " AND kind = 'queued' AND pid IS NULL"),
	'lock waits in the line as a queued waiter, with no backend');
ok(wait_true("SELECT count(*) > 0 AND bool_and(state = 'idle') FROM pg_stat_activity"
	  . " WHERE application_name = 'dsync'"),
	"the queued lock's connection is idle while it waits (a backend wait never is)");
my $qb = start_dsync('lock', 'line', '--holder', 'qb', '--ttl', '3s', '--no-queue',
	'--', child($line[1], $until_go));
ok(wait_true("SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'line' AND holder = 'qb'"
	  . " AND kind <> 'queued' AND pid IS NOT NULL"),
	'lock --no-queue waits in a backend');
usleep(4_000_000);	# past the queued lock's ttl: its place is kept by renewal
q1("SELECT dsync_release('line', 'other')");
ok(scalar(child_pids($line[0], $qa)), 'the queued lock, first in line, runs its command');
ok(!-e "$line[1].pid", 'the backend waiter, second in line, waits');
is(q1("SELECT holder FROM dsync_waiters WHERE name = 'line'"), 'qb', 'only the second is left in line');
go($line[0]);
is(wait_exit($qa), 0, 'the queued lock exits 0');
ok(scalar(child_pids($line[1], $qb)), 'then the backend waiter runs its command');
go($line[1]);
is(wait_exit($qb), 0, 'the backend waiter exits 0');
is(q1("SELECT count(*) FROM dsync_waiters WHERE name = 'line'"), '0', 'nobody left in line');

# --- --permits 2 ---------------------------------------------------------------

my @sem = map { "$dir/sem$_" } 1 .. 2;
my @semp = map {
	start_dsync('lock', 'pool', '--permits', '2', '--holder', "p$_", '--ttl', '3s',
		'--', child($sem[ $_ - 1 ], $until_go))
} 1 .. 2;
ok(scalar(child_pids($sem[0], @semp)), 'first lock on a 2-permit semaphore runs');
ok(scalar(child_pids($sem[1], $semp[1], $semp[0])), 'second lock on the 2-permit semaphore runs at the same time');
is(q1("SELECT string_agg(holder || ':' || permits, ',' ORDER BY holder) FROM dsync_leases WHERE lease = 'pool'"),
	'p1:2,p2:2', 'dsync_leases shows both permits of the 2-permit semaphore');
($code, $out, $err) = run_tool('lock', 'pool', '--permits', '2', '--wait', '300ms',
	'--', 'touch', "$dir/sem3.ran");
is($code, 75, 'a third lock with --wait 300ms: exit 75');
ok(!-e "$dir/sem3.ran", 'the third lock did not run its command');
go($_) for @sem;
is(wait_exit($semp[0]), 0, 'first semaphore lock exits 0');
is(wait_exit($semp[1]), 0, 'second semaphore lock exits 0');
is(q1("SELECT count(*) FROM dsync_leases WHERE lease = 'pool'"), '0', 'both permits released');

# --- --shared: a read lock ---------------------------------------------------------

my @rd = map { "$dir/rd$_" } 1 .. 2;
my @rdp = map {
	start_dsync('lock', 'rwl', '--shared', '--holder', "r$_", '--ttl', '3s',
		'--', child($rd[ $_ - 1 ], $until_go))
} 1 .. 2;
ok(scalar(child_pids($rd[0], @rdp)), 'first shared lock runs');
ok(scalar(child_pids($rd[1], $rdp[1], $rdp[0])), 'second shared lock runs at the same time');
is(q1("SELECT string_agg(holder || ':' || mode, ',' ORDER BY holder) FROM dsync_leases WHERE lease = 'rwl'"),
	'r1:shared,r2:shared', 'dsync_leases shows two shared holders');
($code, $out, $err) = run_tool('lock', 'rwl', '--wait', '300ms', '--', 'touch', "$dir/rdx.ran");
is($code, 75, 'an exclusive lock with --wait 300ms while they run: exit 75');
ok(!-e "$dir/rdx.ran", 'the exclusive lock did not run its command');
go($_) for @rd;
is(wait_exit($rdp[0]), 0, 'first shared lock exits 0');
is(wait_exit($rdp[1]), 0, 'second shared lock exits 0');
is(q1("SELECT count(*) FROM dsync_leases WHERE lease = 'rwl'"), '0', 'both shared holders released');

# --- renewal while the command outlives the ttl --------------------------------

$cb = "$dir/renew";
$p = start_dsync('lock', 'renew', '--ttl', '2s', '--holder', 'hrn', '--', child($cb, 'exec sleep 4'));
ok(scalar(child_pids($cb, $p)), 'lock --ttl 2s runs a 4 s command');
my $started = time;
my $renew_token = q1("SELECT fencing FROM dsync_leases WHERE lease = 'renew'");
while (time < $started + 3)
{
	pump_nb($p);
	usleep(20_000);
}
is(q1("SELECT dsync_leader('renew')"), 'hrn', 'at 3 s (past the 2 s ttl) the tool still holds the lease');
is(q1("SELECT fencing FROM dsync_leases WHERE lease = 'renew'"), $renew_token,
	'renewed, not re-acquired: same fencing token');
is(wait_exit($p), 0, 'the 4 s command completes: exit 0');
unlike($p->{err}, qr/stopping the command/, 'the command was never told to stop');
is(q1("SELECT dsync_leader('renew') IS NULL"), 't', 'lease released');

# --- status --------------------------------------------------------------------

$cb = "$dir/status";
$p = start_dsync('lock', 'st1', '--holder', 'hst', '--ttl', '30s', '--', child($cb, $until_go));
ok(scalar(child_pids($cb, $p)), 'a lock for status runs');
my $st_token = q1("SELECT fencing FROM dsync_leases WHERE lease = 'st1'");
my $st2_token = q1("SELECT dsync_acquire('st2', 'other2', '1 hour')");
($code, $out, $err) = run_tool('status');
is($code, 0, 'status exits 0');
like($out, qr/^LEASE\s+HOLDER\s+FENCING\s+PERMITS\s+TIME LEFT\s+WAITERS\s+OWNER$/m, 'status prints a header');
like($out, qr/^st1\s+hst\s+$st_token\s+1\s+00:00:[0-3]\d\.\d{3}\s+0\s+\S+$/m,
	'status lists the live lease with its holder and fencing token');
like($out, qr/^st2\s+other2\s+$st2_token\s+1\s/m, 'status lists the other live lease');
($code, $out, $err) = run_tool('status', 'st1');
is($code, 0, 'status NAME exits 0');
like($out, qr/^st1\s+hst\s+$st_token\s/m, 'status NAME lists that lease');
unlike($out, qr/^st2\s/m, 'status NAME lists no other lease');
($code, $out, $err) = run_tool('status', 'nothing-here');
is($code, 0, 'status of a name nobody holds exits 0');
like($out, qr/\(no live leases named nothing-here\)/, 'status says there is no such live lease');
go($cb);
is(wait_exit($p), 0, 'the status lock exits 0');
q1("SELECT dsync_release('st2', 'other2')");

# --- watch -----------------------------------------------------------------------

my $wh = start_dsync('watch', 'wl');
my $wj = start_dsync('watch', 'wl', '--json');
ok(wait_output($wh, 'err', qr/watching "wl"/), 'watch says it is watching');
ok(wait_listening(2), 'both watchers listen');
($code, $out, $err) = run_tool('lock', 'wl', '--holder', 'hw', '--', 'true');
is($code, 0, 'a lock of the watched name runs');
my ($w_token) = $err =~ /fencing token (\d+)/;
ok(wait_output($wh, 'out', qr/ released /), 'watch prints the release');
like($wh->{out}, qr/^\d\d:\d\d:\d\d acquired wl holder hw fencing $w_token until \S+$/m,
	'watch prints a line for acquired (holder, token, expiry)');
like($wh->{out}, qr/^\d\d:\d\d:\d\d released wl holder hw fencing $w_token$/m,
	'watch prints a line for released');
ok(wait_output($wj, 'out', qr/"released"/), 'watch --json prints the release');
my @json = map { eval { JSON::PP->new->decode($_) } // { unparsed => $_ } } split /\n/, $wj->{out};
is(scalar(@json), 2, 'watch --json prints one line per event');
is_deeply([ map { $_->{event} // 'none' } @json ], [ 'acquired', 'released' ],
	'watch --json: acquired then released, each a JSON object');
is_deeply([ map { [ $_->{lease}, $_->{holder}, $_->{fencing} ] } @json ],
	[ [ 'wl', 'hw', $w_token ], [ 'wl', 'hw', $w_token ] ],
	'watch --json: lease, holder and fencing fields');
like($json[0]{expires_at} // '', qr/^\d{4}-\d\d-\d\dT/, 'watch --json: acquired has expires_at');
is($wj->{err}, '', 'watch --json prints nothing on stderr');
$_->{h}->signal('TERM') for ($wh, $wj);
is(wait_exit($wh), 0, 'watch exits 0 on SIGTERM');
is(wait_exit($wj), 0, 'watch --json exits 0 on SIGTERM');

# --- signals are passed on to the command -----------------------------------------

my %sig_exit = (TERM => 3, INT => 4, HUP => 5);
for my $sig (qw(TERM INT HUP))
{
	$cb = "$dir/sig$sig";
	$p = start_dsync('lock', "sig$sig", '--ttl', '3s', '--',
		child($cb, 'while :; do sleep 0.1; done',
			"trap 'echo got $sig; exit $sig_exit{$sig}' $sig; "));
	my ($cpid) = child_pids($cb, $p);
	ok(defined $cpid, "SIG$sig: the command runs");
	$p->{h}->signal($sig);
	is(wait_exit($p), $sig_exit{$sig},
		"SIG$sig sent to the tool: the command's trap ran and its status ($sig_exit{$sig}) is the tool's");
	like($p->{out}, qr/^got $sig$/m, "SIG$sig reached the command");
	ok(gone($cpid), "SIG$sig: the command is gone");
	is(q1("SELECT dsync_leader('sig$sig') IS NULL"), 't', "SIG$sig: the lease is released");
}

# --- the lease is taken away: the command is stopped at once ----------------------

# A command that dies of SIGTERM: gone long before the next renewal (ttl/3).
$cb = "$dir/lost1";
$p = start_dsync('lock', 'lost1', '--ttl', '30s', '--grace', '2s', '--', child($cb, 'exec sleep 300'));
($child_pid) = child_pids($cb, $p);
ok(defined $child_pid, 'lost lease, plain command: it runs');
ok(wait_listening(1), 'lost lease, plain command: the tool listens');
$t0 = time;
is(q1("SELECT dsync_force_release('lost1')"), '1', 'dsync_force_release takes the lease away');
my $gone_after = time_until_gone($child_pid, $t0, $p);
ok(defined $gone_after, 'lost lease, plain command: the command is gone');
note(sprintf('lost lease, plain command: gone %.3f s after dsync_force_release (ttl/3 = 10 s)',
		$gone_after // -1));
cmp_ok($gone_after // 99, '<', 10,
	'lost lease, plain command: gone in less than ttl/3 (not at the next renewal)');
is(wait_exit($p), 70, 'lost lease, plain command: the tool exits 70');
like($p->{err}, qr/the lease was lost; stopping the command/, 'lost lease: reported on stderr');

# A command that ignores SIGTERM: SIGKILL after the grace period.
$cb = "$dir/lost2";
$p = start_dsync('lock', 'lost2', '--ttl', '30s', '--grace', '2s', '--',
	child($cb, 'while :; do sleep 0.1; done', 'trap "" TERM; '));
($child_pid) = child_pids($cb, $p);
ok(defined $child_pid, 'lost lease, SIGTERM ignored: the command runs');
ok(wait_listening(1), 'lost lease, SIGTERM ignored: the tool listens');
$t0 = time;
is(q1("SELECT dsync_force_release('lost2')"), '1', 'dsync_force_release takes the lease away');
$gone_after = time_until_gone($child_pid, $t0, $p);
ok(defined $gone_after, 'lost lease, SIGTERM ignored: the command is gone');
note(sprintf('lost lease, SIGTERM ignored: gone %.3f s after dsync_force_release (grace 2 s)',
		$gone_after // -1));
cmp_ok($gone_after // 99, '<', 3, 'lost lease, SIGTERM ignored: gone in less than grace + 1 s');
is(wait_exit($p), 70, 'lost lease, SIGTERM ignored: the tool exits 70');
like($p->{err}, qr/did not stop in time; killing it/, 'lost lease, SIGTERM ignored: SIGKILL reported');

# --- reconnect after pg_terminate_backend ------------------------------------------

ok(wait_true("SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'dsync'"),
	'reconnect: no other dsync connection is left');

$cb = "$dir/reconn";
$p = start_dsync('lock', 'reconn', '--ttl', '9s', '--holder', 'hrc', '--', child($cb, 'exec sleep 6'));
($child_pid) = child_pids($cb, $p);
ok(defined $child_pid, 'reconnect: the command runs');
ok(wait_listening(1), 'reconnect: the tool is connected and listens');
my $old_backend = q1("SELECT pid FROM pg_stat_activity WHERE application_name = 'dsync'");
like($old_backend, qr/^\d+$/, 'reconnect: one backend for application_name dsync');
is( q1("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dsync'"),
	't', 'reconnect: the tool\'s backend is terminated');
my @leaders;
my $new_backend = '';
while (!gone($child_pid))
{
	my $l = q1("SELECT coalesce(dsync_leader('reconn'), '(none)') || ' ' || "
		  . "coalesce((SELECT string_agg(pid::text, ',') FROM pg_stat_activity "
		  . "WHERE application_name = 'dsync'), '')");
	# Only a sample taken while the command was alive must show the lease.
	last if gone($child_pid);
	my ($leader, $pids) = split / /, $l, 2;
	push @leaders, $leader;
	$new_backend = $pids if $pids =~ /^\d+$/ && $pids ne $old_backend;
	pump_nb($p);
	usleep(200_000);
}
note('reconnect: ' . scalar(@leaders) . ' samples of dsync_leader while the command ran');
cmp_ok(scalar(@leaders), '>=', 5, 'reconnect: the lease was sampled several times during the run');
is_deeply([ grep { $_ ne 'hrc' } @leaders ], [], 'reconnect: the lease stayed held by the same holder throughout');
like($new_backend, qr/^\d+$/, 'reconnect: a new backend pid appears for application_name dsync');
is(wait_exit($p), 0, 'reconnect: the command completes normally (exit 0)');
like($p->{err}, qr/connection lost/, 'reconnect: the tool noticed the lost connection');
unlike($p->{err}, qr/stopping the command/, 'reconnect: the command was never told to stop');
is(q1("SELECT dsync_leader('reconn') IS NULL"), 't', 'reconnect: lease released at the end');

# --- elect: failover after SIGKILL of the leader's tool --------------------------------

# A watcher of the group's channel gives the server's side of the story:
# when cA's lease expired, and when cB got it.
my $we = start_dsync('watch', 'grp', '--json');
ok(wait_listening(1), 'elect: a watcher listens on the group');

my %eb = (cA => "$dir/electA", cB => "$dir/electB");
my %ep;
$ep{cA} = start_dsync('elect', 'grp', '--ttl', '3s', '--id', 'cA', '--', child($eb{cA}, 'exec sleep 300'));
my ($childA, $toolA) = child_pids($eb{cA}, $ep{cA});
ok(defined $childA, 'elect: the first candidate leads and runs its command');
is(q1("SELECT dsync_leader('grp')"), 'cA', 'elect: cA is the leader');
$ep{cB} = start_dsync('elect', 'grp', '--ttl', '3s', '--id', 'cB', '--', child($eb{cB}, 'exec sleep 300'));
ok(wait_true("SELECT count(*) = 1 FROM dsync_waiters WHERE name = 'grp' AND holder = 'cB'"),
	'elect: the second candidate campaigns (waits in the server)');
is(q1("SELECT string_agg(member || ':' || is_leader, ',' ORDER BY member) FROM dsync_members('grp')"),
	'cA:true,cB:false', 'elect: dsync_members shows both candidates, cA leader');
ok(!-e "$eb{cB}.pid", 'elect: the second candidate does not run its command');
ok(wait_output($ep{cA}, 'err', qr/^dsync: candidate cA in group "grp"$/m),
	'elect: --id is the candidate name (printed on stderr)');

kill 'KILL', $toolA;
$t0 = time;
my $gone_a = time_until_gone($childA, $t0, values %ep);
note(sprintf('elect: the killed candidate\'s command was gone %.3f s after the SIGKILL', $gone_a // -1));
ok(defined $gone_a && $gone_a < 5, 'elect: the killed candidate\'s command is gone (PR_SET_PDEATHSIG)');
my $new_leader = '';
while (time < $t0 + $timeout)
{
	$new_leader = q1("SELECT coalesce(dsync_leader('grp'), '')");
	last if $new_leader eq 'cB';
	pump_nb($_) for values %ep;
	usleep(20_000);
}
my $failover = time - $t0;
is($new_leader, 'cB', 'elect: after SIGKILL of the leader\'s tool, cB leads');
note(sprintf('elect: new leader %.3f s after SIGKILL of the leader (ttl 3 s)', $failover));
cmp_ok($failover, '<', 4, 'elect: the new leader within ttl + 1 s');
my $granted_b = q1("SELECT extract(epoch FROM acquired_at) FROM dsync_leases WHERE lease = 'grp' AND holder = 'cB'");
cmp_ok($t0 + ($gone_a // 99), '<', $granted_b || 0,
	'elect: the killed candidate\'s command was gone before cB was granted the lease');
ok(scalar(child_pids($eb{cB}, $ep{cB}, $ep{cA})), 'elect: the new leader runs its command');
ok(wait_output($we, 'out', qr/"event":"acquired"[^\n]*"holder":"cB"/), 'elect: the watcher saw cB acquire');
my @gev = map { eval { JSON::PP->new->decode($_) } // {} } split /\n/, $we->{out};
my ($expired_a) = grep { ($_->{event} // '') eq 'expired' && ($_->{holder} // '') eq 'cA' } @gev;
ok(defined $expired_a, 'elect: the watcher saw cA\'s lease expire');
if (defined $expired_a && $granted_b)
{
	my $expired_at = q1("SELECT extract(epoch FROM '$expired_a->{expires_at}'::timestamptz)");
	note(sprintf('elect: cA\'s lease expired %.3f s after the SIGKILL; cB was granted it %.3f s after that',
			$expired_at - $t0, $granted_b - $expired_at));
}
# (The order of cA's expiry and cB's grant is the extension's business,
# tested in 008_events.pl; here only that both are announced.)
my @lease_ev = map { "$_->{event}:$_->{holder}" } grep { defined $_->{holder} } @gev;
is_deeply([ $lease_ev[0], sort @lease_ev[ 1 .. $#lease_ev ] ],
	[ 'acquired:cA', 'acquired:cB', 'expired:cA' ],
	'elect: the watcher saw cA acquire, then cA expire and cB acquire');
note("elect: events seen by dsync watch grp --json:\n$we->{out}")
  unless "@lease_ev" eq 'acquired:cA expired:cA acquired:cB';
is_deeply([ map { "$_->{event}:$_->{member}" } grep { ($_->{event} // '') eq 'joined' } @gev ],
	[ 'joined:cA', 'joined:cB' ], 'elect: both candidates joined the group');
like(q1("SELECT string_agg(member || ':' || is_leader, ',' ORDER BY member) FROM dsync_members('grp')"),
	qr/^(cA:false,)?cB:true$/, 'elect: dsync_members shows cB as leader');
is(wait_exit($ep{cA}), 'signal 9', 'elect: the killed tool died of SIGKILL');
$ep{cB}{h}->signal('TERM');
is(wait_exit($ep{cB}), 128 + 15, 'elect: SIGTERM goes to the command, whose status is the tool\'s');
like($ep{cB}{err}, qr/leader of "grp" \(fencing token \d+\)/, 'elect: cB reported its leadership');
is(q1("SELECT dsync_leader('grp') IS NULL"), 't', 'elect: the leader released the lease on exit');
ok(wait_true("SELECT count(*) = 0 FROM dsync_members('grp') WHERE member = 'cB'"),
	'elect: the leader left the group on exit');
$we->{h}->signal('TERM');
is(wait_exit($we), 0, 'elect: the watcher exits 0 on SIGTERM');

# --- a lock that waited longer than its ttl still runs its command ----------------

# The other holder's lease ends in 4 s; dsync lock (ttl 3 s, no --wait:
# "waits as long as it takes") waits for it in the server, then must run
# its 3 s command to the end, renewing the lease every ttl/3 as usual.
q1("SELECT dsync_acquire('slow', 'other', '4 seconds')");
$cb = "$dir/slow";
$t0 = time;
$p = start_dsync('lock', 'slow', '--ttl', '3s', '--holder', 'hsl', '--', child($cb, 'exec sleep 3'));
ok(scalar(child_pids($cb, $p)), 'after waiting, the lock runs its command');
note(sprintf('lock waited %.3f s for the lease (ttl 3 s)', time - $t0));
is(q1("SELECT dsync_leader('slow')"), 'hsl', 'after waiting, the tool holds the lease');
is(wait_exit($p), 0, 'a lock that waited 4 s (ttl 3 s) runs its 3 s command to the end: exit 0');
unlike($p->{err}, qr/stopping the command/, 'a lock that waited: the command was never told to stop');
is(q1("SELECT dsync_leader('slow') IS NULL"), 't', 'a lock that waited: lease released at the end');

# --- the server goes away while the tool holds a lease (last) -----------------------------

# ttl 4 s, grace 1 s: once renewals fail, SIGTERM at KillDeadline - grace,
# SIGKILL at KillDeadline = expiry - min(1 s, ttl/10) = expiry - 0.4 s.
# The command traps SIGTERM (prints it) and keeps running.  The lease's
# expiry as last seen in dsync_leases is a lower bound of when it really
# expires (a renewal only moves it later): the command must be gone by
# then.  The server is stopped right after a renewal, so that the tool has
# seen no later one (renewals come every ttl/3 = 1.3 s).
$cb = "$dir/down";
$p = start_dsync('lock', 'down', '--ttl', '4s', '--grace', '1s', '--',
	child($cb, 'while :; do sleep 0.1; done', 'trap "echo got TERM" TERM; '));
($child_pid) = child_pids($cb, $p);
ok(defined $child_pid, 'server down: the command runs');
ok(wait_listening(1), 'server down: the tool listens');
my $expiry_sql = "SELECT extract(epoch FROM expires_at) FROM dsync_leases WHERE lease = 'down'";
my $first_expiry = q1($expiry_sql);
my $expiry = $first_expiry;
$t0 = time;
while ($expiry eq $first_expiry && time < $t0 + $timeout)
{
	pump_nb($p);
	usleep(10_000);
	$expiry = q1($expiry_sql);
}
isnt($expiry, $first_expiry, 'server down: the tool renews the lease');
$node->stop('immediate');
my $stopped = time;
note(sprintf('server down: stopped %.3f s before the expiry last seen', $expiry - $stopped));
$gone_after = time_until_gone($child_pid, $stopped, $p);
ok(defined $gone_after, 'server down: the command is stopped');
my $gone_at = $stopped + ($gone_after // 99);
note(sprintf('server down: the command was gone %.3f s after the server had stopped, '
		  . '%.3f s before the lease would expire (ttl 4 s, grace 1 s, margin 0.4 s)',
		$gone_after // -1, $expiry - $gone_at));
cmp_ok($gone_at, '<', $expiry, 'server down: the command is gone before the lease would expire');
is(wait_exit($p), 70, 'server down: the tool exits 70');
like($p->{out}, qr/^got TERM$/m, 'server down: the command got SIGTERM first');
like($p->{err}, qr/could not renew the lease in time; stopping the command/,
	'server down: stopping reported on stderr');
like($p->{err}, qr/did not stop in time; killing it/, 'server down: then SIGKILL');

$node->start;
ok(wait_true("SELECT dsync_leader('down') IS NULL"),
	'after the restart nobody renews the lease: it expires');

$node->stop;
done_testing();
