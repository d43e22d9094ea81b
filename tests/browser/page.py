"""Headless Chromium under chromedriver (Debian's chromium, chromium-driver and
python3-selenium), for the dashboard test (dashboard.py).

Every wait is bounded. The browser and its driver are stopped by pid: chromedriver's pid and
those of the browser processes under it, taken when the browser has started and again before
it quits.
"""

import json
import os
import signal
import time

from hosts import Failure, alive, descendants

try:
    from selenium import webdriver
    from selenium.common.exceptions import (NoAlertPresentException,
                                            StaleElementReferenceException, WebDriverException)
    from selenium.webdriver.chrome.service import Service
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"dashboard test: {e}: needs Debian's python3-selenium, run by Debian's "
                     f"/usr/bin/python3 (make setup installs chromium, chromium-driver, "
                     f"python3-selenium)")

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

# Before the page's own scripts: every CSP violation the document reports is kept.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__violations.push({directive: e.effectiveDirective, blocked: e.blockedURI,
                            sample: e.sample, line: e.lineNumber});
});
"""


class RowGone(Failure):
    """The row to click is not on the page (any more)."""


class Browser:
    def __init__(self, workdir, width=1280, height=900):
        self.dir = workdir
        self.pids = []
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--window-size={width},{height}", f"--user-data-dir={workdir}/profile",
                    "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-default-apps", "--mute-audio",
                    "--disable-features=Translate,MediaRouter,OptimizationHints",
                    "--hide-scrollbars", "--force-color-profile=srgb"]:
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.service = Service(executable_path=CHROMEDRIVER,
                               log_path=os.path.join(workdir, "chromedriver.log"))
        try:
            self.driver = webdriver.Chrome(service=self.service, options=opts)
        except WebDriverException as e:
            self._reap()
            raise Failure(f"chromium did not start under chromedriver: {e.msg}")
        self._note_pids()
        self.driver.set_page_load_timeout(30)
        self.driver.set_script_timeout(10)
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                    {"source": RECORD_VIOLATIONS})
        self.shots = []

    def _note_pids(self):
        proc = getattr(self.service, "process", None)
        if proc is not None:
            for pid in [proc.pid] + descendants(proc.pid):
                if pid not in self.pids:
                    self.pids.append(pid)

    def open(self, url):
        try:
            self.driver.get(url)
        except WebDriverException as e:
            raise Failure(f"loading {url}: {e.msg}")

    def js(self, script, *args):
        """Runs script (a function body) in the page; its return value."""
        return self.driver.execute_script(script, *args)

    def wait(self, what, fn, timeout=20.0, every=0.25):
        """fn()'s first truthy value within timeout seconds; else Failure with what fn last
        returned (fn returns (ok, observed) or a value)."""
        end, last = time.monotonic() + timeout, None
        while True:
            try:
                got = fn()
            except StaleElementReferenceException:
                got = None
            ok, last = got if isinstance(got, tuple) else (got, got)
            if ok:
                return last
            if time.monotonic() > end:
                raise Failure(f"{what}: not within {timeout:.0f} s; last seen: {_short(last)}")
            time.sleep(every)

    def click(self, css_row, css_button, what):
        """Clicks the button css_button inside the first element css_row (re-found when the
        page redraws it meanwhile) and accepts a confirmation dialog if one opens."""
        for _ in range(10):
            try:
                rows = self.driver.find_elements("css selector", css_row)
                if not rows:
                    raise RowGone(f"{what}: no {css_row}")
                button = rows[0].find_element("css selector", css_button)
                self.driver.execute_script("arguments[0].scrollIntoView({block:'center'})",
                                           button)
                button.click()
                break
            except StaleElementReferenceException:
                time.sleep(0.1)
            except WebDriverException as e:
                if "not found" in str(e.msg) or "no such element" in str(e.msg):
                    raise Failure(f"{what}: no {css_button} in {css_row}")
                raise
        else:
            raise Failure(f"{what}: the row kept being redrawn under the click")
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            try:
                self.driver.switch_to.alert.accept()
                return True
            except NoAlertPresentException:
                time.sleep(0.1)
        return False

    def cdp(self, cmd, params=None):
        return self.driver.execute_cdp_cmd(cmd, params or {})

    def screenshot(self, path):
        if not self.driver.save_screenshot(path):
            raise Failure(f"screenshot {path} not written")
        self.shots.append(path)
        return path

    def console(self):
        """The browser console's lines so far (for failure messages)."""
        try:
            return [f"{e.get('level')} {e.get('message')}" for e in self.driver.get_log("browser")]
        except WebDriverException:
            return []

    def quit(self):
        try:
            self._note_pids()
        except Exception:
            pass
        try:
            self.driver.quit()
        except Exception:
            pass
        self._reap()

    def _reap(self):
        try:
            self._note_pids()
        except Exception:
            pass
        end = time.monotonic() + 5
        while time.monotonic() < end and any(alive(p) for p in self.pids):
            time.sleep(0.1)
        for pid in self.pids:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def left_running(self):
        return [p for p in self.pids if alive(p)]


def _short(v, n=600):
    try:
        s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= n else s[:n] + "..."
