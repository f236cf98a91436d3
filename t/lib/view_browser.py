#!/usr/bin/python3
"""Loads the fleet view's HTML page in headless Chromium (Debian's chromium,
chromium-driver and python3-selenium) and prints what it rendered, as JSON.

Usage: /usr/bin/python3 t/lib/view_browser.py URL [DRAWS] [TIMEOUT]

Waits until the page has drawn DRAWS times (default 2: the first fetch and
one auto-refresh, 2 s later), then prints
  {"draws": n, "title": ..., "session": <header text>, "session_class": ...,
   "read": <the header's text of when the view was read>,
   "resources": [every URL the page fetched],
   "tags": [the names of the elements drawn in the page's <main>],
   "dialogs": [the messages of alert(), confirm() or prompt() calls],
   "viewport": <the width of the window's content, CSS pixels>,
   "locks": [{"path": ..., "class": <the section's>, "heading": ...,
              "notes": [...], "header": [th texts],
              "width": <the table's width, scrolled parts included>,
              "rows": [{"class": ..., "cells": [td texts],
                        "titles": [td title attributes],
                        "background": <the first td's computed colour>}]}]}
in a window of 1280 x 900.
Exit status 2 when the browser cannot start, 3 when the page never drew.
"""

import json
import shutil
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def browser(profile):
    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--window-size=1280,900",
                "--user-data-dir=" + profile):
        opts.add_argument(arg)
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(service=Service(driver), options=opts)


def main():
    url = sys.argv[1]
    draws = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 20

    profile = tempfile.mkdtemp(prefix="view-browser-")
    try:
        try:
            drv = browser(profile)
        except Exception as e:  # noqa: BLE001 - any failure to start
            print("cannot start chromium: %s" % e, file=sys.stderr)
            return 2

        try:
            drv.set_page_load_timeout(timeout)
            # a dialog would be script that the data ran: count, not block
            drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {
                "source": "window.__dialogs = [];"
                          "['alert', 'confirm', 'prompt'].forEach(function (f)"
                          " { window[f] = function (m) {"
                          " window.__dialogs.push(String(m)); }; });"})
            drv.get(url)
            deadline = time.time() + timeout
            n = 0
            while time.time() < deadline:
                n = int(drv.find_element(By.TAG_NAME, "body")
                        .get_attribute("data-draws") or 0)
                if n >= draws:
                    break
                time.sleep(0.1)
            if n < draws:
                print("the page drew %d times in %gs" % (n, timeout),
                      file=sys.stderr)
                return 3

            # one script, so that the rows all come from one drawing
            out = drv.execute_script("""
              var s = document.getElementById('session');
              var r = {draws: +document.body.getAttribute('data-draws'),
                        title: document.title,
                        session: s.textContent, session_class: s.className,
                        read: document.getElementById('read').textContent,
                        viewport: document.documentElement.clientWidth,
                        resources: performance.getEntriesByType('resource')
                                   .map(function (e) { return e.name; }),
                        tags: [], dialogs: window.__dialogs || [],
                        locks: []};
              document.querySelectorAll('main *').forEach(function (e) {
                var t = e.tagName.toLowerCase();
                if (r.tags.indexOf(t) < 0) r.tags.push(t);
              });
              document.querySelectorAll('section').forEach(function (sec) {
                var l = {path: sec.getAttribute('data-path'),
                         'class': sec.className,
                         heading: sec.querySelector('h2').textContent,
                         width: sec.querySelector('table').scrollWidth,
                         notes: [], header: [], rows: []};
                sec.querySelectorAll('p').forEach(function (p) {
                  l.notes.push(p.textContent); });
                sec.querySelectorAll('th').forEach(function (th) {
                  l.header.push(th.textContent); });
                sec.querySelectorAll('tr').forEach(function (tr) {
                  var td = tr.querySelectorAll('td');
                  if (!td.length) return;
                  l.rows.push({'class': tr.className,
                               cells: Array.prototype.map.call(td,
                                   function (c) { return c.textContent; }),
                               titles: Array.prototype.map.call(td,
                                   function (c) { return c.title; }),
                               background: getComputedStyle(td[0])
                                           .backgroundColor});
                });
                r.locks.push(l);
              });
              return r;
            """)
            print(json.dumps(out))
            return 0
        finally:
            drv.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
