#!/usr/bin/perl
# Benchmark, run by hand (never by prove): t/bench/scale.pl for two or
# more builds of the module, alternated A B A B ... for --rounds rounds,
# each round one scale.pl run per build with the same arguments; then,
# per build, each row's "pkts/w", "steady/w" and requests, and the medians
# over the rounds of the ratios between the largest and the smallest size
# (issue 38, item 2b: packets per lease change within 2x from 8 to 32
# nginx).
# One run of one size moves by a third from run to run at 32 nginx; judge
# the medians.
#
#   perl t/bench/scale-ab.pl [--rounds 3] NAME=MODULE.so [NAME=MODULE.so
#                            ...] -- [scale.pl arguments]
#
# e.g. the previous main against this build (build the old one in a git
# worktree with t/lib/build.sh, and copy its .so out):
#
#   perl t/bench/scale-ab.pl --rounds 3 A=/tmp/A.so \
#       B=t/build/nginx/objs/ngx_http_zk_lock_module.so -- \
#       --sizes 8,32 --leases 32 --clients fresh --conns 64 --keep 1s \
#       --no-curator --shift 1000
#
# Without --shift, add --seconds 20: in 6 s the few writes, most of them
# as the load starts and stops, move "pkts/w" by half from run to run.

use strict;
use warnings;
use FindBin;
use File::Spec;
use Getopt::Long;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

# scale.pl's arguments, after "--", are its own
my (@ours, @args);
while (@ARGV) {
    my $arg = shift @ARGV;
    if ($arg eq '--') {
        @args = @ARGV;
        last;
    }
    push @ours, $arg;
}
@ARGV = @ours;

my $rounds = 3;
GetOptions('rounds=i' => \$rounds) or exit 2;
$rounds >= 1 or die "--rounds: 1 at least\n";

my @builds;
for my $arg (@ARGV) {
    my ($name, $so) = $arg =~ /^([^=]+)=(.+)$/
        or die "$arg: NAME=MODULE.so expected\n";
    -f $so or die "$so: no such file\n";
    push @builds, [$name, File::Spec->rel2abs($so)];
}
@builds >= 1 or die "no build: NAME=MODULE.so\n";

sub median {
    my @s = sort { $a <=> $b } @_;
    return undef unless @s;
    return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

# per build: the rounds, each { size => [requests, pkts/w, steady/w] }
my %runs;

for my $round (1 .. $rounds) {
    for my $build (@builds) {
        my ($name, $so) = @$build;
        local $ENV{ZK_LOCK_MODULE} = $so;
        open my $fh, '-|', $^X, 't/bench/scale.pl', @args
            or die "scale.pl: $!";
        my %rows;
        while (my $line = <$fh>) {
            my @f = split ' ', $line;
            # nginx L keep clients sessions 200 non-200 cut use writes/r
            # pkts/r pkts/w steady/w ...
            next unless @f >= 13 && $f[0] =~ /^\d+$/ && $f[5] =~ /^\d+$/;
            print "$name round $round: $line";
            $rows{$f[0]} = [$f[5], $f[11], $f[12]];
        }
        close $fh or warn "scale.pl ($name): exit $?\n";
        push @{ $runs{$name} }, \%rows;
    }
}

print "\nmedians of $rounds rounds (largest size against the smallest)\n";
printf "%-12s %10s %10s %14s\n", 'build', 'pkts/w x', 'steady x',
    'requests x';
for my $build (@builds) {
    my $name = $build->[0];
    my (@pw, @st, @rq);
    for my $rows (@{ $runs{$name} }) {
        my @n = sort { $a <=> $b } keys %$rows;
        next unless @n >= 2;
        my ($lo, $hi) = @$rows{ $n[0], $n[-1] };
        push @pw, $hi->[1] / $lo->[1] if $lo->[1] > 0;
        push @st, $hi->[2] / $lo->[2]
            if $lo->[2] =~ /^[\d.]+$/ && $hi->[2] =~ /^[\d.]+$/ && $lo->[2] > 0;
        push @rq, $hi->[0] / $lo->[0] if $lo->[0] > 0;
    }
    my ($p, $t, $r) = (median(@pw), median(@st), median(@rq));
    printf "%-12s %10s %10s %14s   (%s; steady %s)\n", $name,
        map({ defined $_ ? sprintf('%.2f', $_) : '-' } $p, $t, $r),
        join(' ', map { sprintf '%.2f', $_ } @pw),
        @st ? join(' ', map { sprintf '%.2f', $_ } @st) : '-';
}
