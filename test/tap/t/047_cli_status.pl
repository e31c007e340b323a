# dsync status: no ERROR in the server log where dsync is missing (issue 43).
#
# This test proves:
#   - dsync status in a database without the extension, and on a server
#     without dsync preloaded, exits 78 with its message and leaves no
#     ERROR in the server log (it used to query dsync_leases and log
#     "relation ... does not exist"; it now looks at pg_settings and the
#     catalogs first);
#   - with the extension in a schema off the search_path, status still
#     finds the views.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

# Run the tool: its exit code, stdout and stderr.
sub run_dsync
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'dsync', @_ ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	return ($? >> 8, $out, $err);
}

# The server log written since $offset, and its length now.
sub log_since
{
	my ($node, $offset) = @_;
	my $log = slurp_file($node->logfile);
	return (substr($log, $offset), length($log));
}

my $node = dsync_node('status');
$node->safe_psql('postgres', 'CREATE DATABASE noext');
$ENV{PGHOST} = $node->host;
$ENV{PGPORT} = $node->port;
$ENV{PGDATABASE} = 'postgres';
delete $ENV{PGUSER};

# --- a database without the extension: no ERROR in the log --------------------

my $offset = length(slurp_file($node->logfile));
my ($code, $out, $err) = run_dsync('--dsn', 'dbname=noext', 'status');
is($code, 78, 'status in a database without the extension exits 78');
like($err, qr/^dsync: the dsync extension \(version 1.2 or later\) is not installed in database "noext"; run CREATE EXTENSION dsync there$/m,
	'and says to run CREATE EXTENSION there');
my $log;
($log, $offset) = log_since($node, $offset);
unlike($log, qr/ERROR/, 'no ERROR in the server log from status there');

# The extension in a schema off the search_path: the views are still found.
$node->safe_psql('postgres', 'CREATE DATABASE elsewhere');
$node->safe_psql('elsewhere', 'CREATE SCHEMA ds; CREATE EXTENSION dsync SCHEMA ds;');
$node->safe_psql('elsewhere', "SELECT ds.dsync_acquire('far', 'h', '1 hour')");
($code, $out, $err) = run_dsync('--dsn', 'dbname=elsewhere', 'status');
is($code, 0, 'status where the extension is in a schema off the search_path exits 0');
like($out, qr/^far\s+h\s+\d+\s/m, 'and lists its lease');
($log, $offset) = log_since($node, $offset);
unlike($log, qr/ERROR/, 'no ERROR in the server log from it');

# --- a server without dsync preloaded ----------------------------------------------

$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
$offset = length(slurp_file($node->logfile));
($code, $out, $err) = run_dsync('status');
is($code, 78, 'status on a server without dsync preloaded exits 78');
like($err, qr/^dsync: dsync is not loaded on this server \(it is not in shared_preload_libraries\); add shared_preload_libraries = 'dsync' to postgresql.conf and restart the server$/m,
	'and says to preload it');
($log) = log_since($node, $offset);
unlike($log, qr/ERROR/, 'no ERROR in the server log from status without preloading');

done_testing();
