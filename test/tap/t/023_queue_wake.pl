# A waiter that reaches the front of the queue while the lease is held by
# somebody who got it through a wait of their own is granted at that
# holder's expiry, by itself, with no reaper to help.
#
# The commit of a grant made through a wait wakes the next in line only if
# that waiter would otherwise sleep past the new holder's expiry (wait.c,
# DsyncWakeChannelQuiet): a queue then costs one wake-up per hand-off, not
# two.  Where the reaper runs, its clearing of an expired lease wakes the
# queue too and would hide a waiter that oversleeps, so this runs in a
# template database, which dsync serves with no reaper: the waiters' own
# timers are all there is.
#
# h1 takes the lease with a 700 ms ttl; h2 waits for it, then h3 behind h2.
# Nobody releases.  Two cases:
#   - h2 with a 700 ms ttl: h3, asleep for up to 5 s (the cap on one
#     sleep), must be woken by h2's commit to learn the new expiry;
#   - h2 with a 6 s ttl: h3 may sleep on; it wakes at the cap, finds h2
#     holding the lease, and sleeps until h2's expiry;
#   - and a waiter under the new holder's own name, which may extend the
#     lease at once, is woken by that commit whatever its timer.
# In both h3 must be granted at or after h2's expiry and less than 1 s
# after it (a bound on correctness, far from either wrong outcome: 3.6 s
# late in the first case, never in the second).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib '.';
use DsyncTest;

my $node = dsync_node('queue_wake');
my @clients;

END
{
	for my $h (@clients)
	{
		eval { $h->kill_kill(grace => 1) };
	}
}

$node->safe_psql('postgres', 'CREATE DATABASE qw IS_TEMPLATE true');
$node->safe_psql('qw', 'CREATE EXTENSION dsync');
ok( wait_for(
		$node,
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'dsync reaper' AND datname = 'qw'"
	),
	'the template database qw has no reaper');

# A psql client in database qw running one statement in the background.
sub client
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('psql', '-X', '-A', '-t', '-q', '-d', $node->connstr('qw'), '-c',
		'SET client_min_messages = error', '-c', $sql);
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	push @clients, $h;
	return { h => $h, out => \$out, err => \$err };
}

# Wait for a background client to end; its output.
sub finish
{
	my ($c) = @_;
	eval { $c->{h}->finish };
	diag(${ $c->{err} }) if ${ $c->{err} } ne '';
	chomp(my $out = ${ $c->{out} });
	return $out;
}

# A blocking acquire of lease $name: "grant epoch|expiry epoch" once granted.
sub acquire_sql
{
	my ($name, $holder, $ttl, $wait) = @_;
	return "SELECT dsync_acquire('$name', '$holder', '$ttl', '$wait') IS NOT NULL, "
	  . "extract(epoch FROM clock_timestamp()), "
	  . "(SELECT extract(epoch FROM expires_at) FROM dsync_leases "
	  . "WHERE lease = '$name' AND holder = '$holder')";
}

for my $case (['700 ms', 'woken by the commit'], ['6 s', 'waking at its cap'])
{
	my ($h2_ttl, $how) = @$case;
	my $name = "q$h2_ttl";
	$name =~ s/\W//g;

	is($node->safe_psql('qw', "SELECT dsync_acquire('$name', 'h1', '700 ms') IS NOT NULL"),
		't', "h1 holds $name");
	my $h2 = client(acquire_sql($name, 'h2', $h2_ttl, '10 s'));
	ok( wait_for(
			$node,
			"SELECT count(*) = 1 FROM dsync_waiters WHERE name = '$name' AND holder = 'h2'",
			30, 'qw'),
		'h2 waits');
	my $h3 = client(acquire_sql($name, 'h3', '30 s', '20 s'));
	ok( wait_for(
			$node,
			"SELECT count(*) = 1 FROM dsync_waiters WHERE name = '$name' AND holder = 'h3'",
			30, 'qw'),
		'h3 waits behind h2');

	my ($h2_granted, undef, $h2_expiry) = split /\|/, finish($h2);
	my ($h3_granted, $h3_at) = split /\|/, finish($h3);
	is($h2_granted, 't', "h2 ($h2_ttl) is granted at h1's expiry");
	is($h3_granted, 't', 'h3 is granted');
	my $late = $h3_at - $h2_expiry;
	note(sprintf('h3 granted %.3f s after the expiry of h2 (%s)', $late, $h2_ttl));
	ok($late >= 0 && $late < 1,
		"h3 is granted within 1 s of h2's expiry ($h2_ttl, $how): " . sprintf('%.3f s', $late));
}

# A waiter under the new holder's own name may extend the lease at once
# (a holder that has the lease always gets its extension), so the commit
# wakes it even though it would otherwise sleep on: hb takes the lease
# (6 s ttl) through a wait, and a second session waiting as hb too gets it
# right after, not at the end of its own 5 s sleep.
{
	my $name = 'qsame';
	my $h1_expiry = $node->safe_psql('qw',
		"SELECT dsync_acquire('$name', 'h1', '700 ms') IS NOT NULL, "
		  . "(SELECT extract(epoch FROM expires_at) FROM dsync_leases WHERE lease = '$name')");
	(undef, $h1_expiry) = split /\|/, $h1_expiry;
	my $first = client(acquire_sql($name, 'hb', '6 s', '10 s'));
	ok( wait_for(
			$node,
			"SELECT count(*) = 1 FROM dsync_waiters WHERE name = '$name' AND holder = 'hb'",
			30, 'qw'),
		'hb waits');
	my $second = client(acquire_sql($name, 'hb', '6 s', '20 s'));
	ok( wait_for(
			$node,
			"SELECT count(*) = 2 FROM dsync_waiters WHERE name = '$name' AND holder = 'hb'",
			30, 'qw'),
		'a second session waits as hb behind it');
	my ($first_granted) = split /\|/, finish($first);
	my ($second_granted, $second_at) = split /\|/, finish($second);
	is($first_granted,  't', 'hb is granted at the expiry of h1');
	is($second_granted, 't', 'the second session waiting as hb is granted');
	my $late = $second_at - $h1_expiry;
	note(sprintf('second hb granted %.3f s after the expiry of h1', $late));
	ok($late >= 0 && $late < 1,
		"the second session waiting as hb is granted within 1 s of h1's expiry: "
		  . sprintf('%.3f s', $late));
}

done_testing();
