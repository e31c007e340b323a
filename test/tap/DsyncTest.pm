# Helpers shared by dsync's Perl TAP tests: a node with dsync preloaded,
# one-value queries, polling, and a LISTENing psql that collects
# notifications with the process that sent them.
package DsyncTest;

use strict;
use warnings;

use Exporter 'import';
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use IPC::Run;

our @EXPORT = qw(dsync_node stop_at_end wait_for q1 reaper_pid psql_client send_wait
  crash_restart run_tool tool_env log_since log_offset no_error_since
  restart_without_dsync);

my @nodes;
my @clients;

# Stop what the test started, whatever happened; a node that died is
# stopped with fail_ok, or Cluster.pm's own teardown would BAIL_OUT and
# stop the remaining test files too.
END
{
	local $?;
	eval { $_->{h}->kill_kill } for @clients;
	for my $n (grep { defined } @nodes)
	{
		$n->stop('immediate', fail_ok => 1)
		  unless -e $n->data_dir . '/postmaster.pid';
	}
}

# Have nodes a test made itself stopped by the END block above.
sub stop_at_end
{
	push @nodes, @_;
	return;
}

# A started node with dsync preloaded and the extension in database
# postgres; extra lines go to postgresql.conf.
sub dsync_node
{
	my ($name, @conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => 1);
	$node->append_conf('postgresql.conf',
		join("\n", "shared_preload_libraries = 'dsync'", @conf) . "\n");
	$node->start;
	push @nodes, $node;
	$node->safe_psql('postgres', 'CREATE EXTENSION dsync');
	return $node;
}

# The single value a query returns, in database postgres (or $db).
sub q1
{
	my ($node, $sql, $db) = @_;
	return $node->safe_psql($db // 'postgres', $sql);
}

# Poll until $sql returns 't' (up to $timeout seconds, default 30): true
# if it did.  Never a timing assertion: a bound on how long to wait.
sub wait_for
{
	my ($node, $sql, $timeout, $db) = @_;
	my $deadline = time + ($timeout // 30);
	my $last = '';
	while (time < $deadline)
	{
		$last = $node->safe_psql($db // 'postgres', $sql);
		return 1 if $last eq 't';
		usleep(50_000);
	}
	diag("not true within the time allowed: $sql (last: $last)");
	return 0;
}

# Kill every process of the server at once, as a power cut would end them,
# and start it again (crash recovery).
sub crash_restart
{
	my ($node) = @_;
	open my $fh, '<', $node->data_dir . '/postmaster.pid' or die $!;
	my $pm = <$fh>;
	chomp $pm;
	close $fh;
	my @all = ($pm, grep { /^\d+$/ } split /\s+/, `pgrep -P $pm`);
	kill 'KILL', @all;
	$node->kill9;    # forgets the pid; the process is gone already
	for (1 .. 200)
	{
		last unless grep { kill 0, $_ } @all;
		usleep(50_000);
	}
	$node->start;
	return;
}

# The pid of the reaper of database postgres, once it runs.
sub reaper_pid
{
	my ($node) = @_;
	my $sql = "SELECT pid FROM pg_stat_activity "
	  . "WHERE backend_type = 'dsync reaper' AND datname = 'postgres'";
	wait_for($node, "SELECT count(*) = 1 FROM ($sql) r")
	  or die 'the reaper of database postgres did not start';
	return $node->safe_psql('postgres', $sql);
}

# A psql client of $node as $role (in database postgres, or $db), fed
# statements one at a time with send_wait; killed at the end if still up.
sub psql_client
{
	my ($node, $role, $db) = @_;
	my $c = { in => '', out => '', err => '' };
	$c->{h} = IPC::Run::start(
		[
			'psql', '-X', '-q', '-A', '-t', '-h', $node->host, '-p', $node->port,
			'-U', $role, '-d', $db // 'postgres'
		],
		'<', \$c->{in}, '>', \$c->{out}, '2>', \$c->{err});
	push @clients, $c;
	return $c;
}

# Send a statement to a psql_client and wait (up to $timeout seconds,
# default 60) until its output so far matches $re: true if it did.
sub send_wait
{
	my ($c, $sql, $re, $timeout) = @_;
	$c->{in} .= "$sql\n";
	my $deadline = time + ($timeout // 60);
	while ($c->{out} !~ $re && time < $deadline)
	{
		$c->{h}->pump_nb;
		usleep(5_000);
	}
	return $c->{out} =~ $re;
}

# Run the dsync tool (the first on PATH) to its end: its exit code (or
# "signal N" if a signal ended it, which must not pass for an exit code),
# stdout and stderr.  A tool that hangs fails the test after 60 seconds
# (IPC::Run dies) rather than hanging it.
sub run_tool
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'dsync', @_ ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	return (($? & 127) ? 'signal ' . ($? & 127) : $? >> 8, $out, $err);
}

# Point the tool (through the libpq environment) at database postgres of
# $node, as the user running the test.
sub tool_env
{
	my ($node) = @_;
	$ENV{PGHOST} = $node->host;
	$ENV{PGPORT} = $node->port;
	$ENV{PGDATABASE} = 'postgres';
	delete $ENV{PGUSER};
	return;
}

# What $node's server log got after $offset (a length of it), and its
# length now.
sub log_since
{
	my ($node, $offset) = @_;
	my $log = slurp_file($node->logfile);
	return (substr($log, $offset), length($log));
}

# How long $node's server log is now: the offset for log_since and
# no_error_since.
sub log_offset
{
	my ($node) = @_;
	return length(slurp_file($node->logfile));
}

# Test that $node's server log got no ERROR since $$offset_ref, and move
# $$offset_ref to its end, so that the next check looks at what comes
# after.  The tool must leave no ERROR where dsync is missing.
sub no_error_since
{
	my ($node, $offset_ref, $name) = @_;
	my $log;
	($log, $$offset_ref) = log_since($node, $$offset_ref);
	return unlike($log, qr/ERROR/, $name);
}

# Restart $node without dsync in shared_preload_libraries (the extension
# stays installed); returns the server log's offset after the restart.
sub restart_without_dsync
{
	my ($node) = @_;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
	$node->restart;
	return log_offset($node);
}

# A psql session that LISTENs.  psql prints notifications after the result
# of the next command, so pump() runs "SELECT 1" and collects them, each as
# { channel, raw, pid, json }.
package Listener;

sub new
{
	my ($class, $node, $db) = @_;
	my $self = bless { node => $node, received => [] }, $class;
	$self->{psql} = $node->background_psql($db // 'postgres');
	$self->{psql}->set_query_timer_restart;
	return $self;
}

sub listen
{
	my ($self, $name) = @_;
	my $channel = $self->{node}->safe_psql('postgres', "SELECT dsync_channel('$name')");
	$self->{psql}->query_safe(qq{LISTEN "$channel"});
	return $channel;
}

sub pump
{
	my ($self) = @_;
	my $out = $self->{psql}->query_safe('SELECT 1');
	for my $line (split /\r?\n/, $out)
	{
		next
		  unless $line =~
		  /^Asynchronous notification "(.*?)"(?: with payload "(.*)")? received from server process with PID (\d+)\.$/;
		my %n = (channel => $1, raw => $2 // '', pid => $3);
		$n{json} = eval { JSON::PP->new->decode($n{raw}) } // {};
		push @{ $self->{received} }, \%n;
	}
	return;
}

# Pump until at least $count notifications have come on $channel (or
# $timeout seconds, default 30, have passed); remove and return them all.
sub take
{
	my ($self, $channel, $count, $timeout) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 30);
	while (1)
	{
		my @mine = grep { $_->{channel} eq $channel } @{ $self->{received} };
		if (@mine >= $count || Time::HiRes::time() > $deadline)
		{
			my %took = map { ($_ => 1) } @mine;
			$self->{received} = [ grep { !$took{$_} } @{ $self->{received} } ];
			return @mine;
		}
		Time::HiRes::usleep(50_000);
		$self->pump;
	}
}

sub quit
{
	my ($self) = @_;
	$self->{psql}->quit;
	return;
}

1;
