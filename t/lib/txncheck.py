#!/usr/bin/env python3
"""The creates of an nginx instance that ZooKeeper applied and that the
instance's debug log never saw answered (t/soak.t, SOAK_LOG_LEVEL_A=debug).

Usage: t/lib/txncheck.py <ZooKeeper dataDir> <the instance's error.log>

ZooKeeper's transaction log (read with its TxnLogToolkit) has every node
created, with its session; the module's debug log has the name of every
node whose create it heard answered ("created") or found again by its uuid
after a lost reply ("found lost node").  A node in the first and not in
the second is one that the worker never knew it had: it goes with its
session at best.  Each is printed with the session, the worker that had
the session (from the log's "zookeeper session ... connected" lines), and
when the node was deleted by name or its session closed, if it was; a
worker killed by the test (a SIGKILL loses its replies) explains those of
its own session.
"""

import glob
import os
import re
import subprocess
import sys

JARS = ('zookeeper.jar', 'zookeeper-jute.jar', 'slf4j-api.jar',
        'slf4j-nop.jar', 'commons-cli.jar')
TOOL = 'org.apache.zookeeper.server.persistence.TxnLogToolkit'
TXN = re.compile(r'^(\S+ \S+ \S+ UTC) session (0x[0-9a-f]+) cxid (0x[0-9a-f]+)'
                 r' zxid (0x[0-9a-f]+) (\S+) ?(.*)$')


def short(session):
    return '0x' + session[2:].lstrip('0')


def transactions(datadir):
    cp = ':'.join(os.path.join('/usr/share/java', j) for j in JARS)
    logs = sorted(glob.glob(os.path.join(datadir, 'version-2', 'log.*')),
                  key=lambda p: int(p.rsplit('.', 1)[1], 16))
    for log in logs:
        out = subprocess.run(['java', '-cp', cp, TOOL, log],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = TXN.match(line)
            if m:
                yield m.groups()


def main():
    datadir, errlog = sys.argv[1], sys.argv[2]

    known, prefixes, worker = set(), set(), {}
    with open(errlog, errors='replace') as f:
        for line in f:
            m = re.search(r'zk lock: (?:created|found lost node) "([^"]+)"'
                          r'(?: rc:0)?', line)
            if m and ('rc:0' in line or 'found lost' in line):
                known.add(m.group(1))
                continue
            m = re.search(r'zk lock: create "[^"]*/_c_([0-9a-f]{8})-', line)
            if m:
                prefixes.add(m.group(1))
                continue
            m = re.search(r'\] (\d+)#0: zookeeper session (0x[0-9a-f]+) '
                          r'connected', line)
            if m:
                worker[short(m.group(2))] = m.group(1)

    creates, deleted, closed, last = [], {}, {}, None
    for t, session, cxid, zxid, op, rest in transactions(datadir):
        last = t
        path = rest.split(',', 1)[0]
        if op == 'create2':
            creates.append((t, session, zxid, path))
        elif op == 'delete':
            deleted.setdefault(path, t)
        elif op == 'closeSession':
            closed.setdefault(session, t)

    ours = [c for c in creates
            if c[3].rsplit('/', 1)[1][3:11] in prefixes]
    unknown = [c for c in ours if c[3] not in known]
    for t, session, zxid, path in unknown:
        print('%s %s (worker %s) zxid %s %s; deleted: %s; session closed: %s'
              % (t, session, worker.get(short(session), '?'), zxid, path,
                 deleted.get(path, 'no'), closed.get(session, 'no')))
    print('last transaction %s' % last)
    print('%d creates of the instance, %d unknown to its log'
          % (len(ours), len(unknown)))


if __name__ == '__main__':
    main()
