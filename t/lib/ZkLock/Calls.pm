package ZkLock::Calls;
# The backend's recorded calls (t/lib/backend.py, rec=1: [start, end, w,
# id, hungup]) as leases held over time, for the tests and benchmarks of
# classes and flows:
#
#   my ($mean, $peak) = calls_held($calls, $id, $lo, $hi);
#       leases held on average in [lo, hi) by the calls whose id is $id
#       (undef: all), each counting its w, and the most at once; a call
#       not ended yet runs to hi
#   my $s = calls_reached($calls, $id, $t0, $n);
#       seconds from t0 until $n calls of $id ran at once, undef if never

use strict;
use warnings;
use Exporter 'import';

our @EXPORT = qw(calls_held calls_reached);

sub calls_held {
    my ($calls, $id, $lo, $hi) = @_;
    my ($seat, @ev) = (0);
    for my $c (@$calls) {
        my ($start, $end, $w, $cid) = @$c;
        next if defined $id && $cid ne $id;
        $end //= $hi;
        my $a = $start > $lo ? $start : $lo;
        my $b = $end < $hi ? $end : $hi;
        next unless $b > $a;
        $seat += ($b - $a) * $w;
        push @ev, [ $a, $w ], [ $b, -$w ];
    }
    my ($now, $peak) = (0, 0);
    for my $e (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev) {
        $now += $e->[1];
        $peak = $now if $now > $peak;
    }
    return ($seat / ($hi - $lo), $peak);
}

sub calls_reached {
    my ($calls, $id, $t0, $n) = @_;
    my @ev;
    for my $c (@$calls) {
        my ($start, $end, $w, $cid) = @$c;
        next unless $cid eq $id;
        push @ev, [ $start, 1 ], [ $end // 9e9, -1 ];
    }
    my $now = 0;
    for my $e (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev) {
        $now += $e->[1];
        return $e->[0] - $t0 if $now >= $n && $e->[0] >= $t0;
    }
    return undef;
}

1;
