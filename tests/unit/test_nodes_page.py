"""A job of several nodes (issue 28): what ``record`` writes of its node (``node_identity``),
the nodes' folders read together (``Job.load``) and the job's page (``report/nodes.py``): the
culprit across nodes, a node that differs, a missing node named, the clock offset between
nodes stated, every string from a folder escaped."""

from __future__ import annotations

import dataclasses
import re
from html import unescape
from pathlib import Path

import pytest
from treejobs import rank_job, write_results

from memprobe.analysis import analyse_all
from memprobe.report.nodes import culprit_words, render_job
from memprobe.results.job import Job, launcher_options, node_identity

TORCHRUN = [
    "/venv/bin/torchrun",
    "--nnodes=2",
    "--node-rank",
    "1",
    "--nproc-per-node=8",
    "train.py",
    "--node-rank=7",
]


def test_the_node_rank_and_count_come_from_torchrun_s_own_options() -> None:
    node = node_identity({}, TORCHRUN, "gpu-07")
    # The script's own --node-rank=7 is the script's: torchrun's options end at its script.
    assert node == {"host": "gpu-07", "node_rank": 1, "nodes": 2, "env": {}}
    assert launcher_options(
        ["python", "-m", "torch.distributed.run", "--standalone", "--nnodes", "1:4", "t.py"]
    ) == {
        "standalone": "",
        "nnodes": "1:4",
    }
    assert (
        node_identity({}, ["python", "-m", "torch.distributed.run", "--nnodes=1:4", "t.py"], "h")["nodes"]
        == 4
    )


def test_slurm_s_and_the_launcher_s_variables_name_the_node_where_torchrun_does_not() -> None:
    env = {
        "SLURM_NODEID": "3",
        "SLURM_JOB_ID": "81234",
        "SLURM_PROCID": "3",
        "SLURM_NNODES": "4",
        "HOME": "/x",
    }
    node = node_identity(env, ["python", "train.py"], "n3")
    assert node["node_rank"] == 3 and node["nodes"] == 4
    assert node["env"] == {
        "SLURM_NODEID": "3",
        "SLURM_JOB_ID": "81234",
        "SLURM_PROCID": "3",
        "SLURM_NNODES": "4",
    }
    assert node_identity({"GROUP_RANK": "2", "SLURM_NODEID": "5"}, [], "h")["node_rank"] == 2
    assert node_identity({"NODE_RANK": "1"}, [], "h")["node_rank"] == 1


def test_a_node_rank_that_is_not_a_number_is_no_node_rank() -> None:
    for bad in ("-1", " 2", "1_0", "٣", "9" * 40, ""):
        assert node_identity({"NODE_RANK": bad}, [], "h")["node_rank"] is None
    assert node_identity({}, ["torchrun", "--nnodes=x"], "h")["nodes"] is None


def node_folder(
    root: Path, rank: int, *, growth: tuple[float, float], host: str, started: float, nodes: int = 2
) -> Path:
    meta, samples = rank_job(growth)
    meta["started"] = started
    meta["node"] = {"host": host, "node_rank": rank, "nodes": nodes, "env": {"SLURM_JOB_ID": "81234"}}
    return write_results(root / f"node{rank}", meta, samples)


def words(html: str) -> str:
    """The page's text as a reader sees it: no script, no tags, single spaces."""
    html = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html, flags=re.DOTALL)
    return unescape(" ".join(re.sub(r"<[^>]+>", " ", html).split()))


def page(paths: list[Path]) -> str:
    return words(render_job(Job.load(paths, analyse=analyse_all), "job"))


def test_the_same_culprit_on_every_node_is_said_once_with_each_node_s_words(tmp_path: Path) -> None:
    for k in (0, 1):
        node_folder(tmp_path, k, growth=(150.0, 3.0), host=f"n{k}", started=1_795_000_000.0)
    text = page([tmp_path])
    assert "Growing on each of the 2 nodes, for the same cause on every node: node 0 (n0): Rank 0's 2" in text
    assert "node 1 (n1): Rank 0's 2" in text
    assert "The nodes started within 0.00 s of each other" in text
    assert "Not every node is reported" not in text


def test_a_node_that_differs_is_named_with_its_verdict(tmp_path: Path) -> None:
    node_folder(tmp_path, 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0)
    node_folder(tmp_path, 1, growth=(3.0, 3.0), host="n1", started=1_795_000_000.0)
    node_folder(tmp_path, 2, growth=(150.0, 3.0), host="n2", started=1_795_000_000.0, nodes=3)
    text = page([tmp_path])
    assert "Growing on 2 of 3 nodes (node 0 (n0), node 2 (n2)). Node 1 (n1) differs: flat." in text
    assert "node 1 (n1) (differs): No process grew" in text


def test_a_node_growing_for_another_cause_says_which_not_only_its_verdict(tmp_path: Path) -> None:
    """Both nodes growing, one for another cause: "Node 1 differs: growing" read as a
    contradiction; it says the cause it was judged for."""
    node_folder(tmp_path, 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0)
    node_folder(tmp_path, 1, growth=(150.0, 3.0), host="n1", started=1_795_000_000.0)
    node_folder(tmp_path, 2, growth=(150.0, 3.0), host="n2", started=1_795_000_000.0, nodes=3)
    job = Job.load([tmp_path], analyse=analyse_all)
    odd = next(n for n in job.nodes if n.node_rank == 2)
    assert odd.analysed is not None
    (a,) = odd.analysed
    odd.analysed = [dataclasses.replace(a, summary=dataclasses.replace(a.summary, causes=["main-grows"]))]
    said, _ = culprit_words(job)
    assert said.endswith("Node 2 (n2) differs: growing too, for the main process growing."), said


def test_a_missing_node_is_named_and_the_others_reported(tmp_path: Path) -> None:
    node_folder(tmp_path, 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0, nodes=3)
    node_folder(tmp_path, 2, growth=(150.0, 3.0), host="n2", started=1_795_000_000.0, nodes=3)
    job = Job.load([tmp_path], analyse=analyse_all)
    assert job.missing == [1] and [n.node_rank for n in job.read] == [0, 2]
    text = page([tmp_path])
    assert "Not every node is reported in full: node 1: no folder for it (the job has 3 nodes)" in text
    assert "Growing on each of the 2 nodes" in text


def test_a_folder_named_but_not_there_is_named(tmp_path: Path) -> None:
    node_folder(tmp_path, 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0, nodes=1)
    text = page([tmp_path / "node0", tmp_path / "node9"])
    assert f"folder node9 ({tmp_path / 'node9'}): no such folder" in text


def test_nodes_whose_starts_disagree_are_shifted_and_the_offset_is_stated(tmp_path: Path) -> None:
    node_folder(tmp_path, 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0)
    node_folder(tmp_path, 1, growth=(150.0, 3.0), host="n1", started=1_795_000_030.0)
    job = Job.load([tmp_path], analyse=analyse_all)
    assert [job.offset(n) for n in job.nodes] == [0.0, 30.0]
    text = page([tmp_path])
    assert (
        "The nodes' start times disagree by up to 30.0 s (node 0 (n0) started at +0.00 s; node 1 (n1) started at +30.0 s)"
        in text
    )


def test_every_string_from_a_node_s_folder_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    root = tmp_path / "<b>job"
    node_folder(root, 0, growth=(150.0, 3.0), host=evil, started=1_795_000_000.0)
    meta_path = next((root / "node0" / "runs").iterdir()) / "meta.json"
    import json

    meta = json.loads(meta_path.read_text())
    meta["node"]["env"]["SLURM_JOB_ID"] = evil
    meta_path.write_text(json.dumps(meta))
    html = render_job(Job.load([root], analyse=analyse_all), "<b>job")
    assert evil not in html and "<b>job" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_node_whose_recording_was_interrupted_is_named_and_reported_up_to_then(tmp_path: Path) -> None:
    node_folder(tmp_path, 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0)
    meta, samples = rank_job((150.0, 3.0))
    meta.update(status="interrupted", started=1_795_000_000.0)
    meta["node"] = {"host": "n1", "node_rank": 1, "nodes": 2, "env": {}}
    write_results(tmp_path / "node1", meta, samples)
    text = page([tmp_path])
    assert "node 1 (n1) (" in text and "its recording ended interrupted: reported up to then" in text
    assert "Growing on each of the 2 nodes" in text


def test_a_folder_that_is_not_a_recorded_job_is_no_node_and_is_named(tmp_path: Path) -> None:
    node_folder(tmp_path, 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0, nodes=1)
    meta, samples = rank_job((150.0, 3.0))
    meta["kind"] = "run"
    write_results(tmp_path / "session", meta, samples)
    job = Job.load([tmp_path], analyse=analyse_all)
    assert [n.node_rank for n in job.read] == [0]
    assert f"folder session ({tmp_path / 'session'}): " in page([tmp_path])


def test_two_folders_saying_the_same_node_are_told_apart_by_their_folders(tmp_path: Path) -> None:
    node_folder(tmp_path / "a", 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0, nodes=1)
    node_folder(tmp_path / "b", 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0, nodes=1)
    text = page([tmp_path / "a" / "node0", tmp_path / "b" / "node0"])
    assert "node 0 (n0, folder node0)" in text and "another folder says it is node 0 too" in text


def test_a_hand_edited_node_count_or_rank_is_not_believed(tmp_path: Path) -> None:
    import json

    for k, (rank, nodes) in enumerate([(0, "abc"), (True, 10**12), (-3, 2.5)]):
        node_folder(tmp_path / str(k), 0, growth=(150.0, 3.0), host="h", started=1_795_000_000.0)
        meta_path = next((tmp_path / str(k) / "node0" / "runs").iterdir()) / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["node"].update(node_rank=rank, nodes=nodes)
        meta_path.write_text(json.dumps(meta))
        job = Job.load([tmp_path / str(k) / "node0"], analyse=analyse_all)
        assert job.missing == [] and job.nodes[0].node_count is None
        assert job.nodes[0].node_rank == (0 if k == 0 else None)
        assert "Growing on the one node read" in page([tmp_path / str(k) / "node0"])


def test_a_folder_of_separate_results_is_no_job_and_the_user_is_told_to_name_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`memprobe report reports/` (several `memprobe run` sessions, or records of different
    commands): one line naming why and what to type, exit 2; not a page of "nodes"."""
    from memprobe.cli import main

    runs = tmp_path / "reports"
    for name in ("a", "b"):
        meta, samples = rank_job((150.0, 3.0))
        meta["kind"] = "run"
        write_results(runs / name, meta, samples)
    assert main(["report", str(runs)]) == 2
    err = capsys.readouterr().err
    assert "holds 2 results folders that are not the nodes of one job (a, b: written by 'memprobe run'" in err
    assert f"name one (memprobe report {runs / 'a'})" in err and not (runs / "report.html").exists()

    records = tmp_path / "records"
    for name, command in (("x", ["python", "train.py"]), ("y", ["python", "eval.py"])):
        meta, samples = rank_job((150.0, 3.0))
        meta["command"] = command
        write_results(records / name, meta, samples)
    assert main(["report", str(records)]) == 2
    assert (
        "they recorded different commands and no launcher or scheduler named them" in capsys.readouterr().err
    )


def test_a_job_s_folders_without_node_ranks_are_still_one_job_when_they_ran_one_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memprobe.cli import main

    for name in ("host-a", "host-b"):
        meta, samples = rank_job((150.0, 3.0))
        meta["command"] = ["python", "train.py"]
        meta["node"] = {"host": name, "node_rank": None, "nodes": None, "env": {}}
        write_results(tmp_path / name, meta, samples)
    assert main(["report", str(tmp_path)]) == 0
    assert "Growing on each of the 2 nodes" in capsys.readouterr().out
    assert (tmp_path / "report.html").exists()


def test_each_node_s_total_is_drawn_against_the_memory_it_must_fit_in(tmp_path: Path) -> None:
    """The nodes' chart draws the limit: one line where every node has the same memory, one per
    limit naming its nodes where they differ."""
    from memprobe.report.nodes import context

    def chart_names(mem: dict[int, float]) -> dict[str, list]:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        for k, mb in mem.items():
            meta, samples = rank_job((150.0, 3.0))
            meta.update(started=1_795_000_000.0)
            meta["node"] = {"host": f"n{k}", "node_rank": k, "nodes": 2, "env": {}}
            write_results(root / f"node{k}", meta, samples, environment={"mem_total_mb": mb})
        totals = context(Job.load([root], analyse=analyse_all), "job")["totals"]
        return {t["name"]: t["y"] for t in totals["data"] if "limit" in t["name"]}

    peak = max(
        n.summary.total_pss_peak_mb
        for n in Job.load(
            [node_folder(tmp_path / "x", 0, growth=(150.0, 3.0), host="h", started=0.0).parent],
            analyse=analyse_all,
        ).read
    )
    assert chart_names({0: 2 * peak, 1: 2 * peak}) == {"memory limit": [2 * peak, 2 * peak]}
    lines = chart_names({0: 2 * peak, 1: 3 * peak})
    assert sorted(lines) == ["limit of node 0 (n0)", "limit of node 1 (n1)"]
    assert lines["limit of node 1 (n1)"] == [3 * peak, 3 * peak]
    assert chart_names({0: 100 * peak, 1: 100 * peak}) == {}  # far above: the lines would be flattened
