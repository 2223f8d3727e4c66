"""A real job of two nodes on this one machine, each node recorded by its own ``memprobe
record``, and ``memprobe report`` putting them together (issue 28).

The README's torchrun line (``memprobe record -o job/node$K -- torchrun --nnodes=2
--node-rank=$K ...``) runs twice at the same time, K = 0 and 1, one rank per node instead of 8;
the two launchers meet over gloo on 127.0.0.1 (a free port) and each runs one
rank (global ranks 0 and 1) whose DataLoader has fork workers over a list of dicts
(nodes/train.py): 2 workers on node 0, 3 on node 1, every one of them copying what it reads.
The job is recorded once for the module; the tests read it, whole or with a node taken away.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest
from test_faults import Done, Memprobe

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent / "nodes"
WORKERS = {0: 2, 1: 3}  # DataLoader workers per node


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun() -> str:
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip(f"torchrun is not installed next to {sys.executable}")
    return exe


def memprobe(*args: object) -> Done:
    """`memprobe ARGS` called in this process (test_faults.Memprobe.inline): the pages are the
    same, without a process start (~1 CPU-s of imports) for each."""
    return Memprobe(Path.cwd()).inline(*args, timeout=120)


def run_meta(node: Path) -> dict:
    (run,) = (node / "runs").iterdir()
    return json.loads((run / "meta.json").read_text())


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_line(start: str) -> str:
    (line,) = [ln for ln in README.read_text(encoding="utf-8").splitlines() if ln.startswith(start)]
    return line


def as_here(line: str, port: int) -> str:
    """A README line for this machine: one rank per node instead of 8, a free port for 29500."""
    assert "--nproc-per-node=8" in line and "--master-port=29500" in line
    return line.replace("--nproc-per-node=8", "--nproc-per-node=1").replace(
        "--master-port=29500", f"--master-port={port}"
    )


def shell_env(**extra: str) -> dict[str, str]:
    """This interpreter's memprobe and torchrun first on PATH, as an installed memprobe would be;
    the master's address on this machine."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", **extra}
    env["PATH"] = os.pathsep.join([str(HERE), os.path.dirname(torchrun()), os.environ.get("PATH", "")])
    for name in ("SLURM_JOB_ID", "SLURM_NODEID", "SLURM_NNODES", "NODE_RANK", "GROUP_RANK"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JOB/node0 and JOB/node1, recorded at the same time by the README's torchrun line run on
    each node (K its node rank), with each node's worker count after train.py."""
    root = tmp_path_factory.mktemp("nodes")
    shutil.copy(HERE / "train.py", root / "train.py")
    line = as_here(readme_line("memprobe record -o job/node$K -- torchrun"), free_port())
    launchers = [
        subprocess.Popen(
            ["bash", "-c", f"{line} --workers {w}"],
            cwd=root,
            env=shell_env(K=str(k)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k, w in WORKERS.items()
    ]
    outs = []
    try:
        for p in launchers:
            outs.append(p.communicate(timeout=180)[0])
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(launchers, outs, strict=True):
        assert p.returncode == 0, out[-4000:]
    return root / "job"


def page_text(html: str) -> str:
    """The page's text as a reader sees it: no script, no tags, single spaces."""
    html = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html, flags=re.DOTALL)
    return unescape(" ".join(re.sub(r"<[^>]+>", " ", html).split()))


def test_each_node_s_folder_says_which_node_it_is(job: Path) -> None:
    for k in WORKERS:
        node = run_meta(job / f"node{k}")["node"]
        assert node["node_rank"] == k and node["nodes"] == 2
        assert node["host"] == platform.node()


def test_one_page_for_the_job_names_both_nodes_every_rank_and_the_culprit(job: Path) -> None:
    r = memprobe("report", job)
    assert r.code == 0, r.err
    assert f"report: {job / 'report.html'}" in r.out
    host = platform.node()
    assert f"node 0 ({host}): growing" in r.out and f"node 1 ({host}): growing" in r.out
    html = (job / "report.html").read_text(encoding="utf-8")
    text = page_text(html)
    assert (
        f"Growing on each of the 2 nodes, for the same cause on every node: node 0 ({host}): Rank 0's 2 DataLoader workers"
        in text
    )
    assert f"node 1 ({host}): Rank 1's 3 DataLoader workers" in text
    assert "copy-on-access" in text
    # Both ranks in the rank table, each on its node, with its workers.
    assert f"rank 0 node 0 ({host})" in text and f"rank 1 node 1 ({host})" in text
    # Every rank of every node on the one timeline.
    data = json.loads(
        html.split('<script type="application/json" id="memprobe-data">')[1].split("</script>")[0]
    )
    charts = {c["id"]: c for c in data["charts"]}
    names = [t["name"] for t in charts["nodes-ranks"]["data"]]
    assert names == [f"rank 0 · node 0 ({host})", f"rank 1 · node 1 ({host})"]
    # And each node's whole tree on the same clock.
    assert [t["name"] for t in charts["nodes-total"]["data"]] == [f"node 0 ({host})", f"node 1 ({host})"]
    assert "Not every node is reported" not in text


def test_the_library_gives_each_node_s_results_and_summary(job: Path) -> None:
    from memprobe.analysis.runs import analyse_all
    from memprobe.results.job import Job

    loaded = Job.load([job], analyse=analyse_all)
    assert [n.node_rank for n in loaded.nodes] == [0, 1] and loaded.missing == []
    for n in loaded.nodes:
        assert n.summary is not None and n.summary.verdict == "growing"
        workers = [p for p in n.summary.processes or [] if p["kind"] == "dataloader"]
        assert len(workers) == WORKERS[n.node_rank]
        assert {p["rank"] for p in workers} == {n.node_rank}  # the global rank


def test_the_nodes_folders_named_one_by_one_make_the_same_page(job: Path, tmp_path: Path) -> None:
    out = tmp_path / "job.html"
    r = memprobe("report", job / "node0", job / "node1", "-o", out)
    assert r.code == 0, r.err
    text = page_text(out.read_text(encoding="utf-8"))
    assert "Growing on each of the 2 nodes" in text


def test_a_node_whose_folder_is_missing_is_named_and_the_rest_reported(job: Path, tmp_path: Path) -> None:
    lost = tmp_path / "lost"
    shutil.copytree(job / "node0", lost / "node0")
    r = memprobe("report", lost)
    assert r.code == 0, r.err
    assert "node 1: no folder for it" in r.out
    text = page_text((lost / "report.html").read_text(encoding="utf-8"))
    assert "Not every node is reported in full: node 1: no folder for it (the job has 2 nodes)" in text
    assert "Growing on the one node read" in text and "Rank 0's 2 DataLoader workers" in text


def test_a_node_whose_recording_never_started_is_named_and_the_rest_reported(
    job: Path, tmp_path: Path
) -> None:
    cut = tmp_path / "cut"
    shutil.copytree(job / "node1", cut / "node1")
    (cut / "node0").mkdir()  # memprobe was killed there before it wrote anything
    r = memprobe("report", cut)
    assert r.code == 0, r.err
    text = page_text((cut / "report.html").read_text(encoding="utf-8"))
    assert f"folder node0 ({cut / 'node0'}): no manifest.json" in text
    assert "Rank 1's 3 DataLoader workers" in text


def test_the_readme_s_slurm_lines_record_each_node_and_report_the_job(tmp_path: Path) -> None:
    """The README's ``srun`` line as written, run with a stand-in ``srun`` (nodes/srun: SLURM's
    variables for each node's task, the tasks at once): one rank per node here instead of 8, a
    free port instead of 29500, and MASTER_ADDR set as the README's ``scontrol`` line would."""
    line = as_here(readme_line("srun "), free_port())
    shutil.copy(HERE / "train.py", tmp_path / "train.py")
    env = shell_env()
    done = subprocess.run(
        ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for k in (0, 1):
        node = run_meta(tmp_path / "job" / f"node{k}")["node"]
        assert node["node_rank"] == k and node["nodes"] == 2
        assert node["env"]["SLURM_JOB_ID"] == "4242" and node["env"]["SLURM_PROCID"] == str(k)
    command, *args = readme_line("memprobe report job/").split("#")[0].split()
    assert command == "memprobe"
    r = Memprobe(tmp_path).inline(*args, timeout=120)
    assert r.code == 0, r.err
    text = page_text((tmp_path / "job" / "report.html").read_text(encoding="utf-8"))
    assert "Growing on each of the 2 nodes" in text
    assert "SLURM_JOB_ID 4242" in text


def test_an_elastic_job_whose_nodes_do_not_say_their_rank_is_reported_whole(tmp_path: Path) -> None:
    """torchrun's elastic launch (``--nnodes=2``, a c10d rendezvous, no ``--node-rank``), each
    node recorded by its own ``memprobe record``: neither folder says its node rank (the
    rendezvous numbers the nodes), and each node is told by the global ranks it ran (before:
    "node 0: no folder for it", "node 1: no folder for it", "Not every node is reported in
    full", both folders there). Which folder the rendezvous made node 0 is its own choice."""
    shutil.copy(HERE / "train.py", tmp_path / "train.py")
    port = free_port()
    launchers = [
        subprocess.Popen(
            [
                "memprobe",
                "record",
                "-o",
                f"job/node{k}",
                "--",
                "torchrun",
                "--nnodes=2",
                "--nproc-per-node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                "--rdzv-id=elastic",
                "train.py",
                "--workers",
                str(w),
                "--rows",
                "100000",
            ],
            cwd=tmp_path,
            env=shell_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k, w in WORKERS.items()
    ]
    try:
        outs = [p.communicate(timeout=180)[0] for p in launchers]
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(launchers, outs, strict=True):
        assert p.returncode == 0, out[-4000:]
    job = tmp_path / "job"
    ranks = {}
    for k in WORKERS:
        meta = run_meta(job / f"node{k}")
        assert meta["node"]["node_rank"] is None and meta["node"]["nodes"] == 2
        (ranks[k],) = {p["rank"] for p in meta["processes"] if p["kind"] == "rank"}
    assert sorted(ranks.values()) == [0, 1]  # one node each, as the rendezvous chose
    r = memprobe("report", job)
    assert r.code == 0, r.err
    host = platform.node()
    for rank in ranks.values():
        assert f"node {rank} ({host}): " in r.out
    assert "no folder" not in r.out
    text = page_text((job / "report.html").read_text(encoding="utf-8"))
    assert "Not every node is reported" not in text
    assert "told by its global rank 0: its launcher said none" in text


@pytest.mark.browser
def test_the_job_page_draws_in_a_browser_without_errors(job: Path, tmp_path: Path) -> None:
    """The job's page in headless Chromium (test_report_browser.py's driver): its timeline
    drawn, no console error, nothing fetched from the network; a screenshot for a person to
    look at in test-artifacts/report-nodes.png."""
    from test_report_browser import ARTIFACTS, PAGE_STATE, Chromium, external, find_chromium

    binary = find_chromium()
    if binary is None:
        pytest.skip("no Chromium/Chrome binary found; install chromium to run browser tests")
    page = tmp_path / "job.html"
    assert memprobe("report", job, "-o", page).code == 0
    (tmp_path / "profile").mkdir()
    browser = Chromium(binary, tmp_path / "profile")
    try:
        browser.open_page()
        browser.navigate(page.resolve().as_uri())
        browser.wait_for("document.body.dataset.chartsDrawn !== undefined")
        state = browser.evaluate(PAGE_STATE)
        browser.screenshot(ARTIFACTS / "report-nodes.png", full_page=True)
        assert browser.problems == []
        assert external(browser.requests) == []  # works offline
        assert state["plots"] == state["expected"] == state["drawn"] == state["withData"] == 2
    finally:
        browser.close()


def test_a_job_folder_without_one_readable_node_exits_2_naming_each(tmp_path: Path) -> None:
    (tmp_path / "job" / "node0").mkdir(parents=True)
    (tmp_path / "job" / "node1").mkdir()
    r = memprobe("report", tmp_path / "job")
    assert r.code == 2 and "Traceback" not in r.err
    (line,) = r.err.strip().splitlines()
    assert line.startswith(f"memprobe: error: {tmp_path / 'job'}: no node's results folder could be read (")
    assert f"{tmp_path / 'job' / 'node1'}: no manifest.json" in line
    assert not (tmp_path / "job" / "report.html").exists()
