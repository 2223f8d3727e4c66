"""What to do, in a real browser: the record page of a real `memprobe record` and the report of a
real scenario show the advice for the cause found (each fix, its change, its cost, the pytest
guard), drawn without errors. Screenshots of the sections go to ``test-artifacts/`` for a person
to look at."""

from __future__ import annotations

import base64
import shutil
import tempfile
from pathlib import Path

import pytest
from test_report_browser import ARTIFACTS, FORKING_JOB, WIDTH, Chromium, find_chromium, load, recorded

from memprobe.report import write_report
from memprobe.run.scenario import parse_scenario
from memprobe.run.session import run_scenario

pytestmark = pytest.mark.browser

# A list grows under fork (copy-on-access) and each spawn worker starts with its own copy.
SCENARIO = (
    "{name: advice-look, dataset: {records: 200000}, backends: [list], modes: [fork, spawn], "
    "workers: [2], loader: {batch_size: 256}}"
)

ADVICE_STATE = """(() => {
  const section = document.getElementById('advice');
  return {
    nav: !!document.querySelector('nav.sections a[href="#advice"]'),
    causes: Array.from(document.querySelectorAll('#advice .cure')).map(c => c.dataset.cause),
    titles: Array.from(document.querySelectorAll('#advice .cure h3')).map(h => h.innerText),
    changes: Array.from(document.querySelectorAll('#advice pre.change')).map(p => p.innerText),
    guards: Array.from(document.querySelectorAll('#advice pre.guard')).map(p => p.innerText),
    text: section ? section.innerText : '',
  };
})()"""


@pytest.fixture(scope="module")
def chromium_binary() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no Chromium/Chrome binary found; install chromium to run browser tests")
    return binary


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
    browser: Chromium, tmp_path_factory: pytest.TempPathFactory
) -> None:
    results = recorded(tmp_path_factory, "advice-record", FORKING_JOB)
    state = load(browser, write_report(results))
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
    browser: Chromium, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("advice-scenario") / "results"
    result = run_scenario(parse_scenario(SCENARIO, "advice.yaml"), out, render=False)
    verdicts = {s.run_id: s.verdict for s in result.summaries}
    assert verdicts == {"list-fork-w2": "growing", "list-spawn-w2": "flat"}, verdicts
    state = load(browser, write_report(out))
    section_shot(browser, "advice", ARTIFACTS / "advice-scenario.png")
    assert browser.problems == []
    assert state["plots"] == state["expected"] == state["drawn"]
    page = browser.evaluate(ADVICE_STATE)
    assert page["causes"] == ["copy-on-access", "workers-allocate", "startup-copy"]
    assert "For list × fork (2 workers):" in page["text"] or "For list" in page["text"]
    assert any("set_forkserver_preload" in c for c in page["changes"])
    assert any('mode="spawn"' in g and "worker_uss_start_mb <" in g for g in page["guards"])
    assert any('mode="fork"' in g and "assert_flat()" in g for g in page["guards"])
