# Fencing tokens survive crashes and restarts.
#
# API.md: a fencing token is "strictly greater than every token granted
# before it in that database, across restarts, crashes and failover".
# The server runs with synchronous_commit = off and a walwriter that sleeps
# for 10 s, so the tail of the WAL is normally unflushed when we crash: the
# grants the client saw may be lost, but their tokens must never be handed
# out again.  A lease committed with synchronous_commit = on must survive
# the crash unchanged.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dsync'
synchronous_commit = off
wal_writer_delay = '10s'
wal_writer_flush_after = 0
checkpoint_timeout = '1h'
max_wal_size = '1GB'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dsync');
$node->safe_psql('postgres', 'CREATE SEQUENCE crash_ctl');
is($node->safe_psql('postgres', 'SHOW synchronous_commit'),
	'off', 'server runs with synchronous_commit = off');

# Every token any client has seen, and the largest of them.
my $max_seen = 0;
my $n_seen = 0;
my $last_ctl;

sub note_token
{
	my ($token) = @_;
	$max_seen = $token if $token > $max_seen;
	$n_seen++;
	return;
}

# Run $cycles acquire+release cycles, each statement its own (asynchronously
# committed) transaction, as a client would, and finish with a few grants
# that stay held.  Returns the tokens in the order the client received them.
sub churn
{
	my ($tag, $cycles) = @_;
	my $sql = '';
	for my $i (1 .. $cycles)
	{
		my $lease = "churn-$tag-" . ($i % 7);
		$sql .= "SELECT 'tok:' || dsync_acquire('$lease', 'churner', '10 minutes');\n";
		$sql .= "SELECT 'rel:' || dsync_release('$lease', 'churner');\n";
	}
	for my $i (1 .. 5)
	{
		$sql .= "SELECT 'tok:' || dsync_acquire('held-$tag-$i', 'churner', '10 minutes');\n";
	}
	# Control: a plain sequence, used after the last grant, with nothing
	# forcing its WAL out.  Only reported, to show what the crash loses.
	$sql .= "SELECT 'ctl:' || nextval('crash_ctl');\n" for (1 .. 40);
	my $out = $node->safe_psql('postgres', $sql);
	my @tokens = ($out =~ /^tok:(\d+)$/mg);
	my @released = ($out =~ /^rel:(\S+)$/mg);
	is(scalar(@tokens), $cycles + 5, "$tag: every acquire returned a token");
	is(scalar(grep { $_ eq 'true' } @released),
		$cycles, "$tag: every release returned true");
	my $increasing = 1;
	for my $k (1 .. $#tokens)
	{
		$increasing = 0 unless $tokens[$k] > $tokens[ $k - 1 ];
	}
	ok($increasing, "$tag: tokens rise strictly in grant order");
	note_token($_) for @tokens;
	($last_ctl) = ($out =~ /^ctl:(\d+)$/mg)[-1];
	return @tokens;
}

# A lease with a long ttl, committed synchronously: it must survive.
my $keeper_token = $node->safe_psql('postgres',
	"SET synchronous_commit = on; SELECT dsync_acquire('long-lease', 'keeper', '1 hour');"
);
like($keeper_token, qr/^\d+$/, 'long lease granted');
note_token($keeper_token);

# Check the long lease after a restart: same holder, same token, and a
# reentrant acquire keeps the token.
sub check_keeper
{
	my ($what) = @_;
	is($node->safe_psql('postgres', "SELECT dsync_leader('long-lease')"),
		'keeper', "$what: long lease still held by its holder");
	is( $node->safe_psql(
			'postgres',
			"SELECT holder || ' ' || fencing FROM dsync_leases WHERE lease = 'long-lease'"
		),
		"keeper $keeper_token",
		"$what: dsync_leases shows the long lease with its token");
	is( $node->safe_psql(
			'postgres',
			"SET synchronous_commit = on; SELECT dsync_acquire('long-lease', 'keeper', '1 hour');"
		),
		$keeper_token,
		"$what: reentrant acquire by the holder returns the same token");
	is( $node->safe_psql(
			'postgres',
			"SELECT dsync_acquire('long-lease', 'intruder', '1 hour') IS NULL"),
		't',
		"$what: another holder cannot take the long lease");
	return;
}

# After a restart, new grants must beat every token seen so far.
sub check_new_tokens
{
	my ($what) = @_;
	my $out = $node->safe_psql('postgres',
		join('',
			map { "SELECT dsync_acquire('after-$what-$_', 'newcomer', '10 minutes');\n" }
			  (1 .. 3)));
	my @new = split /\n/, $out;
	is(scalar(@new), 3, "$what: three new grants after restart");
	my $min_new = (sort { $a <=> $b } @new)[0];
	cmp_ok($min_new, '>', $max_seen,
		"$what: new tokens ($min_new..) are above every token seen before ($max_seen, $n_seen tokens)"
	);
	note_token($_) for @new;
	return;
}

for my $round (1 .. 3)
{
	my @tokens = churn("crash$round", 300);
	# Only this round's final grants: a churn cycle of an earlier round
	# whose release was lost in that round's crash (while its acquire was
	# flushed, by whichever process flushed WAL then) is legitimately
	# still held.
	my $acked_rows = $node->safe_psql('postgres',
		"SELECT count(*) FROM dsync_leases WHERE holder = 'churner' AND lease LIKE 'held-crash$round-%'");
	is($acked_rows, '5', "round $round: five churn leases held before the crash");

	$node->stop('immediate');
	$node->start;

	# How much of the asynchronously committed work the crash lost is
	# only informational: the guarantees below must hold either way.
	my $kept = $node->safe_psql('postgres',
		"SELECT count(*) FROM dsync_leases WHERE holder = 'churner' AND lease LIKE 'held-crash$round-%'"
	);
	note("round $round: $kept of 5 asynchronously committed final grants survived the crash");
	my $ctl_after = $node->safe_psql('postgres', "SELECT nextval('crash_ctl')");
	note("round $round: control sequence (no forced flush) was at $last_ctl, "
		  . "resumed at $ctl_after"
		  . ($ctl_after <= $last_ctl ? ' (went backwards: WAL was lost)' : ''));

	check_keeper("crash $round");
	check_new_tokens("crash$round");

	# Leases that were held when the crash hit keep whatever token the
	# surviving row has; a reentrant acquire by the holder must not hand
	# out a token that was already given to someone else.
	for my $i (1 .. 5)
	{
		my $t = $node->safe_psql('postgres',
			"SELECT dsync_acquire('held-crash$round-$i', 'churner', '10 minutes')");
		like($t, qr/^\d+$/, "round $round: churner gets held-crash$round-$i after the crash");
		if ($t <= $max_seen)
		{
			# Only acceptable if it is this holder's own, surviving grant.
			is($t, $tokens[ 300 + $i - 1 ],
				"round $round: old token for held-crash$round-$i is the holder's own grant");
		}
		else
		{
			cmp_ok($t, '>', $max_seen,
				"round $round: held-crash$round-$i regranted with a fresh token");
			note_token($t);
		}
	}
	$node->safe_psql('postgres',
		"SET synchronous_commit = on; SELECT dsync_release('held-crash$round-' || i, 'churner') FROM generate_series(1, 5) i"
	);
}

# A clean restart keeps tokens rising too.
churn('clean', 100);
$node->restart;
check_keeper('clean restart');
check_new_tokens('clean');

# And the long lease can still be released normally by its holder.
is( $node->safe_psql(
		'postgres',
		"SET synchronous_commit = on; SELECT dsync_release('long-lease', 'keeper')"),
	't',
	'long lease released by its holder');
is($node->safe_psql('postgres', "SELECT dsync_leader('long-lease') IS NULL"),
	't', 'long lease is free after release');

$node->stop;
done_testing();
