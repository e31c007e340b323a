# Ephemeral leases and the backends and roles that own them.
#
# This test proves, with dsync.ephemeral_max_ttl = 10 (seconds):
#   1. an ephemeral session lease (durable => false, session => true)
#      acquired again, same holder and token, by a second backend with
#      session => true moves to it, as a durable one does: the first
#      backend's exit leaves it held, the second's releases it;
#   2. DROP ROLE of a role holding a live ephemeral lease fails (2BP01)
#      and counts it, also when the lease is in another database; an
#      expired one does not block; DROP OWNED BY releases the role's
#      ephemeral leases (with an event) and REASSIGN OWNED BY gives them
#      to the new role, after which DROP ROLE succeeds.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use lib '.';
use DsyncTest;

my $timeout = 60;
my $node = dsync_node('ephowner', 'dsync.ephemeral_max_ttl = 10');
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE r1 LOGIN; CREATE ROLE r2 LOGIN; CREATE ROLE r3 LOGIN;
	CREATE ROLE r4 LOGIN; CREATE ROLE r5 LOGIN;
	CREATE DATABASE other;
});
$node->safe_psql('other', 'CREATE EXTENSION dsync');


# A psql client as role app (DsyncTest's psql_client).
sub client { return psql_client($node, 'app'); }

# A client quits normally; returns once its backend is gone.
sub quit
{
	my ($c, $pid) = @_;
	$c->{in} .= "\\q\n";
	$c->{h}->finish;
	ok(wait_for($node, "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $pid)"),
		"backend $pid has ended");
}

sub psql_as
{
	my ($role, $sql, $db) = @_;
	my ($out, $err) = ('', '');
	my $ret = $node->psql($db // 'postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-U', $role, '-v', 'VERBOSITY=verbose' ]);
	return ($ret, $out, $err);
}

# --- 1. a moved ephemeral session lease -------------------------------------

my $a = client();
my $b = client();
ok(send_wait($a, 'SELECT pg_backend_pid();', qr/^\d+$/m), 'backend A is up');
my ($a_pid) = $a->{out} =~ /^(\d+)$/m;
$a->{out} = '';
ok(send_wait($b, 'SELECT pg_backend_pid();', qr/^\d+$/m), 'backend B is up');
my ($b_pid) = $b->{out} =~ /^(\d+)$/m;
$b->{out} = '';

# The first grant waits out the grace after the start.
ok(send_wait($a, "SELECT 'A:' || dsync_acquire('mv', 'h', '10 s', wait => '30 s', session => true, durable => false);",
		qr/^A:\d+$/m), 'A acquires an ephemeral session lease');
my ($token_a) = $a->{out} =~ /^A:(\d+)$/m;
ok(send_wait($b, "SELECT 'B:' || dsync_acquire('mv', 'h', '10 s', session => true, durable => false);",
		qr/^B:\d+$/m), 'B acquires it again with session => true');
my ($token_b) = $b->{out} =~ /^B:(\d+)$/m;
is($token_b, $token_a, 'with the same token');
quit($a, $a_pid);
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'mv' AND fencing = $token_a"), '1',
	'A\'s exit leaves the lease B took with session => true');
quit($b, $b_pid);
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'mv'"), '0',
	'B\'s exit releases it');

# --- 2. DROP ROLE, DROP OWNED, REASSIGN OWNED -------------------------------

psql_as('r1', "SELECT dsync_acquire('r1-eph', 'h1', '10 s', durable => false)");
my ($ret, $out, $err) = psql_as('postgres', 'DROP ROLE r1');
like($err, qr/ERROR:\s+2BP01: role "r1" cannot be dropped because it owns dsync leases or other dsync state/,
	'DROP ROLE of a role holding a live ephemeral lease fails (2BP01)');
like($err,
	qr/DETAIL:\s+In database "postgres": 1 lease or permit, 0 memberships, 0 pending signals, 0 semaphore definitions, 0 fences\.\n/,
	'and counts it, in the singular');

psql_as('r2', "SELECT dsync_acquire('r2-eph', 'h2', '1 s', durable => false)");
ok(wait_for($node, "SELECT NOT EXISTS (SELECT FROM dsync_leases WHERE lease = 'r2-eph')"),
	'r2\'s ephemeral lease expires');
($ret, $out, $err) = psql_as('postgres', 'DROP ROLE r2');
is($ret, 0, 'an expired ephemeral lease does not block DROP ROLE') or diag($err);

my $listener = Listener->new($node);
my $ch = $listener->listen('r1-eph');
($ret, $out, $err) = psql_as('postgres', 'DROP OWNED BY r1');
is($ret, 0, 'DROP OWNED BY r1') or diag($err);
my ($rel) = $listener->take($ch, 1);
is($rel->{json}{event} // '', 'released', 'releases its ephemeral lease, with an event');
is(q1($node, "SELECT count(*) FROM dsync_leases WHERE lease = 'r1-eph'"), '0', 'which is gone');
($ret, $out, $err) = psql_as('postgres', 'DROP ROLE r1');
is($ret, 0, 'and DROP ROLE succeeds then') or diag($err);

psql_as('r3', "SELECT dsync_acquire('r3-eph', 'h3', '10 s', durable => false)");
($ret, $out, $err) = psql_as('postgres', 'REASSIGN OWNED BY r3 TO r4');
is($ret, 0, 'REASSIGN OWNED BY r3 TO r4') or diag($err);
is(q1($node, "SELECT owner FROM dsync_leases WHERE lease = 'r3-eph'"), 'r4',
	'gives the ephemeral lease to r4');
($ret, $out, $err) = psql_as('r4', "SELECT dsync_release('r3-eph', 'h3')");
is($out, 't', 'which can release it');
($ret, $out, $err) = psql_as('postgres', 'DROP ROLE r3');
is($ret, 0, 'and DROP ROLE r3 succeeds') or diag($err);

psql_as('r5', "SELECT dsync_acquire('r5-eph', 'h5', '10 s', wait => '30 s', durable => false)", 'other');
($ret, $out, $err) = psql_as('postgres', 'DROP ROLE r5');
like($err, qr/ERROR:\s+2BP01: role "r5" cannot be dropped/,
	'an ephemeral lease in another database blocks DROP ROLE too');
like(
	$err,
	qr/DETAIL:\s+In database "postgres": 0 leases or permits, 0 memberships, 0 pending signals, 0 semaphore definitions, 0 fences\. Besides, 1 ephemeral lease in another database\./,
	'and is counted as such, in the singular');
($ret, $out, $err) = psql_as('postgres', 'DROP OWNED BY r5', 'other');
($ret, $out, $err) = psql_as('postgres', 'DROP ROLE r5');
is($ret, 0, 'DROP ROLE r5 succeeds after DROP OWNED BY in that database') or diag($err);

$listener->quit;
done_testing();
