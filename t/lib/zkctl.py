#!/usr/bin/python3
"""Independent ZooKeeper client for the test harness (python3 + kazoo).

Usage: /usr/bin/python3 t/lib/zkctl.py --hosts H [--timeout S]
           [--auth USER:PASSWORD] COMMAND ...

Every command prints one JSON document on stdout and exits 0; errors print
{"error": "..."} on stderr and exit 2 (wait-gone exits 3 on timeout).

  children PATH          -> ["name", ...]      ([] if PATH does not exist)
  tree PATH              -> ["/p/a", "/p/a/b"] all descendants, sorted
  ephemerals PATH        -> descendants whose stat.ephemeralOwner != 0
  get PATH               -> {"exists": true, "data": str, "ephemeral_owner": int,
                             "version": int, "num_children": int,
                             "ctime": ms, "mtime": ms, "czxid": int}
                            or {"exists": false}
  create PATH [--ephemeral] [--sequence] [--data D] [--makepath]
                         -> {"node": "/created/path"}
  delete PATH [--recursive]
                         -> {"deleted": true|false}  (false: did not exist)
  hold PATH --name NAME --seconds S [--data D] [--session-timeout S]
        Creates EPHEMERAL_SEQUENTIAL PATH/NAME (parents created), prints
        {"node": path, "session_id": hex} as its first line and flushes,
        then keeps the session until S seconds pass, stdin reaches EOF or
        SIGTERM/SIGINT arrives; then closes the session (which deletes the
        node at once; if disconnected, it first waits up to a session
        timeout to reconnect) and exits 0.  Killing it with SIGKILL instead leaves
        the node until the session expires -- use that to test expiry.
  acl PATH               -> ["world:anyone:r", "digest:u:<hash>:cdrwa", ...]
  wait-gone PATH --timeout T
                         -> {"gone": true|false}
  churn PATH --count N [--pause S]
                         -> {"changes": 2N}  N participants in Curator's
        form (EPHEMERAL_SEQUENTIAL PATH/_c_<uuid>-lock-), each created
        and then deleted, S seconds apart: 2N changes of PATH's children
"""

import argparse
import json
import logging
import os
import signal
import struct
import sys
import threading
import time

# Kazoo logs every failed connection attempt at WARNING; tests only want
# our JSON.  ZKCTL_DEBUG=1 turns the chatter back on when diagnosing.
logging.basicConfig(
    level=logging.DEBUG if os.environ.get("ZKCTL_DEBUG") else logging.CRITICAL,
    stream=sys.stderr,
)

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError  # noqa: E402
from kazoo.retry import KazooRetry  # noqa: E402


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def connect(args, session_timeout=10.0, persistent=False):
    # Few, quick connection retries: a test probing a paused/dead server
    # wants a prompt failure. A holder (persistent) instead reconnects
    # forever, like a real lock client riding out a server restart.
    client = KazooClient(
        hosts=args.hosts,
        timeout=session_timeout,
        connection_retry=KazooRetry(max_tries=-1 if persistent else 3,
                                    delay=0.2, max_delay=1),
        command_retry=KazooRetry(max_tries=3, delay=0.2, max_delay=1),
        auth_data=[("digest", args.auth)] if args.auth else None,
    )
    client.start(timeout=args.timeout)
    return client


def join(parent, name):
    return parent.rstrip("/") + "/" + name


def walk(client, path):
    """Yield (path, stat) for every descendant of path, depth first.
    Nodes that vanish while we walk (ephemerals of dying sessions) are
    skipped rather than treated as errors."""
    try:
        names = sorted(client.get_children(path))
    except NoNodeError:
        return
    for name in names:
        child = join(path, name)
        stat = client.exists(child)
        if stat is None:
            continue
        yield child, stat
        yield from walk(client, child)


def cmd_children(client, args):
    try:
        out(sorted(client.get_children(args.path)))
    except NoNodeError:
        out([])


def cmd_tree(client, args):
    out([p for p, _ in walk(client, args.path)])


def cmd_ephemerals(client, args):
    out([p for p, st in walk(client, args.path) if st.ephemeralOwner != 0])


def cmd_get(client, args):
    try:
        data, st = client.get(args.path)
    except NoNodeError:
        out({"exists": False})
        return
    out({
        "exists": True,
        "data": (data or b"").decode("utf-8", "replace"),
        "ephemeral_owner": st.ephemeralOwner,
        "version": st.version,
        "num_children": st.numChildren,
        "ctime": st.ctime,
        "mtime": st.mtime,
        "czxid": st.czxid,
    })


def cmd_create(client, args):
    node = client.create(
        args.path,
        (args.data or "").encode(),
        ephemeral=args.ephemeral,
        sequence=args.sequence,
        makepath=args.makepath,
    )
    out({"node": node})


def cmd_churn(client, args):
    import uuid
    for _ in range(args.count):
        node = client.create("%s/_c_%s-lock-" % (args.path, uuid.uuid4()),
                             b"", ephemeral=True, sequence=True)
        time.sleep(args.pause)
        client.delete(node)
        time.sleep(args.pause)
    out({"changes": 2 * args.count})


def cmd_set(client, args):
    """Set a node's data, creating it; --int stores a 4-byte big-endian
    integer, as Curator's SharedCount does."""
    data = (struct.pack(">i", int(args.data)) if args.int
            else args.data.encode())
    client.ensure_path(args.path)
    client.set(args.path, data)
    out({"node": args.path})


def cmd_acl(client, args):
    acls, _ = client.get_acls(args.path)
    bits = (("c", 4), ("d", 8), ("r", 1), ("w", 2), ("a", 16))
    out(["%s:%s:%s" % (a.id.scheme, a.id.id,
                       "".join(c for c, bit in bits if a.perms & bit))
         for a in acls])


def cmd_delete(client, args):
    try:
        client.delete(args.path, recursive=args.recursive)
        out({"deleted": True})
    except NoNodeError:
        out({"deleted": False})


def cmd_hold(client, args):
    done = threading.Event()

    def stop(*_):
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    node = client.create(
        join(args.path, args.name),
        (args.data or "").encode(),
        ephemeral=True,
        sequence=True,
        makepath=True,
    )
    out({"node": node, "session_id": "%x" % client.client_id[0]})

    def watch_stdin():
        # EOF on stdin means the harness let go of us (or died).
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    # Event.wait in short slices so the signal handler gets to run promptly.
    deadline = time.monotonic() + args.seconds
    while not done.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        done.wait(min(left, 0.2))

    # Closing the session deletes the node at once, but only if we are
    # connected: right after a server restart kazoo may still be
    # reconnecting, and stopping then would leave the node until expiry.
    reconnect_deadline = time.monotonic() + args.session_timeout
    while not client.connected and time.monotonic() < reconnect_deadline:
        time.sleep(0.05)


def cmd_wait_gone(client, args):
    deadline = time.monotonic() + args.wait_timeout
    changed = threading.Event()

    def watcher(_event):
        # Runs on kazoo's callback thread: only signal, never block here.
        changed.set()

    # The watch wakes us on deletion; the short wait also re-checks in case
    # a watch is lost across a reconnect.
    while True:
        changed.clear()
        gone = client.exists(args.path, watch=watcher) is None
        left = deadline - time.monotonic()
        if gone or left <= 0:
            break
        changed.wait(min(left, 0.5))
    out({"gone": gone})
    if not gone:
        sys.exit(3)


def parse_args(argv):
    p = argparse.ArgumentParser(description="ZooKeeper helper for tests")
    p.add_argument("--hosts", required=True)
    p.add_argument("--timeout", type=float, default=5.0,
                   help="connection timeout in seconds")
    p.add_argument("--auth", help="digest credentials, user:password")
    sub = p.add_subparsers(dest="command", required=True)

    for name in ("children", "tree", "ephemerals", "get", "acl"):
        sub.add_parser(name).add_argument("path")

    c = sub.add_parser("create")
    c.add_argument("path")
    c.add_argument("--ephemeral", action="store_true")
    c.add_argument("--sequence", action="store_true")
    c.add_argument("--data")
    c.add_argument("--makepath", action="store_true")

    st = sub.add_parser("set")
    st.add_argument("path")
    st.add_argument("--data", required=True)
    st.add_argument("--int", action="store_true")

    d = sub.add_parser("delete")
    d.add_argument("path")
    d.add_argument("--recursive", action="store_true")

    h = sub.add_parser("hold")
    h.add_argument("path")
    h.add_argument("--name", required=True)
    h.add_argument("--seconds", type=float, required=True)
    h.add_argument("--data")
    h.add_argument("--session-timeout", type=float, default=10.0)

    ch = sub.add_parser("churn")
    ch.add_argument("path")
    ch.add_argument("--count", type=int, required=True)
    ch.add_argument("--pause", type=float, default=0.0)

    w = sub.add_parser("wait-gone")
    w.add_argument("path")
    w.add_argument("--timeout", dest="wait_timeout", type=float,
                   required=True)
    return p.parse_args(argv)


COMMANDS = {
    "children": cmd_children,
    "tree": cmd_tree,
    "ephemerals": cmd_ephemerals,
    "get": cmd_get,
    "acl": cmd_acl,
    "create": cmd_create,
    "set": cmd_set,
    "delete": cmd_delete,
    "hold": cmd_hold,
    "wait-gone": cmd_wait_gone,
    "churn": cmd_churn,
}


def main(argv):
    args = parse_args(argv)
    client = None
    try:
        client = connect(args,
                         session_timeout=getattr(args, "session_timeout", 10.0),
                         persistent=args.command == "hold")
        COMMANDS[args.command](client, args)
    except Exception as e:  # noqa: BLE001 - report anything as JSON
        sys.stderr.write(json.dumps({"error": "%s: %s" % (
            type(e).__name__, e)}) + "\n")
        return 2
    finally:
        if client is not None:
            try:
                client.stop()
                client.close()
            except Exception:  # noqa: BLE001
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
