#!/usr/bin/python3
"""An HTTP/3 client for tests that cancel single streams of one QUIC
connection: headless Chromium (Debian's chromium, chromium-driver and
python3-selenium) forced onto QUIC, driven line by line like h2client.py.

    h3_browser.py URL SPKI

Loads URL (https://127.0.0.1:PORT/...), a page served by the nginx under
test that defines, in JavaScript:

    get(name, path)   fetch(path) with an AbortController, labelled name
    reset(name)       abort that fetch: Chromium cancels the request's
                      QUIC stream (STOP_SENDING / RESET_STREAM)
    drain()           returns, and forgets, the events since the last call

Chromium is told to speak QUIC to the page's origin from the first
request (--origin-to-force-quic-on) and to accept the test's self-signed
certificate (SPKI: the base64 SHA-256 of its public key, for
--ignore-certificate-errors-spki-list, which QUIC needs).

Commands on stdin, one per line:

    get NAME PATH    get(NAME, PATH)
    reset NAME       reset(NAME)
    close            quit the browser (the QUIC connection goes) and exit

Events on stdout, one per line, flushed:

    connected PROTO      the page loaded, over PROTO (h3 for HTTP/3)
    status NAME CODE     response headers of NAME
    done NAME PROTO      NAME's response complete, fetched over PROTO
    aborted NAME         NAME's fetch was aborted (reset)
    error TEXT

Exits on "close" or on EOF of stdin; exit status 2 when the browser
cannot start.
"""

import os
import selectors
import shutil
import sys
import tempfile
from urllib.parse import urlsplit

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service


def say(*words):
    sys.stdout.write(' '.join(str(w) for w in words) + '\n')
    sys.stdout.flush()


def browser(profile, origin, spki):
    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--user-data-dir=" + profile,
                "--enable-quic", "--origin-to-force-quic-on=" + origin,
                "--ignore-certificate-errors",
                "--ignore-certificate-errors-spki-list=" + spki):
        opts.add_argument(arg)
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(service=Service(driver), options=opts)


def run(drv, url):
    drv.set_page_load_timeout(20)
    drv.get(url)
    proto = drv.execute_script(
        "var n = performance.getEntriesByType('navigation')[0];"
        "return n ? n.nextHopProtocol : '';")
    say('connected', proto or '-')

    sel = selectors.DefaultSelector()
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    pending = b''
    while True:
        if sel.select(0.02):
            chunk = os.read(sys.stdin.fileno(), 4096)
            if not chunk:
                return
            pending += chunk
            while b'\n' in pending:
                line, pending = pending.split(b'\n', 1)
                words = line.decode().split()
                if not words:
                    continue
                if words[0] == 'get' and len(words) == 3:
                    drv.execute_script("get(arguments[0], arguments[1]);",
                                       words[1], words[2])
                elif words[0] == 'reset' and len(words) == 2:
                    drv.execute_script("reset(arguments[0]);", words[1])
                elif words[0] == 'close':
                    return
                else:
                    say('error', 'unknown command', line.decode())
        for e in drv.execute_script("return drain();"):
            say(e)


def main():
    url, spki = sys.argv[1], sys.argv[2]
    u = urlsplit(url)
    origin = "%s:%d" % (u.hostname, u.port or 443)
    profile = tempfile.mkdtemp(prefix="h3-browser-")
    try:
        try:
            drv = browser(profile, origin, spki)
        except Exception as e:  # noqa: BLE001 - any failure to start
            say('error', 'cannot start chromium:', repr(e))
            return 2
        try:
            run(drv, url)
        except Exception as e:  # noqa: BLE001 - the test reads the log
            say('error', repr(e))
            return 1
        finally:
            drv.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
