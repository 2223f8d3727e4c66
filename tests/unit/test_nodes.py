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

from memprobe.analysis.runs import analyse_all
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


# -- job folders from elsewhere (issue 39) ------------------------------------------------------


def report_job(*args: object) -> int:
    from memprobe.cli import main

    return main(["report", *map(str, args)])


def edit_meta(node: Path, change) -> None:
    import json

    path = next((node / "runs").iterdir()) / "meta.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


def edit_manifest(node: Path, **fields: object) -> None:
    import json

    path = node / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root`` (links not followed): its bytes and when it was last written."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_a_newline_in_a_host_or_folder_name_forges_no_line_on_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host name (meta.json) and a node folder's name are the folder's text: their newlines
    are shown escaped, on the line memprobe prints them on (before: "node 1 (n1): flat ..." was
    printed as a line of its own)."""
    node_folder(
        tmp_path / "job", 0, growth=(150.0, 3.0), host="n0\nnode 1 (n1): FORGED", started=1_795_000_000.0
    )
    meta, samples = rank_job((150.0, 3.0))
    meta["node"] = {"host": "n1", "node_rank": None, "nodes": 2, "env": {}}
    write_results(tmp_path / "job" / "node1\nFORGED: flat", meta, samples)
    assert report_job(tmp_path / "job") == 0
    out, err = capsys.readouterr()
    lines = (out + err).splitlines()
    assert not [line for line in lines if line.startswith(("node 1 (n1): FORGED", "FORGED"))], lines
    assert "node 0 (n0\\nnode 1 (n1): FORGED): growing" in out
    assert "folder node1\\nFORGED: flat (n1): growing" in out


def test_a_node_folder_that_is_a_link_is_named_and_the_folder_it_leads_to_left_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """job/node1 a symbolic link to a node folder elsewhere whose memprobe was killed: not
    followed (before: that folder was finished and rewritten, manifest, meta and Parquet); the
    node named with why and how to report it, the rest of the job reported. Named on the
    command line, the folder it leads to is reported (and finished: the user named it)."""
    job = tmp_path / "job"
    node_folder(job, 0, growth=(150.0, 3.0), host="n0", started=1_795_000_000.0)
    elsewhere = node_folder(
        tmp_path / "elsewhere", 1, growth=(150.0, 3.0), host="n1", started=1_795_000_000.0
    )
    edit_manifest(elsewhere, status="running")  # its memprobe killed: report would finish it
    edit_meta(elsewhere, lambda m: m.update(status="running"))
    (job / "node1").symlink_to(elsewhere)
    before = snapshot(tmp_path / "elsewhere")
    assert report_job(job) == 0
    out = capsys.readouterr().out
    assert snapshot(tmp_path / "elsewhere") == before
    assert f"folder node1: a symbolic link (to {elsewhere}), not followed" in out
    assert "name that folder on the command line to report it" in out
    assert "Growing on the one node read (node 0 (n0))" in out
    assert "a symbolic link (to" in words((job / "report.html").read_text(encoding="utf-8"))

    assert report_job(job / "node0", elsewhere, "-o", tmp_path / "both.html") == 0
    assert "Growing on each of the 2 nodes" in capsys.readouterr().out


def test_the_page_of_nodes_named_through_links_goes_beside_the_links(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`memprobe report l0 l1`, links the user made to nodes' folders elsewhere: job-report.html
    is written beside the links (before: beside the folder the first link leads to, outside the
    folders named)."""
    for k in (0, 1):
        node_folder(tmp_path / "elsewhere", k, growth=(150.0, 3.0), host=f"n{k}", started=1_795_000_000.0)
        (tmp_path / "mine").mkdir(exist_ok=True)
        (tmp_path / "mine" / f"l{k}").symlink_to(tmp_path / "elsewhere" / f"node{k}")
    assert report_job(tmp_path / "mine" / "l0", tmp_path / "mine" / "l1") == 0
    assert f"report: {tmp_path / 'mine' / 'job-report.html'}" in capsys.readouterr().out
    assert not (tmp_path / "elsewhere" / "job-report.html").exists()


def shifted(meta: dict, samples, by: int) -> tuple[dict, object]:
    """A node of rank_job whose global ranks are ``by`` higher (0, 1 -> by, by + 1)."""
    for p in meta["processes"]:
        if p.get("rank", -1) >= 0:
            p["rank"] += by
    meta["ranks"] = {str(int(k) + by): pid for k, pid in meta["ranks"].items()}
    samples = samples.copy()
    samples.loc[samples["rank"] >= 0, "rank"] += by
    return meta, samples


def elastic_node(root: Path, name: str, first_rank: int, host: str, nodes: int = 2) -> Path:
    """A node of an elastic torchrun job (``--nnodes=N``, no ``--node-rank``): its folder says
    the node count and no node rank; its two ranks are the global ranks the rendezvous gave."""
    meta, samples = shifted(*rank_job((150.0, 3.0)), first_rank)
    meta["started"] = 1_795_000_000.0
    meta["node"] = {"host": host, "node_rank": None, "nodes": nodes, "env": {}}
    return write_results(root / name, meta, samples)


def test_nodes_that_do_not_say_their_node_rank_are_numbered_by_their_global_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An elastic torchrun job: both folders there, neither says its node rank (before: "node 0:
    no folder for it", "node 1: no folder for it", "Not every node is reported in full")."""
    elastic_node(tmp_path / "job", "a", 2, "hb")  # global ranks 2 and 3: node 1
    elastic_node(tmp_path / "job", "b", 0, "ha")  # global ranks 0 and 1: node 0
    job = Job.load([tmp_path / "job"], analyse=analyse_all)
    assert [(n.node_rank, n.folder.name) for n in job.nodes] == [(0, "b"), (1, "a")]
    assert job.missing == [] and job.unaccounted == 0
    assert report_job(tmp_path / "job") == 0
    out = capsys.readouterr().out
    assert "node 0 (ha): growing" in out and "node 1 (hb): growing" in out
    assert "no folder" not in out
    text = words((tmp_path / "job" / "report.html").read_text(encoding="utf-8"))
    assert "Not every node is reported" not in text
    assert "node rank 1 (told by its global ranks 2 to 3: its launcher said none)" in text

    # Three nodes of two ranks each, the middle one lost: ranks 0-1 and 4-5 are nodes 0 and 2.
    elastic_node(tmp_path / "three", "x", 0, "h0", nodes=3)
    elastic_node(tmp_path / "three", "y", 4, "h2", nodes=3)
    job = Job.load([tmp_path / "three"], analyse=analyse_all)
    assert [n.node_rank for n in job.nodes] == [0, 2] and job.missing == [1]


def test_folders_that_do_not_say_their_node_are_never_called_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Folders of a 2-node job that say no node rank and whose ranks do not tell it (each holds
    ranks 0 and 1): reported by their folders' names, no node called missing; with one of the two
    folders gone, one node of two is said to have no folder, which one not claimed."""
    for name, host in (("a", "ha"), ("b", "hb")):
        meta, samples = rank_job((150.0, 3.0))
        meta["node"] = {"host": host, "node_rank": None, "nodes": 2, "env": {}}
        write_results(tmp_path / "job" / name, meta, samples)
    assert report_job(tmp_path / "job") == 0
    out = capsys.readouterr().out
    assert "folder a (ha): growing" in out and "folder b (hb): growing" in out
    assert "no folder" not in out

    import shutil

    shutil.rmtree(tmp_path / "job" / "b")
    assert report_job(tmp_path / "job") == 0
    out = capsys.readouterr().out
    assert "1 of the job's 2 nodes has no folder (which cannot be told" in out
    assert "node 0: no folder" not in out and "node 1: no folder" not in out


def test_folders_of_two_jobs_are_not_put_on_one_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Node folders of SLURM jobs 77 and 88 (different commands): exit 2 naming both jobs, no
    page, whether the job folder or the folders one by one are named (before: one job page,
    "Node 1 differs", exit 0). Nodes of one job whose commands differ by their node rank are
    one job."""
    for k, (job_id, script) in enumerate((("77", "train.py"), ("88", "eval.py"))):
        meta, samples = rank_job((150.0, 3.0))
        meta["command"] = ["python", script]
        meta["node"] = {"host": f"n{k}", "node_rank": k, "nodes": 2, "env": {"SLURM_JOB_ID": job_id}}
        write_results(tmp_path / "two" / f"node{k}", meta, samples)
    assert report_job(tmp_path / "two") == 2
    err = capsys.readouterr().err
    assert "they belong to different jobs, SLURM_JOB_ID 77 (node0), 88 (node1)" in err
    assert report_job(tmp_path / "two" / "node0", tmp_path / "two" / "node1", "-o", tmp_path / "p.html") == 2
    assert "not the nodes of one job (they belong to different jobs" in capsys.readouterr().err
    assert not (tmp_path / "two" / "report.html").exists() and not (tmp_path / "p.html").exists()

    for k in (0, 1):
        meta, samples = rank_job((150.0, 3.0))
        meta["command"] = ["torchrun", "--nnodes=2", f"--node-rank={k}", "train.py"]
        meta["node"] = {"host": f"n{k}", "node_rank": k, "nodes": 2, "env": {"SLURM_JOB_ID": "77"}}
        write_results(tmp_path / "one" / f"node{k}", meta, samples)
    assert report_job(tmp_path / "one") == 0
