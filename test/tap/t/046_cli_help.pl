# The dsync tool's help, command by command: no server is needed.
#
# This test proves:
#   - dsync --help (and dsync help) prints the usage of every command on
#     stdout, exits 0 and points to "dsync COMMAND --help";
#   - dsync COMMAND --help, dsync COMMAND -h, dsync help COMMAND and
#     dsync COMMAND NAME --help print that command's own usage on stdout
#     (its usage line, its options, its exit codes, and no other command's
#     usage line or options), nothing on stderr, and exit 0;
#   - an unknown command still exits 64, with --help after it or as
#     dsync help's argument, and so does dsync help with two names.
#
# The tool is the first dsync on PATH (t/011_cli.pl runs the same one).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest qw(run_tool);

# The options each command takes, and some that belong to others only.
my %options = (
	lock => [qw(--ttl --wait --permits --shared --holder --info --grace --no-queue --dsn)],
	elect => [qw(--ttl --id --info --grace --no-queue --dsn)],
	watch => [qw(--json --dsn)],
	status => [qw(--json --timeout --dsn)],
	check => [qw(--json --queue-threshold --timeout --dsn)],);
my %not_its = (
	lock => [qw(--json --timeout)],
	elect => [qw(--wait --permits --shared --json --timeout)],
	watch => [qw(--ttl --wait --permits --holder --id --no-queue --timeout)],
	status => [qw(--ttl --wait --holder --no-queue --queue-threshold)],
	check => [qw(--ttl --wait --holder --no-queue --permits)],);

# --- the usage of all commands -----------------------------------------------

for my $how ([ '--help' ], ['-h'], ['help'])
{
	my ($code, $out, $err) = run_tool(@$how);
	is($code, 0, "dsync @$how exits 0");
	like($out, qr/^Usage:\n/m, "dsync @$how prints the usage on stdout");
	for my $cmd (sort keys %options)
	{
		like($out, qr/^  dsync \[--dsn DSN\] \Q$cmd\E /m, "dsync @$how shows $cmd");
	}
	like($out, qr/"dsync COMMAND --help" \(or "dsync help COMMAND"\) shows one command's/,
		"dsync @$how points to each command's own help");
	is($err, '', "dsync @$how: nothing on stderr");
}

# --- each command's own help ---------------------------------------------------

for my $cmd (sort keys %options)
{
	for my $how ([ $cmd, '--help' ], [ $cmd, '-h' ], [ 'help', $cmd ],
		[ $cmd, 'some-name', '--help' ], [ '--dsn', 'dbname=x', $cmd, '--help' ])
	{
		my ($code, $out, $err) = run_tool(@$how);
		is($code, 0, "dsync @$how exits 0");
		like($out, qr/\Adsync \Q$cmd\E: /, "dsync @$how: ${cmd}'s own help on stdout");
		is($err, '', "dsync @$how: nothing on stderr");
	}

	my ($code, $out, $err) = run_tool($cmd, '--help');
	like($out, qr/^Usage:\n  dsync \[--dsn DSN\] \Q$cmd\E /m, "$cmd --help: its usage line");
	unlike($out, qr/^  dsync \[--dsn DSN\] (?!\Q$cmd\E )/m,
		"$cmd --help: no other command's usage line");
	like($out, qr/^  -h, --help  /m, "$cmd --help names -h, --help");
	for my $option (@{ $options{$cmd} })
	{
		like($out, qr/^  \Q$option\E[ =]/m, "$cmd --help names $option");
	}
	for my $option (@{ $not_its{$cmd} })
	{
		unlike($out, qr/^  \Q$option\E[ =]/m, "$cmd --help does not offer $option");
	}
	like($out, qr/^Exit codes: .*\b64 usage\b/ms, "$cmd --help lists its exit codes");
}

# Each command's exit codes, as the code has them.
my (undef, $lock) = run_tool('lock', '--help');
like($lock, qr/\b75 --wait ran out\b/, 'lock --help: 75 when --wait runs out');
like($lock, qr/\b70 lease lost\b/, 'lock --help: 70 when the lease is lost');
my (undef, $elect) = run_tool('elect', '--help');
unlike($elect, qr/\b7[05] /, 'elect --help: neither 70 nor 75 (it campaigns again, it has no --wait)');
my (undef, $watch) = run_tool('watch', '--help');
like($watch, qr/\b0 stopped by a signal\b/, 'watch --help: 0 when a signal stops it');
my (undef, $check) = run_tool('check', '--help');
like($check, qr/\b0 healthy\b/, 'check --help: 0 when healthy');
for my $code ([ 69, 'server unavailable' ], [ 72, 'dsync is not in shared_preload_libraries' ],
	[ 75, 'the event queue is fuller' ], [ 78, 'the extension is not' ], [ 79, 'no worker serves' ])
{
	like($check, qr/\b$code->[0]\s+\Q$code->[1]\E/, "check --help: $code->[0] $code->[1]");
}

# --- misuse ---------------------------------------------------------------------

for my $case (
	[ [ 'frob', '--help' ], qr/unknown command "frob"/, 'an unknown command with --help' ],
	[ [ 'help', 'frob' ], qr/unknown command "frob"/, 'help of an unknown command' ],
	[ [ 'help', 'lock', 'watch' ], qr/help takes one command name, not "watch"/,
		'help with two names' ],)
{
	my ($args, $msg_re, $what) = @$case;
	my ($code, $out, $err) = run_tool(@$args);
	is($code, 64, "$what: exit 64");
	like($err, qr/\Adsync: [^\n]*$msg_re[^\n]*\nTry "dsync --help" for more information\.\n\z/,
		"$what: message on stderr");
	is($out, '', "$what: nothing on stdout");
}

done_testing();
