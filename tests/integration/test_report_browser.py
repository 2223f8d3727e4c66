"""The report in a real browser: headless Chromium loads a report made by a real small run.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on file descriptors 3 and 4), with the standard library only.
Console errors, uncaught exceptions and failed loads are collected from the protocol's events, so
nothing has to be injected into the page. Screenshots go to ``test-artifacts/`` (gitignored)
for a person to look at.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memprobe.analysis.runs import analyse_all
from memprobe.core.series import total_of
from memprobe.pages import folder_page, write_compare
from memprobe.results.folder import ResultSet
from memprobe.run.scenario import parse_scenario
from memprobe.run.session import run_scenario

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
WIDTH, HEIGHT = 1400, 1000


def find_chromium() -> str | None:
    explicit = os.environ.get("MEMPROBE_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


class Chromium:
    """A headless Chromium and one page, over the DevTools protocol on a pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds() -> None:  # in the child: the protocol lives on fds 3 (in) and 4 (out)
            hi_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            hi_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        args = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={WIDTH},{HEIGHT}",
            "about:blank",
        ]
        self.log = profile / "chromium.log"
        with open(self.log, "wb") as log:
            # Popen has no way to put a pipe on fds 3 and 4; wire_fds makes only os calls.
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=False,
                preexec_fn=wire_fds,  # noqa: PLW1509
            )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._replies: dict[int, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        self.problems: list[str] = []
        self.requests: list[str] = []  # every URL the page asked for (offline: only file: and data:)
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session: str | None = None

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for raw in messages:
                self._dispatch(json.loads(raw))

    def _dispatch(self, msg: dict) -> None:
        if "id" in msg:
            with self._lock:
                box = self._replies.get(msg["id"])
            if box is not None:
                box.put(msg)
            return
        self._note_problem(msg)
        self.events.put(msg)

    def _note_problem(self, msg: dict) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            self.problems.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.problems.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            e = params["entry"]
            self.problems.append(f"log ({e.get('source')}): {e.get('text')} {e.get('url', '')}")

    def send(
        self, method: str, params: dict | None = None, *, session: bool = True, timeout: float = 60
    ) -> dict:
        with self._lock:
            self._next_id += 1
            msg_id = self._next_id
            self._replies[msg_id] = box = queue.Queue()
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = box.get(timeout=0.5)
                break
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"chromium exited ({self.proc.returncode}) during {method}: {self.log_tail()}"
                    ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no reply to {method} within {timeout:g} s") from None
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def open_page(self) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, session=False
        )["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )

    def navigate(self, url: str, timeout: float = 60) -> None:
        self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ev = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            if ev.get("method") == "Page.loadEventFired":
                return
        raise TimeoutError(f"{url} did not finish loading within {timeout:g} s")

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{expression!r} still false after {timeout:g} s")

    def screenshot(self, path: Path, *, full_page: bool, max_height: int = 12000) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": WIDTH, "scale": 1, "height": min(size["height"], max_height)},
            )
        data = self.send("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.send("Browser.close", session=False, timeout=5)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        self._reader.join(5)
        os.close(self._from_browser)


PAGE_STATE = """(() => {
  const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
  return {
    expected: Number(document.body.dataset.chartsExpected),
    drawn: Number(document.body.dataset.chartsDrawn || -1),
    chartDivs: document.querySelectorAll('div.chart').length,
    plots: plots.length,
    withSvg: plots.filter(p => p.querySelector('.main-svg')).length,
    withData: plots.filter(p => Array.isArray(p.data) && p.data.length > 0
                               && p.data.some(t => (t.y || []).some(v => v !== null))).length,
    headline: (document.getElementById('headline') || {}).innerText || '',
    overview: (document.getElementById('overview') || {}).innerText || '',
    title: document.title,
  };
})()"""


@pytest.fixture(scope="module")
def chromium_binary() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip(
            "no Chromium/Chrome binary found (looked for "
            f"{', '.join(CANDIDATES)} on PATH and $MEMPROBE_CHROMIUM); install chromium to run browser tests"
        )
    return binary


@pytest.fixture(scope="module")
def real_results(report_results: Path) -> Path:
    """The real results folder the report tests share (tests/conftest.py): list and numpy under
    fork with 2 workers, and a run that failed early."""
    return report_results


@pytest.fixture()
def browser(chromium_binary: str):
    profile = Path(tempfile.mkdtemp(prefix="memprobe-chromium-"))
    b = Chromium(chromium_binary, profile)
    try:
        b.open_page()
        yield b
    finally:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)


def load(browser: Chromium, page: Path) -> dict:
    browser.navigate(page.resolve().as_uri())
    browser.wait_for("document.body.dataset.chartsDrawn !== undefined")
    return browser.evaluate(PAGE_STATE)


def external(urls: list[str]) -> list[str]:
    return [u for u in urls if u.split(":", 1)[0] not in ("file", "data", "blob", "about")]


def test_report_draws_every_chart_without_console_errors(browser: Chromium, real_results: Path) -> None:
    page = folder_page(real_results)
    state = load(browser, page)
    shot = browser.screenshot(ARTIFACTS / "report.png", full_page=True)
    browser.screenshot(ARTIFACTS / "report-top.png", full_page=False)
    assert browser.problems == []
    assert page.resolve().as_uri() in browser.requests and external(browser.requests) == []  # works offline
    assert state["expected"] > 0
    assert state["plots"] == state["expected"] == state["chartDivs"] == state["drawn"]
    assert state["withSvg"] == state["plots"]
    assert state["withData"] == state["plots"]
    assert "list × fork (2 workers):" in state["headline"]
    assert "numpy × fork (2 workers):" in state["headline"]
    assert "copy memory" in state["overview"] or "No run" in state["overview"]
    assert shot.stat().st_size > 10_000


AXIS_STATE = """(() => {
  const specs = JSON.parse(document.getElementById('memprobe-data').textContent).charts;
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  return Array.from(document.querySelectorAll('.run .js-plotly-plot')).map(p => {
    const spec = specs.find(s => s.id === p.id);
    return {id: p.id, title: p.layout.xaxis.title.text,
            time: p.data.every((t, i) => same(t.x, spec.x.time[i])),
            items: p.data.every((t, i) => same(t.x, spec.x.items[i]))};
  });
})()"""


def click_axis(browser: Chromium, axis: str) -> list[dict]:
    browser.evaluate(f"document.querySelector('button[data-axis=\"{axis}\"]').click()")
    browser.wait_for(
        f"document.querySelector('button[data-axis=\"{axis}\"]').getAttribute('aria-pressed') === 'true'"
    )
    # Until Plotly.react has redrawn every chart on that axis (before: a fixed 1 s, a race on a
    # slow machine); a chart that never does fails the test here.
    seconds = "c.title.startsWith('seconds')"
    drawn = f"c.items && !{seconds}" if axis == "items" else f"c.time && {seconds}"
    browser.wait_for(f"{AXIS_STATE}.every(c => {drawn})")
    return browser.evaluate(AXIS_STATE)


def test_report_axis_toggle_redraws_every_run_chart(browser: Chromium, real_results: Path) -> None:
    state = load(browser, folder_page(real_results))
    before = browser.evaluate(AXIS_STATE)
    assert before and all(c["time"] and c["title"].startswith("seconds") for c in before)
    after = click_axis(browser, "items")
    browser.screenshot(ARTIFACTS / "report-items-axis.png", full_page=False)
    # Every per-run chart now draws its points against items fetched, not only its axis title.
    assert [c["id"] for c in after if not (c["items"] and c["title"] == "items fetched")] == []
    assert all(not c["time"] for c in after)  # seconds and items differ on a real run
    back = click_axis(browser, "time")
    assert [c["id"] for c in back if not (c["time"] and c["title"].startswith("seconds"))] == []
    assert browser.problems == []
    assert browser.evaluate(PAGE_STATE)["withSvg"] == state["plots"]


def test_compare_page_draws_without_console_errors(
    browser: Chromium, real_results: Path, tmp_path: Path
) -> None:
    page = write_compare(real_results, real_results, tmp_path / "compare.html")
    state = load(browser, page)
    browser.screenshot(ARTIFACTS / "compare.png", full_page=True)
    assert browser.problems == []
    assert external(browser.requests) == []
    assert state["plots"] == state["expected"] == state["drawn"] > 0
    assert state["withSvg"] == state["plots"]


DECODE_SCENARIO = (
    "{name: browser-decode, decode: {images: 16, width: 64, height: 48, quality: 90}, "
    "decoders: [pillow], modes: [fork, thread], workers: [1], loader: {batch_size: 4, epochs: 2}}"
)

DECODE_STATE = """(() => {
  const plot = id => document.getElementById(id);
  const plots = Array.from(document.querySelectorAll('.run .js-plotly-plot'));
  const rate = plots.filter(p => p.dataset.kind === 'items_rate');
  const cpu = plots.filter(p => p.dataset.kind === 'cpu');
  return {
    rate: rate.map(p => ({right: ((p.layout.yaxis2 || {}).title || {}).text || '',
                          rightTicks: p.querySelectorAll('.yaxislayer-above .y2tick, .y2tick').length,
                          names: p.data.map(t => t.name)})),
    cpu: cpu.map(p => ({names: p.data.map(t => t.name), drawn: !!p.querySelector('.main-svg')})),
    bars: ((plot('c-bars-rate') || {}).layout || {}).yaxis ? plot('c-bars-rate').layout.yaxis.title.text : '',
    headline: document.getElementById('headline').innerText,
  };
})()"""


@pytest.fixture(scope="module")
def decode_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip(
        "skimage", reason="scikit-image builds the JPEGs: pip install 'torch-memprobe[images]'"
    )
    out = tmp_path_factory.mktemp("browser-decode") / "results"
    result = run_scenario(parse_scenario(DECODE_SCENARIO, "browser-decode.yaml"), out, render=False)
    assert [s.status for s in result.summaries] == ["ok", "ok"], [s.error for s in result.summaries]
    return out


def test_decode_report_draws_images_mb_per_s_and_cpu_charts(browser: Chromium, decode_results: Path) -> None:
    state = load(browser, folder_page(decode_results))
    browser.screenshot(ARTIFACTS / "report-decode.png", full_page=True)
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"] == state["withData"]
    decode = browser.evaluate(DECODE_STATE)
    # Each run's throughput reads in images/s with a drawn right axis in encoded MB/s.
    assert len(decode["rate"]) == 2
    assert all(
        r["right"] == "encoded MB/s" and r["rightTicks"] > 0 and r["names"][0] == "images/s"
        for r in decode["rate"]
    ), decode["rate"]
    assert [c["names"][-1] for c in decode["cpu"]] == ["total", "total"] and all(
        c["drawn"] for c in decode["cpu"]
    )
    assert "worker thread 0" in decode["cpu"][1]["names"]  # the thread run is split by thread
    assert decode["bars"] == "images/s"
    assert "pillow × fork (1 worker):" in decode["headline"]
    after = click_axis(browser, "items")
    assert after and all(c["items"] and c["title"] == "images fetched" for c in after)
    assert browser.problems == []


# Each child reads every row's id and name, so that what it copies is well above the 50 MB
# threshold whatever the interpreter: the objects' pages are what is copied, and which objects share
# a page differs between versions. Reading the ids alone of 400,000 rows copied 61 MB per child on
# 3.11 and 37 MB on 3.13 (flat): 3.12's strings are 8 bytes smaller (PEP 623), so "r123456" no
# longer shares pymalloc's 64-byte pools with the dicts. Ids and names of 600,000 rows: 92 MB on
# 3.11, 83 MB on 3.13, 101 MB on 3.13t (a child's private memory, /proc/self/smaps_rollup).
FORKING_JOB = """
import os, time
rows = [{"id": i, "name": f"r{i}"} for i in range(600_000)]  # a list of dicts, built before the fork
time.sleep(0.3)
children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        for _ in range(2):
            total = sum(r["id"] + len(r["name"]) for r in rows)  # reading writes refcounts: copy-on-access
            time.sleep(0.3)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


def recorded(tmp_path_factory: pytest.TempPathFactory, name: str, job: str) -> Path:
    """The results folder of a real `memprobe record` of the Python program ``job``."""
    import sys

    from memprobe.record.command import record

    out = tmp_path_factory.mktemp(name) / "results"
    script = out.parent / "job.py"
    script.write_text(job)
    result = record([sys.executable, str(script)], out, render=False, log=lambda s: None)
    assert result.exit_code == 0, result.status
    return out


@pytest.fixture(scope="module")
def record_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `memprobe record` of a small job whose two forked children copy its list of dicts."""
    return recorded(tmp_path_factory, "browser-record", FORKING_JOB)


RECORD_STATE = """(() => ({
  culprit: (document.getElementById('culprit') || {}).innerText || '',
  timelines: Array.from(document.querySelectorAll('[data-kind="timeline"]')).map(p => ({
    drawn: !!p.querySelector('.main-svg'), names: (p.data || []).map(t => t.name)})),
  toggle: !!document.querySelector('button[data-axis]'),
  rows: document.querySelectorAll('#processes tbody tr').length,
}))()"""


def test_record_report_draws_its_own_page(browser: Chromium, record_results: Path) -> None:
    state = load(browser, folder_page(record_results))
    browser.screenshot(ARTIFACTS / "report-record.png", full_page=True)
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"] == state["withData"]
    page = browser.evaluate(RECORD_STATE)
    assert page["culprit"].startswith("GROWING ") and "forked children" in page["culprit"]
    assert page["timelines"] and all(t["drawn"] for t in page["timelines"])
    assert page["toggle"] is False  # no items counted: no items axis to offer
    assert page["rows"] == 3  # main and its two children


def test_compare_of_two_recordings_draws_total_pss_over_seconds(
    browser: Chromium, record_results: Path, tmp_path: Path
) -> None:
    """Issue 40: a recording without item marks (no memprobe.mark()) was drawn at x = 0."""
    page = write_compare(record_results, record_results, tmp_path / "compare.html")
    state = load(browser, page)
    browser.screenshot(ARTIFACTS / "compare-record.png", full_page=True)
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"] == state["withData"] == 1
    chart = browser.evaluate(
        "(() => { const p = document.getElementById('c-compare');"
        " return {title: p.layout.xaxis.title.text, ends: p.data.map(t => Math.max(...t.x))}; })()"
    )
    assert chart["title"] == "seconds since the command started"
    # Each line ends at the recording's last total PSS, seconds after its command started (not 0 items).
    job = analyse_all(ResultSet.load(record_results))[0].recorded
    assert job is not None
    last = float(total_of(job.pss_by_role).dropna().index.max())
    assert last > 0 and chart["ends"] == [pytest.approx(last, abs=1e-3)] * 2
    changed = browser.evaluate("document.getElementById('changed').innerText")
    assert changed.startswith("The workers' copy-on-access stayed at ") and changed.endswith(
        "; both growing."
    )


EPOCHS_JOB = """
import os, time
rows = [{"id": i, "name": f"r{i}"} for i in range(200_000)]  # a list of dicts, built before the forks
kept = []
for epoch in range(5):  # an epoch: two forked children copy it as they read it, and end
    kids = []
    for k in range(2):
        pid = os.fork()
        if pid == 0:
            end = time.time() + 1.5
            while time.time() < end:
                total = sum(r["id"] for r in rows[k * 100_000 :][:100_000])
                time.sleep(0.1)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
    kept.append(bytearray(20_000_000))  # the main process keeps 20 MB an epoch
    time.sleep(0.3)
"""


def test_a_record_page_draws_each_generation_s_peak_and_says_the_time_to_the_limit(
    browser: Chromium, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Five generations of two forked children and a main process keeping 20 MB an epoch: the
    chart of each generation's peak is drawn with the others (no console error), one point a
    generation, the trend through them, and the page says the forecast in words."""
    results = recorded(tmp_path_factory, "browser-epochs", EPOCHS_JOB)
    state = load(browser, folder_page(results))
    browser.screenshot(ARTIFACTS / "report-record-epochs.png", full_page=True)
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"] == state["withData"]
    chart = browser.evaluate(
        """(() => { const p = document.querySelector('.chart[data-kind="epochs"]');
        return p && p.data.map(t => ({name: t.name, x: Array.from(t.x)})); })()"""
    )
    assert chart, "no chart of each generation's peak"
    peaks = next(t for t in chart if t["name"].startswith("peak "))
    assert peaks["x"] == [1, 2, 3, 4, 5]
    assert any(t["name"].startswith("trend +") for t in chart)
    words = browser.evaluate("document.getElementById('forecast-words').innerText")
    assert " per epoch (" in words and "fitted over epochs " in words


WIDE_JOB = """
import os, time
rows = [{"id": i, "name": f"r{i}"} for i in range(100_000)]  # a list of dicts, built before the forks
children = []
for k in range(64):
    pid = os.fork()
    if pid == 0:
        keep = [bytes(1 << 20) for _ in range(20)] if k == 17 else []  # one child grows 20 MB more
        end = time.time() + 2
        while time.time() < end:
            total = sum(r["id"] for r in rows[(k % 4) * 25_000 :][:25_000])  # copy-on-access
            time.sleep(0.2)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


@pytest.fixture(scope="module")
def wide_record_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `memprobe record` of a job that forks 64 children over its list of dicts."""
    return recorded(tmp_path_factory, "browser-wide", WIDE_JOB)


LEGENDS = """Array.from(document.querySelectorAll('.chart[data-kind]')).map(p => ({
  kind: p.dataset.kind, entries: p.querySelectorAll('.legend .traces').length}))"""


def test_a_record_page_of_65_processes_draws_groups_and_lists_every_process(
    browser: Chromium, wide_record_results: Path
) -> None:
    state = load(browser, folder_page(wide_record_results))
    browser.screenshot(ARTIFACTS / "report-record-wide.png", full_page=True)
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"] == state["withData"]
    page = browser.evaluate(RECORD_STATE)
    assert page["rows"] == 65  # the table still lists every process
    (timeline,) = page["timelines"]
    assert timeline["drawn"] and "forked children (64): median, range" in timeline["names"]
    legends = browser.evaluate(LEGENDS)
    # Every legend shows all its entries: none in a scroll box (before: 11 of 65 in one).
    assert legends and all(0 < c["entries"] <= 10 for c in legends), legends


# -- what to do (issue 26): the advice for the cause found, on both pages ------------------------

ADVICE_STATE = """(() => {
  const section = document.getElementById('advice');
  return {
    nav: !!document.querySelector('nav.sections a[href="#advice"]'),
    causes: Array.from(document.querySelectorAll('#advice .cure')).map(c => c.dataset.cause),
    changes: Array.from(document.querySelectorAll('#advice pre.change')).map(p => p.innerText),
    guards: Array.from(document.querySelectorAll('#advice pre.guard')).map(p => p.innerText),
    text: section ? section.innerText : '',
  };
})()"""


def section_shot(browser: Chromium, section: str, path: Path) -> Path:
    """A screenshot of one section of the page, whole."""
    box = browser.evaluate(
        f"(() => {{ const r = document.getElementById('{section}').getBoundingClientRect();"
        " return {y: r.top + window.scrollY, h: r.height}; })()"
    )
    clip = {"x": 0, "y": box["y"], "width": WIDTH, "height": box["h"], "scale": 1}
    data = browser.send(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(data["data"]))
    return path


def test_the_record_page_says_what_to_do_about_copy_on_access(
    browser: Chromium, record_results: Path
) -> None:
    state = load(browser, folder_page(record_results))
    section_shot(browser, "advice", ARTIFACTS / "advice-record.png")
    browser.screenshot(ARTIFACTS / "advice-record-top.png", full_page=False)
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"]
    page = browser.evaluate(ADVICE_STATE)
    assert page["nav"] and page["causes"] == ["copy-on-access"]
    assert "self.records = memprobe.SharedList(self.records)" in page["changes"]
    assert any(c.startswith("import gc; gc.freeze()") for c in page["changes"])
    assert "Cost:" in page["text"] and "docs/performance.md" in page["text"]
    (guard,) = page["guards"]
    assert guard.startswith("def test_dataset_stays_flat(memprobe):") and "result.assert_flat()" in guard


def test_the_scenario_report_says_what_to_do_for_each_cause_and_its_runs(
    browser: Chromium, small_results, tmp_path: Path
) -> None:
    """The report of the shared small session (tests/conftest.py), whose list × fork run grows
    (copy-on-access) and whose list × spawn run is flat but starts each worker with its own copy;
    its numpy and arrow runs (flat under fork) and its thread run are on the page too. (It had a
    session of its own of the same two list runs before: ~41 CPU-s.)"""
    out = Path(shutil.copytree(small_results.root, tmp_path / "results"))  # the shared folder stays as run
    verdicts = {s.run_id: s.verdict for s in small_results.result.summaries}
    assert {r: verdicts[r] for r in ("list-fork-w2", "list-spawn-w2")} == {
        "list-fork-w2": "growing",
        "list-spawn-w2": "flat",
    }, verdicts
    state = load(browser, folder_page(out))
    section_shot(browser, "advice", ARTIFACTS / "advice-scenario.png")
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"]
    page = browser.evaluate(ADVICE_STATE)
    # The fork run's workers only copied (their anonymous RSS did not rise): copy-on-access alone.
    assert page["causes"] == ["copy-on-access", "startup-copy"]
    assert "For list × fork (2 workers): how to stop the growth" in page["text"]
    assert "For list × spawn (2 workers): flat, but each worker starts with its own copy" in page["text"]
    assert any("set_forkserver_preload" in c for c in page["changes"])
    assert any('mode="spawn"' in g and "worker_uss_start_mb <" in g for g in page["guards"])
    assert any('mode="fork"' in g and "assert_flat()" in g for g in page["guards"])


WORKERS_SCENARIO = """\
name: browser-workers
dataset: {records: 20000}
backends: [numpy]
modes: [fork, thread]
workers: [0, 1, 2]
repeats: 2
loader: {batch_size: 64, items: 1920}
timeout_s: 120
"""

WORKERS_STATE = """(() => {
  const p = document.getElementById('c-workers');
  const bars = Array.from(p.querySelectorAll('g.errorbar'));
  return {
    traces: p.data.filter(t => t.error_y).map(t => ({name: t.name, yaxis: t.yaxis, y: t.y,
                                                      array: t.error_y.array, minus: t.error_y.arrayminus || null})),
    errorbars: bars.length,
    drawnBars: bars.filter(b => b.querySelector('path') && b.querySelector('path').getAttribute('d')).length,
    answer: (document.getElementById('workers-answer') || {}).innerText || '',
    table: document.getElementById('workers-table').innerText,
  };
})()"""


@pytest.fixture(scope="module")
def workers_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("browser-workers") / "results"
    result = run_scenario(parse_scenario(WORKERS_SCENARIO, "browser-workers.yaml"), out, render=False)
    assert all(s.status == "ok" for s in result.summaries), [s.error for s in result.summaries]
    return out


def test_the_workers_chart_draws_its_error_bars(browser: Chromium, workers_results: Path) -> None:
    """The "How many workers" chart: every point's std (and pale, min-max) error bar is drawn,
    from the spreads summary.json states."""
    state = load(browser, folder_page(workers_results))
    top = browser.evaluate("document.getElementById('workers').getBoundingClientRect().top + window.scrollY")
    shot = browser.send(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": top - 10, "width": WIDTH, "height": 1700, "scale": 1},
        },
    )
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report-workers.png").write_bytes(
        base64.b64decode(shot["data"])
    )  # the section, for a person
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"] == state["withData"]
    workers = browser.evaluate(WORKERS_STATE)
    summary = json.loads((workers_results / "summary.json").read_text())
    spreads = {(g["mode"], g["workers"]): g["items_per_s"] for g in summary["repeats"]}
    rate = [t for t in workers["traces"] if t["yaxis"] == "y2"]
    by_name = {t["name"]: t for t in rate}
    fork = by_name["fork · numpy"]
    expected = [spreads[("single", 0)], spreads[("fork", 1)], spreads[("fork", 2)]]
    assert fork["y"] == pytest.approx([s["median"] for s in expected], abs=1e-3)
    assert fork["array"] == pytest.approx([s["std"] for s in expected], abs=1e-3)
    pale = by_name["fork · numpy: min-max"]
    assert pale["minus"] == pytest.approx([s["median"] - s["min"] for s in expected], abs=1e-3)
    # 2 curves x 4 panels x 2 traces, each an error bar per point (3 counts): all drawn as SVG.
    assert workers["errorbars"] == 2 * 4 * 2 * 3 and workers["drawnBars"] == workers["errorbars"]
    assert "numpy, fork: the fewest workers within 5 % of the best items/s" in workers["answer"]
    assert "numpy, thread: the fewest workers" in workers["answer"]
    assert "±" in workers["table"]
