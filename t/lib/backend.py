#!/usr/bin/python3
"""Instrumented HTTP backend for the zk_lock tests (python3 stdlib only).

Usage: /usr/bin/python3 t/lib/backend.py --port P

Any request (any method) to a path other than /_stats and /_reset:
  key   = query arg "key" (default: the path)
  sleep = query arg, milliseconds to hold the request (default 0)
  id    = query arg, appended to order[key] when handling STARTS
  status= query arg, HTTP status to answer with (default 200)
  w     = query arg: what the request counts for in "inflight" and "max"
          (default 1): the leases of a weighted lock
  hangup= query arg: if 1, the request ends as soon as its client (nginx)
          closes the connection, as an upstream that notices does, and
          counts in "hangups"; at the latest when the next request on
          its key starts, so that a lease that nginx passed on at once
          is never seen held twice for the moment its thread needed to
          wake up
  rec   = query arg: if 1, the call is recorded for /_calls (its start
          and end times, w, id and whether it was hung up on), so that a
          test can compute what was in flight at any instant itself
It counts the request in flight for its whole duration, so the tests can
see how many requests nginx let through at once per key:
  body "ok key=<key> id=<id> inflight=<n>\\n", n = in flight at start,
  including this one (also sent as header X-Inflight).

GET /_stats?key=K -> {"inflight":n,"max":n,"count":n,"order":[...],
                      "hangups":n} for K
GET /_stats       -> {"<key>": {...}, ...} for every key seen
GET /_calls       -> {"<key>": [[start, end, w, id, hungup], ...], ...}: the
                     calls made with rec=1, in the order they started;
                     start and end are Unix times (float), end is null
                     while the call runs
GET /_reset       -> clears everything, answers {"reset":true}

One thread per connection, so sleeping requests really overlap.
"""

import argparse
import json
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

LOCK = threading.Lock()
STATS = {}
CALLS = {}  # key -> [[start, end, w, id, hungup], ...] (rec=1 only)
WATCHED = {}  # key -> [call state, ...]: hangup=1 calls running


def new_entry():
    return {"inflight": 0, "max": 0, "count": 0, "order": [], "hangups": 0}


def entry(key):
    """Caller holds LOCK."""
    if key not in STATS:
        STATS[key] = new_entry()
    return STATS[key]


def finish(key, st, gone):
    """Caller holds LOCK: a call ends, now."""
    e = entry(key)
    e["inflight"] -= st["w"]
    e["count"] += 1
    if gone:
        e["hangups"] += 1
    if st["call"] is not None:
        st["call"][1] = time.time()
        st["call"][4] = gone
    st["ended"] = True


def reap(key):
    """Caller holds LOCK: the hangup=1 calls on key whose client has closed
    (its FIN came before the request that starts now) end first; their
    threads may not have woken up yet."""
    for st in WATCHED.get(key, []):
        if st["ended"]:
            continue
        try:
            data = st["sock"].recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            data = b""
        if not data:
            finish(key, st, True)


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 so nginx upstream keepalive works too; every response has a
    # Content-Length, and HTTP/1.0 or "Connection: close" still close.
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass  # tests read /_stats, not a request log

    def send_body(self, status, body, ctype="text/plain", extra=None):
        data = body.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # nginx gave up on us (client abort, timeout): expected in tests.
            self.close_connection = True

    def drain_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        while length > 0:
            chunk = self.rfile.read(min(length, 65536))
            if not chunk:
                break
            length -= len(chunk)

    def handle_any(self):
        self.drain_body()
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/_stats":
            return self.stats(q)
        if url.path == "/_calls":
            with LOCK:
                doc = {k: [list(c) for c in v] for k, v in CALLS.items()}
            return self.send_body(200, json.dumps(doc) + "\n",
                                  "application/json")
        if url.path == "/_reset":
            with LOCK:
                STATS.clear()
                CALLS.clear()
            return self.send_body(200, '{"reset":true}\n', "application/json")
        return self.work(url.path, q)

    def stats(self, q):
        with LOCK:
            if "key" in q:
                doc = dict(STATS.get(q["key"]) or new_entry())
                doc["order"] = list(doc["order"])
            else:
                doc = {k: dict(v, order=list(v["order"]))
                       for k, v in STATS.items()}
        self.send_body(200, json.dumps(doc) + "\n", "application/json")

    def work(self, path, q):
        key = q.get("key", path)
        rid = q.get("id", "")
        w = int(q.get("w", 1))
        watch = q.get("hangup") == "1"
        st = {"sock": self.connection, "w": w, "call": None, "ended": False}
        with LOCK:
            e = entry(key)
            reap(key)
            e["inflight"] += w
            e["max"] = max(e["max"], e["inflight"])
            if "id" in q:
                e["order"].append(rid)
            n = e["inflight"]
            if q.get("rec") == "1":
                st["call"] = [time.time(), None, w, rid, False]
                CALLS.setdefault(key, []).append(st["call"])
            if watch:
                WATCHED.setdefault(key, []).append(st)
        gone = False
        try:
            if watch:
                gone = self.sleep_unless_gone(float(q.get("sleep", 0)))
            else:
                time.sleep(float(q.get("sleep", 0)) / 1000.0)
        finally:
            with LOCK:
                if watch:
                    WATCHED[key].remove(st)
                gone = gone or st["ended"]
                if not st["ended"]:
                    finish(key, st, gone)
        if gone:
            self.close_connection = True
            return
        self.send_body(int(q.get("status", 200)),
                       "ok key=%s id=%s inflight=%d\n" % (key, rid, n),
                       extra={"X-Inflight": str(n)})

    def sleep_unless_gone(self, ms):
        """Sleeps ms, or less if the client goes away (True then)."""
        end = time.monotonic() + ms / 1000.0
        sock = self.connection
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([sock], [], [], min(left, 0.02))
            if r:
                try:
                    data = sock.recv(1, socket.MSG_PEEK)
                except OSError:
                    return True
                if not data:
                    return True
                time.sleep(min(left, 0.02))  # a pipelined request: wait

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # bursts of hundreds of parallel connects


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args()
    try:
        server = Server((args.host, args.port), Handler)
    except OSError as e:
        # The harness picks the port; exit code 98 (EADDRINUSE) tells it
        # to pick another one.
        sys.stderr.write("backend: cannot bind %s:%d: %s\n"
                         % (args.host, args.port, e))
        return 98
    sys.stderr.write("backend: listening on %s:%d\n" % (args.host, args.port))
    sys.stderr.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
