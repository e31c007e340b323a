# The pg_regress tests and isolation specs that need a server configured
# for them (test/configured): max_prepared_transactions > 0 (a prepared
# transaction is committed) and dsync.ephemeral_max_ttl = 2 (ephemeral
# leases are granted 2 s after the start, and a longer ttl is refused).
# `make installcheck` runs the others on any server that has dsync in
# shared_preload_libraries and nothing else set (test/regress.sh runs it
# so); these run here, on a server this test configures, against their
# expected files, twice, as test/regress.sh runs the others:
#   1. as the superuser, in databases pg_regress makes, after the "setup"
#      test and spec (sql/setup.sql, test/isolation/specs/setup.spec) that
#      make the roles and helpers the others use;
#   2. logged in as dsync_tester, an ordinary login role (neither superuser
#      nor the extension's owner), in databases made afresh, where the
#      superuser ran only the setup test and spec.
use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(basename);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $top = abs_path("$ENV{TESTDIR}/../..");
my $configured = "$top/test/configured";
my $pg_regress = $ENV{PG_REGRESS} or die 'PG_REGRESS is not set';
(my $default_isolation = $pg_regress) =~ s{regress/pg_regress$}{isolation/pg_isolation_regress};
my $pg_isolation_regress = $ENV{PG_ISOLATION_REGRESS} // $default_isolation;

my @regress = map { basename($_, '.sql') } sort glob("$configured/sql/*.sql");
my @isolation = map { basename($_, '.spec') } sort glob("$configured/isolation/specs/*.spec");
ok(@regress >= 3 && @isolation >= 2,
	'configured tests: ' . join(', ', @regress) . '; specs: ' . join(', ', @isolation));

my $node = dsync_node('configured', 'max_prepared_transactions = 10',
	'dsync.ephemeral_max_ttl = 2');

# One run of pg_regress or pg_isolation_regress against the node, its
# output in a directory of its own; on failure, its diffs.
sub run_tests
{
	my ($what, $program, $inputdir, $db, @args) = @_;
	my $outputdir = "$PostgreSQL::Test::Utils::tmp_check/036_" . ($what =~ s/\W+/_/gr);
	mkdir $outputdir;
	my $ok = run_log(
		[
			$program, "--inputdir=$inputdir", "--outputdir=$outputdir", '--bindir=',
			'--host=' . $node->host, '--port=' . $node->port, "--dbname=$db", @args
		]);
	ok($ok, $what);
	diag(slurp_file("$outputdir/regression.diffs"))
	  if !$ok && -e "$outputdir/regression.diffs";
	return;
}

# 1. As the superuser, as `make installcheck` runs the others.
run_tests('superuser: the setup test', $pg_regress, $top, 'contrib_regression',
	'--load-extension=dsync', 'setup');
run_tests('superuser: ' . join(', ', @regress), $pg_regress, $configured,
	'contrib_regression', '--use-existing', @regress);
run_tests('superuser: the setup spec', $pg_isolation_regress, "$top/test/isolation",
	'isolation_regression', '--load-extension=dsync', 'setup');
run_tests('superuser: specs ' . join(', ', @isolation), $pg_isolation_regress,
	"$configured/isolation", 'isolation_regression', '--use-existing', @isolation);

# 2. Logged in as dsync_tester, in databases made afresh and set up by the
# superuser (as test/regress.sh does).
for my $db (qw(contrib_regression isolation_regression))
{
	$node->safe_psql('postgres', "DROP DATABASE $db");
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION dsync');
}
run_tests('setup for dsync_tester: the setup test', $pg_regress, $top, 'contrib_regression',
	'--use-existing', 'setup');
run_tests('setup for dsync_tester: the setup spec', $pg_isolation_regress,
	"$top/test/isolation", 'isolation_regression', '--use-existing', 'setup');
is($node->safe_psql('postgres',
		"SELECT rolcanlogin AND NOT rolsuper FROM pg_roles WHERE rolname = 'dsync_tester'"),
	't', 'dsync_tester is an ordinary login role');
run_tests('dsync_tester: ' . join(', ', @regress), $pg_regress, $configured,
	'contrib_regression', '--use-existing', '--user=dsync_tester', @regress);
run_tests('dsync_tester: specs ' . join(', ', @isolation), $pg_isolation_regress,
	"$configured/isolation", 'isolation_regression', '--use-existing', '--user=dsync_tester',
	@isolation);

done_testing();
