#!/usr/bin/python3
"""An HTTP/2 client (cleartext, prior knowledge) driven line by line, for
tests that cancel single streams of one connection.

    h2client.py PORT

Commands on stdin, one per line:

    get NAME PATH    open a stream: GET PATH, labelled NAME
    reset NAME       RST_STREAM (CANCEL) on NAME's stream
    close            close the TCP connection at once (no GOAWAY) and exit

Events on stdout, one per line, flushed:

    connected
    status NAME CODE     response headers of NAME
    done NAME            NAME's stream ended (response complete)
    reset NAME CODE      the server reset NAME's stream
    closed               the server closed the connection
    error TEXT

Exits on "close", on EOF of stdin or when the server closes.
"""

import os
import selectors
import socket
import sys

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions


def say(*words):
    sys.stdout.write(' '.join(str(w) for w in words) + '\n')
    sys.stdout.flush()


def split_frames(data):
    """The whole frames in data, and what is left of the next one."""
    frames = []
    while len(data) >= 9:
        end = 9 + int.from_bytes(data[0:3], 'big')
        if len(data) < end:
            break
        frames.append(data[:end])
        data = data[end:]
    return frames, data


def receive(conn, frames):
    """The events of frames, fed one at a time up to a GOAWAY: h2 takes
    the connection as closed at a GOAWAY, and raises ProtocolError at a
    frame after it in the same call, such as the HEADERS of a stream that
    nginx still answers while it closes the connection (a reload)."""
    events = []
    for frame in frames:
        for ev in conn.receive_data(frame):
            events.append(ev)
            if isinstance(ev, h2.events.ConnectionTerminated):
                return events
    return events


def main():
    port = int(sys.argv[1])
    sock = socket.create_connection(('127.0.0.1', port), timeout=10)
    sock.setblocking(False)

    conn = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=True,
                                         header_encoding='utf-8'))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    say('connected')

    streams = {}    # name -> stream id
    names = {}      # stream id -> name
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, 'sock')
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, 'stdin')
    pending = b''
    received = b''

    while True:
        for key, _ in sel.select():
            if key.data == 'stdin':
                chunk = os.read(sys.stdin.fileno(), 4096)
                if not chunk:
                    return
                pending += chunk
                while b'\n' in pending:
                    line, pending = pending.split(b'\n', 1)
                    words = line.decode().split()
                    if not words:
                        continue
                    if words[0] == 'get':
                        sid = conn.get_next_available_stream_id()
                        streams[words[1]] = sid
                        names[sid] = words[1]
                        conn.send_headers(sid, [
                            (':method', 'GET'), (':scheme', 'http'),
                            (':authority', '127.0.0.1:%d' % port),
                            (':path', words[2])], end_stream=True)
                    elif words[0] == 'reset':
                        # a stream that ended meanwhile has nothing to
                        # reset (the server's last frame crossed ours)
                        try:
                            conn.reset_stream(streams[words[1]],
                                              h2.errors.ErrorCodes.CANCEL)
                        except h2.exceptions.StreamClosedError:
                            pass
                    elif words[0] == 'close':
                        sock.close()
                        return
                    else:
                        say('error', 'unknown command', words[0])
            else:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError as e:
                    say('closed', e)
                    return
                if not data:
                    say('closed')
                    return
                received += data
                frames, received = split_frames(received)
                if not frames:
                    continue
                for ev in receive(conn, frames):
                    name = names.get(getattr(ev, 'stream_id', 0))
                    if isinstance(ev, h2.events.ResponseReceived):
                        code = dict(ev.headers).get(':status')
                        say('status', name, code)
                    elif isinstance(ev, h2.events.DataReceived):
                        conn.acknowledge_received_data(
                            ev.flow_controlled_length, ev.stream_id)
                    elif isinstance(ev, h2.events.StreamEnded):
                        say('done', name)
                    elif isinstance(ev, h2.events.StreamReset):
                        say('reset', name, int(ev.error_code))
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        say('closed', 'goaway')
                        return
            out = conn.data_to_send()
            if out:
                sock.setblocking(True)
                sock.sendall(out)
                sock.setblocking(False)


if __name__ == '__main__':
    try:
        main()
    except BrokenPipeError:    # the test stopped reading: nobody to tell
        os._exit(0)
    except Exception as e:    # the test reads it from the event log
        say('error', repr(e))
        sys.exit(1)
