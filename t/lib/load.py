#!/usr/bin/python3
"""Closed-loop (and open-loop) HTTP load for the zk_lock tests (python3
stdlib only).

Usage: /usr/bin/python3 t/lib/load.py --spec FILE --out FILE

FILE (--spec) is a JSON object:
  {"until": <Unix time>, "stop": <file>, "n0": <first request number>,
   "clients": [{"port": P, "uri": "/path?a=b", "timeout": s,
                "gap": s, "alt_port": P2, "shift": s,
                "rate": r, "offset": s}, ...]}
Each client is a thread that sends its request (HTTP/1.0, a new
connection each time, "&n=<number>" appended to the uri: a number unique
among all the requests of this run), reads the whole response, waits
"gap" seconds (default 0.05) and starts again, until "until" or until
the file "stop" exists (a request that runs then is finished first).  A
request gets "timeout" seconds (default 30) from its start to its end.
A client with "alt_port" and "shift" sends its requests to "alt_port"
instead of "port" every other "shift" seconds from the start of the run:
demand that moves between the servers.

A client with "rate" (requests per second, above 0) is open-loop
instead: it starts a request every 1/rate seconds, the first "offset"
seconds (default 0) after the start of the run, whatever became of the
ones before: each request runs in a thread of its own, on its own
connection ("gap" is not used).  A request that falls due while the
generator is late starts at once, so the rate offered stays "rate" on
average.  Its record has "sched", the Unix time it was due.  Once
"until" has passed (or "stop" exists), it starts no more, and the run
waits for those that are running to end.

When every client is done, --out gets a JSON list, one object per
request: {"n", "client", "port", "uri", "start", "end", "status" (0 when
no response: the connection was closed or reset, or the timeout came),
"lock" (the X-Lock response header, "" if none), "error" (why status is
0, "" otherwise)}.  Start and end are Unix times (float).
"""

import argparse
import http.client
import itertools
import json
import os
import socket
import threading
import time

LOCK = threading.Lock()
COUNTER = None
RESULTS = []


def one(port, uri, timeout):
    rec = {"status": 0, "lock": "", "error": ""}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn._http_vsn, conn._http_vsn_str = 10, "HTTP/1.0"
    deadline = time.time() + timeout
    try:
        conn.request("GET", uri, headers={"Connection": "close"})
        resp = conn.getresponse()
        rec["status"] = resp.status
        rec["lock"] = resp.getheader("X-Lock", "")
        # the body may be cut short (zk_lock_lost abort after the header)
        while resp.read(65536):
            if time.time() >= deadline:
                raise socket.timeout()
    except socket.timeout:
        rec["status"], rec["error"] = 0, "timeout"
    except (OSError, http.client.HTTPException) as e:
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()
    return rec


def request(i, c, n, t0, **extra):
    """Request number n of client i, recorded in RESULTS."""
    sep = "&" if "?" in c["uri"] else "?"
    uri = "%s%sn=%d" % (c["uri"], sep, n)
    start = time.time()
    port = c["port"]
    if c.get("alt_port") and int((start - t0) / c["shift"]) % 2:
        port = c["alt_port"]
    rec = one(port, uri, c.get("timeout", 30))
    rec.update(n=n, client=i, port=port, uri=uri, start=start,
               end=time.time(), **extra)
    with LOCK:
        RESULTS.append(rec)


def client(i, c, until, stop, t0):
    while time.time() < until and not (stop and os.path.exists(stop)):
        with LOCK:
            n = next(COUNTER)
        request(i, c, n, t0)
        time.sleep(c.get("gap", 0.05))


def open_loop(i, c, until, stop, t0):
    """A client with "rate": a request every 1/rate s, each in a thread."""
    period = 1.0 / float(c["rate"])
    first = t0 + float(c.get("offset", 0))
    running = []

    for k in itertools.count():
        sched = first + k * period
        now = time.time()
        if sched > now:
            time.sleep(sched - now)
        if time.time() >= until or (stop and os.path.exists(stop)):
            break
        with LOCK:
            n = next(COUNTER)
        t = threading.Thread(target=request, args=(i, c, n, t0),
                             kwargs={"sched": sched}, daemon=True)
        t.start()
        running.append(t)
        if len(running) > 64:
            running = [t for t in running if t.is_alive()]
    for t in running:
        t.join()


def main():
    global COUNTER
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    COUNTER = itertools.count(spec.get("n0", 1))
    t0 = time.time()
    threads = [threading.Thread(target=open_loop if c.get("rate") else client,
                                args=(i, c, spec["until"], spec.get("stop"),
                                      t0),
                                daemon=True)
               for i, c in enumerate(spec["clients"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(RESULTS, f)
    os.rename(tmp, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
