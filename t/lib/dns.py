#!/usr/bin/python3
"""A tiny DNS server for the zk_lock tests (python3 stdlib only).

Usage: /usr/bin/python3 t/lib/dns.py --port P --dir D

Answers A queries over UDP from the JSON object in D/names.json
({"zk.test": ["127.0.0.1"], ...}, read again for every query; TTL 1 s);
AAAA and other types of a known name get no answer (NOERROR), unknown
names NXDOMAIN.  While the file D/mute exists, it reads queries and never
answers, as a DNS server behind a partition.  Every query is logged to
D/queries.log as "<name> <type> answered|muted".
"""

import argparse
import json
import os
import socket
import struct


def parse_question(data):
    """(name, qtype, end offset) of the first question."""
    labels, off = [], 12
    while True:
        n = data[off]
        off += 1
        if n == 0:
            break
        labels.append(data[off:off + n].decode("ascii", "replace"))
        off += n
    qtype, _ = struct.unpack(">HH", data[off:off + 4])
    return ".".join(labels).lower(), qtype, off + 4


def answer(data, names):
    qid, flags = struct.unpack(">HH", data[:4])
    name, qtype, end = parse_question(data)
    question = data[12:end]
    addrs = names.get(name)
    rcode = 0 if addrs is not None else 3
    answers = b""
    count = 0
    if addrs and qtype == 1:
        for a in addrs:
            answers += struct.pack(">HHHIH", 0xC00C, 1, 1, 1, 4)
            answers += socket.inet_aton(a)
            count += 1
    rd = flags & 0x0100
    header = struct.pack(">HHHHHH", qid, 0x8080 | rd | rcode, 1, count, 0, 0)
    return header + question + answers, name, qtype


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", args.port))
    log = open(os.path.join(args.dir, "queries.log"), "a", buffering=1)
    while True:
        data, peer = sock.recvfrom(4096)
        try:
            with open(os.path.join(args.dir, "names.json")) as f:
                names = {k.lower(): v for k, v in json.load(f).items()}
        except (OSError, ValueError):
            names = {}
        try:
            reply, name, qtype = answer(data, names)
        except (IndexError, struct.error):
            continue
        if os.path.exists(os.path.join(args.dir, "mute")):
            log.write("%s %d muted\n" % (name, qtype))
            continue
        log.write("%s %d answered\n" % (name, qtype))
        sock.sendto(reply, peer)


if __name__ == "__main__":
    main()
