#!/usr/bin/env python3
"""The live status page (`?format=html` on a status endpoint) in a real browser: headless
Chromium (Debian's chromium, chromium-driver, python3-selenium) against real hosts.

  dashboard.py --module NGINX_MODULE [--caddy CADDY] [--tower OVERLOAD_PROXY]

nginx with the weir module (hosts.py) serves a wiki under a crawler that walks tool pages from
forwarded addresses network by network, among readers; the policy's `tools-per-net` limit
rejects and bans each /24. On the status page the test waits (each wait bounded) for: the page
live; the limit's passed and rejected rates above zero and moving; its article marked
rejecting; the crawler's networks as its top keys and clients; a ban row. A reset and an unban
clicked on the page answer 200 and take effect (the key's state read back, the ban row gone,
the audit line in the error log); on a read-only status location and on one nginx's access
rules guard, the same clicks show 403 and change nothing. Keys made of hostile bytes (markup,
quotes, entities, a newline, U+202E, invalid UTF-8; hosts.py) are shown as text: each row's
text is the key text the JSON status has, no element is made of them and no script ran. The
page's Content-Security-Policy blocks a script injected into it (and the page itself causes
no violation). Screenshots: desktop, phone and dark, in the test's temporary directory and,
with WEIR_SCREENSHOT_DIR set, also there (dashboard.png, dashboard-phone.png,
dashboard-dark.png). Then the same page from Caddy (its weir_status handler) and from tower's
StatusService (overload_proxy's /_weir) under a little load: live, with its limits, a
concurrency limit's capacity, and the error state once the host is gone.

Exits non-zero with the reason on any failure; every process it started is stopped by pid.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DEBIAN_PYTHON = "/usr/bin/python3"

try:
    import selenium  # noqa: F401
except ImportError:
    # python3-selenium lives in Debian's python: run there when this one is another
    if os.path.exists(DEBIAN_PYTHON) and \
            os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON):
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])

import hosts  # noqa: E402
from hosts import PATHS, TAGS, TOOLS, Failure, check, get  # noqa: E402
import page  # noqa: E402

# One read of everything the page shows that the test looks at (docs of the DOM contract:
# the status page's selectors).
SNAPSHOT = r"""
const text = (e) => e ? e.textContent.trim() : null;
const rows = (t, attr) => [...t.querySelectorAll('tbody tr')].filter(tr => tr.hasAttribute(attr))
  .map(tr => ({id: tr.getAttribute(attr), key: text(tr.querySelector('td.key')),
               count: text(tr.querySelector('td.count')),
               remaining: text(tr.querySelector('td.remaining')),
               actions: [...tr.querySelectorAll('button[data-action]')].map(b => b.dataset.action)}));
const out = {state: document.body.dataset.state || null, updated: text(document.getElementById('updated')),
  error: text(document.getElementById('error')), limits: {}, keys: {}, clients: {}, bans: {},
  capacity: {}, clusters: [], pwned: typeof window.__pwned,
  markup: document.querySelectorAll('table img, table script, table svg, table iframe, table object, table b').length,
  imgs: document.querySelectorAll('img').length};
for (const a of document.querySelectorAll('article.limit[data-limit]')) {
  const r = {rejecting: a.classList.contains('rejecting'), chart: !!a.querySelector('div.chart'),
             canvas: !!a.querySelector('div.chart canvas')};
  for (const k of ['passed', 'delayed', 'rejected']) r[k] = text(a.querySelector(`[data-rate="${k}"]`));
  out.limits[a.dataset.limit] = r;
}
for (const t of document.querySelectorAll('table.keys[data-limit]'))
  out.keys[t.dataset.limit + ' ' + t.dataset.window] = rows(t, 'data-key');
for (const t of document.querySelectorAll('table.clients[data-limit]'))
  out.clients[t.dataset.limit + ' ' + t.dataset.window] = rows(t, 'data-client');
for (const t of document.querySelectorAll('table.bans[data-limit]'))
  out.bans[t.dataset.limit] = rows(t, 'data-key');
for (const a of document.querySelectorAll('article.capacity[data-limit]')) {
  const r = {};
  for (const f of ['in_flight', 'limit', 'queued']) r[f] = text(a.querySelector(`[data-field="${f}"]`));
  out.capacity[a.dataset.limit] = r;
}
for (const a of document.querySelectorAll('article.cluster[data-zone]')) out.clusters.push(a.dataset.zone);
return out;
"""

ACTION_RESULT = r"""
const e = document.getElementById('action-result');
return e ? {status: e.dataset.status || null, text: e.textContent.trim(),
            tags: [...e.querySelectorAll('*')].map(x => x.tagName.toLowerCase())} : null;
"""

NUMBER = re.compile(r"^\d+(\.\d+)?$")


def num(v, what):
    check(isinstance(v, str) and NUMBER.match(v), f"{what}: {v!r} is not a decimal number")
    return float(v)


def rate(v):
    """A rate's text as a number; None while it is not one (unknown: "–")."""
    return float(v) if isinstance(v, str) and NUMBER.match(v) else None


def escape(s):
    """s as a CSS attribute value in double quotes."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Run:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.b = None
        self.facts = []
        self.changed = set()  # keys reset or unbanned from the page
        self.t0 = time.monotonic()

    def snap(self):
        return self.b.js(SNAPSHOT)

    def live(self, url, what, timeout=30):
        self.b.open(url)
        t = time.monotonic()
        said = lambda: self.b.js("return document.body ? document.body.innerText.slice(0, 300) "
                                 ": ''")  # noqa: E731
        # the page comes with body[data-state=loading]: without it this is another document
        check(self.snap()["state"], f"{what}: {url} is not the status page (no "
              f"body[data-state]); it shows: {said()!r}")
        try:
            s = self.b.wait(f"{what}: body[data-state=live]",
                            lambda: (lambda s: (s["state"] == "live", s))(self.snap()), timeout)
        except Failure as e:
            raise Failure(f"{e}; {url} shows: {said()!r}")
        check(s["updated"], f"{what}: #updated is empty while live")
        return time.monotonic() - t

    def act(self, row, action, what, want):
        """Clicks row's `action` button; #action-result once it says `want` (a status)."""
        self.b.js("const e = document.getElementById('action-result');"
                  "if (e) { e.removeAttribute('data-status'); e.textContent = ''; }")
        self.b.click(row, f'button[data-action="{action}"]', what)
        got = self.b.wait(f"{what}: #action-result[data-status]",
                          lambda: (lambda r: (r and r["status"], r))(self.b.js(ACTION_RESULT)), 15)
        # the server's answer: a change's JSON (it names the action), or the refusal's status
        shown = f'"{action}"' in got["text"] if want == 200 else str(want) in got["text"]
        check(got["status"] == str(want) and shown,
              f"{what}: #action-result says {got}, expected data-status {want} and the "
              f"server's answer in its text")
        return got

    def act_on(self, table, action, what, want):
        """Clicks `action` in a row of the tools limit's top keys (1m) or bans whose key is
        banned (the crawler is done with it) and not changed before; (key, #action-result).
        The rows move as the crawler goes on: a row gone under the click is tried again."""
        for _ in range(3):
            def candidates():
                s = self.snap()
                bans = [r["id"] for r in s["bans"].get(TOOLS) or []]
                rows = bans if table == "bans" else \
                    [r["id"] for r in s["keys"].get(f"{TOOLS} 1m") or []]
                keys = [k for k in rows if k in bans and k not in self.changed]
                return keys, {"keys": keys, "rows": rows, "bans": bans}
            key = self.b.wait(f"{what}: a {table} row of a banned key", candidates, 15)["keys"][0]
            sel = (f'table.bans[data-limit="{TOOLS}"]' if table == "bans" else
                   f'table.keys[data-limit="{TOOLS}"][data-window="1m"]')
            try:
                res = self.act(f"{sel} tr[data-key={escape(key)}]", action, f"{what} {key}", want)
            except page.RowGone:
                continue
            self.changed.add(key)
            return key, res
        raise Failure(f"{what}: the rows kept changing under the click")

    # ---- nginx: the write-enabled page ----------------------------------------------------------

    def nginx(self, site, load, hostile):
        b = self.b
        took = self.live(site.url("/status?format=html"), "nginx /status")
        meta = b.js("const m = [...document.querySelectorAll('meta[http-equiv]')].find(m => "
                    "m.httpEquiv.toLowerCase() === 'content-security-policy');"
                    "return m ? m.content : null;")
        check(meta and "connect-src 'self'" in meta and "sha256-" in meta,
              f"the page's meta Content-Security-Policy: {meta!r}")
        # the same policy as a header, which can also forbid framing
        header = page_header(site.status_port, "/status?format=html",
                             "Content-Security-Policy") or ""
        directives = lambda p: {d.strip() for d in p.split(";") if d.strip()}  # noqa: E731
        check(directives(meta) <= directives(header) and "frame-ancestors 'none'" in header,
              f"Content-Security-Policy header {header!r}, meta {meta!r}")

        def moving():
            s = self.snap()
            lim = s["limits"].get(TOOLS)
            if not lim:
                return False, s["limits"]
            return (rate(lim["passed"]) or 0) > 0 and (rate(lim["rejected"]) or 0) > 0, lim
        first = b.wait(f"article.limit[data-limit={TOOLS}] passed and rejected rates above 0",
                       moving, 30)
        check(first["chart"], f"{TOOLS}: no div.chart in its article")
        b.wait(f"{TOOLS}: a uPlot canvas in div.chart",
               lambda: self.snap()["limits"][TOOLS]["canvas"], 10)
        check(rate(first["delayed"]) is not None, f"{TOOLS} [data-rate=delayed]: {first}")
        # one read of the JSON status a second, from the page's own path
        count = ("return performance.getEntriesByType('resource').map(e => e.name)"
                 ".filter(n => n.includes('format=json'))")
        before, t = b.js(count), time.monotonic()
        time.sleep(3)
        reads, secs = b.js(count), time.monotonic() - t
        url = f"{site.url('/status')}?format=json"
        check(set(reads) == {url} and 0.5 <= (len(reads) - len(before)) / secs <= 2,
              f"the page's reads of the JSON status: {len(reads) - len(before)} in {secs:.1f} s "
              f"({set(reads)}; expected one a second of {url})")
        updated = self.snap()["updated"]
        b.wait("#updated changes with each refresh",
               lambda: (lambda u: (u and u != updated, u))(self.snap()["updated"]), 5)
        second = b.wait(f"{TOOLS}: the rates change between reads",
                        lambda: (lambda lim: ([lim[k] for k in ("passed", "rejected")]
                                              != [first[k] for k in ("passed", "rejected")]
                                              and rate(lim["rejected"]) is not None,
                                              lim))(self.snap()["limits"][TOOLS]), 15)
        b.wait(f"article.limit[data-limit={TOOLS}].rejecting",
               lambda: self.snap()["limits"][TOOLS]["rejecting"], 15)
        rates = (f"{first['passed']}/{first['rejected']} then "
                 f"{second['passed']}/{second['rejected']}")

        # the crawler's networks: top keys and clients, 1 and 15 minutes; bans
        def tops():
            s = self.snap()
            nets = load.networks()
            k1, k15 = s["keys"].get(f"{TOOLS} 1m") or [], s["keys"].get(f"{TOOLS} 15m") or []
            c1 = s["clients"].get(f"{TOOLS} 1m") or []
            bans = s["bans"].get(TOOLS) or []
            ok = k1 and k15 and c1 and bans
            return ok, {"keys_1m": k1, "keys_15m": k15, "clients_1m": c1, "bans": bans,
                        "nets": len(nets)}
        got = b.wait(f"table.keys/clients[data-limit={TOOLS}] rows (1m, 15m) and a "
                     f"table.bans row", tops, 20)
        nets = load.networks()
        for table in ("keys_1m", "keys_15m", "bans"):
            for r in got[table]:
                check(r["id"] in nets and r["key"] == r["id"],
                      f"{TOOLS} {table}: row {r} is not one of the crawler's /24s shown as text")
        for r in got["keys_1m"]:
            check(num(r["count"], "td.count") >= 1 and {"inspect", "reset"} <= set(r["actions"]),
                  f"{TOOLS} top key row: {r}")
        for r in got["clients_1m"]:
            check(f"{r['id'].rsplit('.', 1)[0]}.0/24" in nets,
                  f"{TOOLS} top client {r} is not in a crawler network")
        for r in got["bans"]:
            check(0 < num(r["remaining"], "td.remaining") <= 600 and "unban" in r["actions"],
                  f"{TOOLS} ban row: {r}")
        self.facts.append(f"nginx page live in {took:.1f} s; {TOOLS} passed/rejected per s "
                          f"{rates}, rejecting; {len(got['keys_1m'])} crawler /24s in its top "
                          f"keys, {len(got['bans'])} ban rows")

        # reset a top key, unban a banned one, from the page
        key, _ = self.act_on("keys", "reset", "reset", 200)
        st, body = key_op(site, TOOLS, key)
        check(st == 200 and json.loads(body)["remaining"] >= 5,
              f"{key} after a reset from the page: {st} {body}")
        b.wait(f"the audit line of the reset of {key}",
               lambda: f'resetting key "{key}" of weir limit "{TOOLS}"' in site.error_log(), 5)
        banned, _ = self.act_on("bans", "unban", "unban", 200)
        st, body = key_op(site, TOOLS, banned)
        check(st == 200 and json.loads(body)["banned"] is False,
              f"{banned} after an unban from the page: {st} {body}")
        b.wait(f"the ban row of {banned} gone",
               lambda: (lambda s: (banned not in [r["id"] for r in s["bans"].get(TOOLS, [])],
                                   s["bans"].get(TOOLS)))(self.snap()), 10)
        check(f'lifting ban of key "{banned}" of weir limit "{TOOLS}"' in site.error_log(),
              f"no audit line for the unban of {banned}")
        self.facts.append(f"reset of {key} and unban of {banned} from the page: 200, in effect")
        self.hostile(hostile)
        self.csp()
        self.screenshots(site.url("/status?format=html"))
        return got

    def hostile(self, expect):
        """The hostile keys' rows: exactly the JSON status's key texts, as text."""
        def rows():
            s = self.snap()
            have = {lim: {r["id"]: r["key"] for r in s["keys"].get(f"{lim} 1m") or []}
                    for lim in (TAGS, PATHS)}
            return all(set(have[lim]) >= set(expect[lim]) for lim in have), (have, s)
        have, s = self.b.wait("the hostile keys' rows in table.keys (tags, paths)", rows, 15)
        for lim in (TAGS, PATHS):
            for text, what in expect[lim].items():
                check(have[lim][text] == text,
                      f"{lim} key {what}: td.key shows {have[lim][text]!r}, its data-key and the "
                      f"JSON status {text!r}")
            extra = set(have[lim]) - set(expect[lim])
            check(not extra, f"{lim}: rows for keys never sent: {extra}")
        check("<script>window.__pwned=1</script>" in have[TAGS]
              and "&lt;b&gt;&amp;x" in have[TAGS], f"markup not shown as text: {have[TAGS]}")
        check(s["markup"] == 0 and s["pwned"] == "undefined",
              f"hostile keys made elements or ran: {s['markup']} elements in tables, "
              f"window.__pwned {s['pwned']}")
        stray = self.b.js("return [...document.querySelectorAll('img[src=x], [onerror]')]"
                          ".map(e => e.outerHTML)")
        check(not stray, f"elements from hostile keys: {stray}")
        self.facts.append(f"{sum(map(len, expect.values()))} hostile keys shown as text")

    def csp(self):
        before = self.b.js("return window.__violations")
        check(before == [], f"the page's own content violates its CSP: {before}")
        self.b.js("window.__csp = undefined; const s = document.createElement('script');"
                  "s.textContent = 'window.__csp = 1'; document.body.appendChild(s);")
        got = self.b.wait("a securitypolicyviolation for an injected inline script",
                          lambda: self.b.js("return window.__violations"), 5)
        check(self.b.js("return typeof window.__csp") == "undefined",
              "an injected inline script ran: the CSP did not block it")
        check(any(v["directive"].startswith("script-src") for v in got),
              f"violation events: {got}")
        self.facts.append("an injected script blocked by the CSP")

    def screenshots(self, url):
        """Desktop (1280x900), phone (390x844) and dark (the page loaded with
        prefers-color-scheme: dark), and the hostile keys' rows (in the temporary directory
        only)."""
        b, out = self.b, os.environ.get("WEIR_SCREENSHOT_DIR")
        phone = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
        dark = {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
        wide = None
        for name in ("hostile.png", "dashboard.png", "dashboard-phone.png", "dashboard-dark.png"):
            if name == "hostile.png":
                b.js("document.querySelector(`table.keys[data-limit='${arguments[0]}']`)"
                     ".scrollIntoView()", TAGS)
            elif name == "dashboard-phone.png":
                b.cdp("Emulation.setDeviceMetricsOverride", phone)
            elif name == "dashboard-dark.png":
                b.cdp("Emulation.setEmulatedMedia", dark)
                self.live(url, "the page in dark mode")
            if name != "hostile.png":
                b.js("window.scrollTo(0, 0)")
            time.sleep(1.2)  # one refresh at the new size
            path = b.screenshot(os.path.join(self.work, name))
            print(f"screenshot: {path}", flush=True)
            if name == "dashboard-phone.png":
                wide = b.js("return document.documentElement.scrollWidth")
                b.cdp("Emulation.clearDeviceMetricsOverride")
            if out and name != "hostile.png":
                os.makedirs(out, exist_ok=True)
                shutil.copyfile(path, os.path.join(out, name))
                print(f"screenshot: {os.path.join(out, name)}", flush=True)
        b.cdp("Emulation.setEmulatedMedia", {"features": []})
        self.facts.append(f"screenshots (phone page {wide} px wide at 390)")

    # ---- nginx: where changes are refused ----------------------------------------------------

    def refused(self, site, path, what, html):
        self.live(site.url(f"{path}?format=html"), f"nginx {path}")
        keys = {r["key"]: r["remaining"] for r in
                (json.loads(key_op(site, TOOLS, k)[1]) for k in load_nets(self.snap()))}
        key, res = self.act_on("keys", "reset", f"{what}: reset", 403)
        if html:
            made = set(res["tags"]) & {"html", "head", "title", "body", "h1", "center", "hr"}
            check(not made, f"{what}: nginx's 403 page made elements {made}: {res}")
        ban, _ = self.act_on("bans", "unban", f"{what}: unban", 403)
        after = json.loads(key_op(site, TOOLS, key)[1])
        check(key not in keys or after["remaining"] <= keys[key] + 1,
              f"{what}: {key} changed after a refused reset: {keys.get(key)} -> {after}")
        check(json.loads(key_op(site, TOOLS, ban)[1])["banned"] is True,
              f"{what}: {ban} unbanned by a refused click")
        log = site.error_log()
        check(f'resetting key "{key}"' not in log and f'lifting ban of key "{ban}"' not in log,
              f"{what}: an audit line for a refused change")
        self.facts.append(f"{what}: 403 shown, nothing changed")

    # ---- Caddy and tower ------------------------------------------------------------------

    def other(self, others, name):
        stop = threading.Event()
        threads = others.load(name, stop)
        try:
            return self.other_page(others, name)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)

    def other_page(self, others, name):
        took = self.live(others.page(name), name)

        def shown():
            s = self.snap()
            lim, cap = s["limits"].get("per-ip"), s["capacity"].get("backend")
            ok = (lim and (rate(lim["rejected"]) or 0) > 0 and cap
                  and (rate(cap["in_flight"]) or 0) > 0)
            return ok, s
        s = self.b.wait(f"{name}: per-ip rejecting and article.capacity[data-limit=backend] "
                        f"with requests in flight", shown, 20)
        s = self.b.wait(f"{name}: article.cluster[data-zone=shared]",
                        lambda: (lambda s: ("shared" in s["clusters"], s))(self.snap()), 10)
        cap = s["capacity"]["backend"]
        check(cap["limit"] == "3" and num(cap["in_flight"], "in_flight") <= 3
              and num(cap["queued"], "queued") <= 2, f"{name}: capacity {cap} (max 3, queue 2)")
        check("backend" in s["limits"], f"{name}: no article.limit for the concurrency limit")
        self.facts.append(f"{name} page live in {took:.1f} s with per-ip rejecting, "
                          f"capacity {cap['in_flight']}/{cap['limit']} and its cluster zone")
        return s

    def gone(self, others, name):
        """Stops the host under the open page: the page says so."""
        others.hosts[name].stop()
        s = self.b.wait(f"{name} stopped: body[data-state=error] and #error",
                        lambda: (lambda s: (s["state"] == "error" and s["error"], s))(self.snap()),
                        15)
        self.facts.append(f"{name} stopped: error state ({s['error'][:40]!r})")


def load_nets(snap):
    """The tools limit's keys on the page (top keys of the last minute)."""
    return [r["id"] for r in snap["keys"].get(f"{TOOLS} 1m") or []]


def page_header(port, target, name):
    """A header of the answer to GET target on 127.0.0.1:port."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", target)
        r = c.getresponse()
        r.read()
        return r.getheader(name)
    finally:
        c.close()


def key_op(site, limit, key):
    q = urllib.parse.urlencode({"limit": limit, "key": key})
    return get(site.status_port, f"/status?{q}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", required=True, help="ngx_http_weir_module.so")
    ap.add_argument("--caddy", help="Caddy with the weir plugin (make caddy)")
    ap.add_argument("--tower", help="tower/examples/overload_proxy (cargo build --example)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    for path in [args.module, args.caddy, args.tower]:
        if path and not os.path.exists(path):
            sys.exit(f"dashboard test: {path} not found (make nginx-module caddy; cargo build "
                     f"--release -p weir-tower --example overload_proxy)")

    def on_term(signum, frame):
        raise SystemExit(f"dashboard test: stopped by signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    work = tempfile.mkdtemp(prefix="weir-browser-")
    run = Run(args, work)
    site = load = others = None
    failed = None
    try:
        site = hosts.Site(args.module).start()
        hostile = hosts.send_hostile(site.port)
        load = hosts.Load(site.port).start()
        if args.caddy or args.tower:
            others = hosts.Others(work, args.caddy, args.tower)
        run.b = page.Browser(work)
        run.nginx(site, load, hostile)
        run.refused(site, "/ro/status", "read-only weir_status", html=False)
        run.refused(site, "/guarded/status", "limit_except GET { deny all; }", html=True)
        load.stop()
        counts, nets, errors = load.summary()
        check(not errors, f"load errors: {errors}")
        check(set(counts.get("reader", {})) == {200} and set(counts.get("health", {})) == {200},
              f"readers or health checks limited: {counts}")
        run.facts.append(f"load: {counts} over {nets} crawler /24s")
        for name in [n for n in ("tower", "caddy") if others and n in others.hosts]:
            run.other(others, name)
            run.gone(others, name)
    except (Failure, hosts.frontends.StartError) as e:
        failed = str(e)
    except page.WebDriverException as e:
        failed = f"webdriver: {e.msg}"
    except SystemExit as e:
        failed = str(e.code)
    finally:
        if failed and run.b:
            try:
                print("--- page:", json.dumps(run.snap(), ensure_ascii=False)[:3000])
                run.b.screenshot(os.path.join(work, "failure.png"))
                print(f"screenshot: {work}/failure.png")
            except Exception:
                pass
            print("--- browser console:\n" + "\n".join(run.b.console()[-20:]))
        if failed and site:
            print("--- nginx error log:\n" + site.error_log()[-2000:])
        for name in (others.hosts if failed and others else {}):
            print(f"--- {name} log ({others.hosts[name].dir}):\n" + others.log(name)[-1500:])
        if load:
            load.stop()
        pids = []
        if run.b:
            run.b.quit()
            pids += run.b.pids
        if others:
            pids.append(others.redis.pid)
            others.stop(remove=not failed and not args.keep)
        if site:
            pids += site.pids
            site.stop()
        left = hosts.left_running(pids)
        if left and not failed:
            failed = f"processes still running: {left}"
        if not args.keep and not failed:
            shutil.rmtree(os.path.join(work, "profile"), ignore_errors=True)
    took = time.monotonic() - run.t0
    if failed:
        sys.exit(f"dashboard test: FAILED after {took:.0f} s: {failed}\n"
                 f"(done: {'; '.join(run.facts) or 'nothing'}; files in {work})")
    print(f"dashboard test: ok in {took:.0f} s: " + "; ".join(run.facts))


if __name__ == "__main__":
    main()
