package ZkLock::Test::Stream;

# The stream layer's tests (t/stream.t, t/stream-faults.t): an HTTP part
# with a location on the stream path, stream servers in front of the
# HTTP backend (an HTTP/1.0 request through the stream proxy is one
# connection, so its count in flight is the count of connections in
# flight), and their access log.
#
#   my $ng = nginx_start(stream_http(), ...,
#       stream => stream_conf($zk->hosts, $port => 'zk_mutex /p;', ...));
#   stream_log_conf()   # its log_format, for a stream block of one's own
#   stream_log($ng)     # "$server_port $status $zk_lock_status ..." lines
#   open_client($port, $uri)   # a raw connection, its request sent

use strict;
use warnings;
use Exporter 'import';
use IO::Socket::INET;
use ZkLock::Test;

our @EXPORT = qw(stream_http stream_log_conf stream_conf stream_log
    open_client);

my $HTTP = <<'EOF';
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /mix {
            zk_semaphore /st/mix leases=3 timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
        location = /zk-status { zk_lock_status_page; }
        location = /zk-metrics { zk_lock_status_page prometheus; }
        location / { return 204; }
    }
EOF

my $LOG = <<'EOF';
    log_format zk '$server_port $status $zk_lock_status $zk_lock_wait_time '
                  '$zk_lock_token $zk_lock_node';
    access_log %%PREFIX%%/logs/stream.log zk;
EOF

sub stream_http { return $HTTP }

# the stream block's log_format and access_log, of stream_log()
sub stream_log_conf { return $LOG }

# a stream server per port: "port" => "directives"
sub stream_conf {
    my ($hosts, %servers) = @_;
    my $conf = "    zk_hosts $hosts;\n$LOG";
    for my $port (sort keys %servers) {
        $conf .= "    server {\n        listen 127.0.0.1:$port;\n"
            . "        $servers{$port}\n"
            . "        proxy_pass %%BACKEND%%;\n    }\n";
    }
    return $conf;
}

sub stream_log { ZkLock::Test::slurp($_[0]->prefix . '/logs/stream.log') }

# a raw connection that sends an HTTP/1.0 request and leaves it waiting
sub open_client {
    my ($port, $uri) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
        Proto => 'tcp', Timeout => 5) or die "connect $port: $!";
    $s->autoflush(1);
    print $s "GET $uri HTTP/1.0\r\n\r\n";
    return $s;
}

1;
