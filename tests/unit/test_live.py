"""The live view's model (memprobe/live/model.py) from synthetic sampler rows, and what
`memprobe top` shows of it (memprobe/cli/top.py): the screen's lines, NO_COLOR, foreign strings
escaped, and the one line every few seconds where stdout is not a terminal."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest

from memprobe.live.model import LiveModel, rate
from memprobe.live.outlet import Outlet
from memprobe.live.view import Lines, Live, line, render
from memprobe.probe.ledger import ProcessInfo


def info(pid: int, role: str, kind: str, worker: int = -1, forked: bool = False) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        ppid=None,
        role=role,
        kind=kind,
        forked=forked,
        start_method="fork" if forked else None,
        rank=-1,
        worker=worker,
        generation=0 if worker >= 0 else None,
        parent_role=None,
        start_t=0.0,
        first_t=0.0,
        last_t=0.0,
        end_t=None,
        command="python train.py",
    )


FACTS = {
    100: info(100, "main", "main"),
    101: info(101, "worker 0", "dataloader", 0, forked=True),
    102: info(102, "worker 1", "dataloader", 1, forked=True),
}


def exact(t: float, pid: int, role: str, kind: str, pss: float, uss: float, rss: float, anon: float) -> dict:
    return {
        "t": t,
        "pid": pid,
        "role": role,
        "kind": kind,
        "rank": -1,
        "tier": "pss",
        "missing": False,
        "rss_mb": rss,
        "rss_anon_mb": anon,
        "pss_mb": pss,
        "uss_mb": uss,
        "cpu_s": t,
    }


def cheap(t: float, pid: int, role: str, kind: str, rss: float, anon: float, est: float | None) -> dict:
    # as tree_sampler.compact writes a later tick's row: no empty fields
    row = {"t": t, "pid": pid, "role": role, "rank": -1, "tier": "cheap", "missing": False}
    row |= {"rss_mb": rss, "rss_anon_mb": anon, "cpu_s": t, "kind": kind}
    return row | ({"uss_est_mb": est} if est is not None else {})


def job(model: LiveModel, worker_growth_per_s: float, seconds: int = 20) -> None:
    """A main process and two forked workers, read exactly at 0 s, cheap rows once a second
    after, the workers' estimated USS growing at ``worker_growth_per_s``; the cgroup's charge
    rising 10 MB a second."""
    model.feed(
        "samples",
        [
            exact(0.0, 100, "main", "main", pss=300.0, uss=200.0, rss=500.0, anon=250.0),
            exact(0.0, 101, "worker 0", "dataloader", pss=110.0, uss=10.0, rss=400.0, anon=20.0),
            exact(0.0, 102, "worker 1", "dataloader", pss=110.0, uss=10.0, rss=400.0, anon=20.0),
        ],
    )
    model.feed("system", [{"t": 0.0, "cgroup_mb": 1000.0, "cgroup_oom_kills": 3}])
    for s in range(1, seconds + 1):
        t = float(s)
        grown = worker_growth_per_s * t
        model.feed(
            "samples",
            [
                cheap(t, 100, "main", "main", rss=500.0, anon=250.0 + 0.5 * t, est=200.0),
                cheap(
                    t, 101, "worker 0", "dataloader", rss=400.0 + grown, anon=20.0 + grown, est=10.0 + grown
                ),
                cheap(
                    t, 102, "worker 1", "dataloader", rss=400.0 + grown, anon=20.0 + grown, est=10.0 + grown
                ),
            ],
        )
        model.feed("system", [{"t": t, "cgroup_mb": 1000.0 + 10.0 * t, "cgroup_oom_kills": 3}])


def test_the_model_gives_a_row_per_live_process_with_its_figures_and_the_totals():
    model = LiveModel(50.0, 4000.0, "the job's memory limit (cgroup v2 /job)")
    job(model, worker_growth_per_s=1.0)
    view = model.view(FACTS.get)
    assert [(r.pid, r.role, r.worker, r.generation) for r in view.rows] == [
        (100, "main", -1, None),
        (101, "worker 0", 0, 0),
        (102, "worker 1", 1, 0),
    ]
    main, w0, _ = view.rows
    # cheap rows: the USS is the estimate; PSS is the last exact reading carried to now
    assert not w0.exact and w0.uss_mb == 30.0
    assert w0.pss_mb == 110.0 + 20.0  # a worker: plus the USS it gained since
    assert main.pss_mb == 300.0 + 10.0  # another process: plus the anonymous memory it allocated
    assert w0.rate_mb_min is not None and abs(w0.rate_mb_min - 60.0) < 1e-6
    assert main.rate_mb_min is not None and abs(main.rate_mb_min - 30.0) < 1e-6
    assert w0.grown_mb == 30.0  # a forked worker's whole USS is its own
    t = view.totals
    assert (t.processes, t.unread) == (3, 0)
    assert t.total_pss_mb == 310.0 + 130.0 + 130.0
    assert t.sum_rss_mb == 500.0 + 420.0 + 420.0
    assert t.cgroup_mb == 1200.0 and t.oom_kills == 0
    # The summary's rule (record/forecast.py): not the charge's +600 MB/min (the workers' copies,
    # which end with them) but the main process's own rise, once it has been seen for 40 s.
    assert view.limit == "time to the limit: none: too short a record to tell a trend that persists"
    assert view.verdict.startswith("flat so far: workers' USS +30 MB on average since their start")
    assert "fastest: worker 0 (pid 101) at +60 MB/min" in view.verdict
    model = LiveModel(50.0, 4000.0, "the job's memory limit (cgroup v2 /job)")
    job(model, worker_growth_per_s=1.0, seconds=60)
    # +30 MB/min into the 2,400 MB the charge left at 60 s (1,600 MB of 4,000): 80 min.
    assert (
        model.view(FACTS.get).limit == "time to the limit: 4,000 MB in about 80 min: main process +30 MB/min"
    )


def test_the_verdict_so_far_says_growing_above_the_threshold_and_an_exact_reading_is_marked():
    model = LiveModel(50.0, None, "this machine's memory")
    job(model, worker_growth_per_s=5.0)
    model.feed(
        "samples", [exact(20.5, 101, "worker 0", "dataloader", pss=220.0, uss=111.0, rss=500.0, anon=120.0)]
    )
    view = model.view(FACTS.get)
    w0 = next(r for r in view.rows if r.pid == 101)
    assert w0.exact and w0.uss_mb == 111.0 and w0.pss_mb == 220.0
    assert view.verdict.startswith("GROWING so far: workers' USS +")
    assert view.limit == "memory limit: not known"


def test_an_ended_process_leaves_the_rows_and_a_process_never_read_is_not_counted_as_zero():
    model = LiveModel(50.0, None, "")
    job(model, worker_growth_per_s=0.0, seconds=3)
    model.feed(
        "samples",
        [
            {"t": 4.0, "pid": 102, "role": "worker 1", "missing": True, "reason": "exited"},
            cheap(4.0, 103, "worker 2", "dataloader", rss=300.0, anon=10.0, est=None),
        ],
    )
    view = model.view({**FACTS, 103: info(103, "worker 2", "dataloader", 2, forked=True)}.get)
    assert [r.pid for r in view.rows] == [100, 101, 103]
    assert view.ended == 1
    assert view.totals.unread == 1 and view.totals.total_pss_mb == 300.0 + 1.5 + 110.0


def test_a_spawned_workers_start_up_is_not_growth():
    model = LiveModel(50.0, None, "")
    facts = {200: info(200, "worker 0", "dataloader", 0, forked=False)}
    rows = []
    for i in range(30):  # 3 s of start-up (RSS rising 100 MB a second while busy), then still
        t = i * 0.2
        rss = 100.0 + min(t, 3.0) * 100.0
        rows.append(
            {**cheap(t, 200, "worker 0", "dataloader", rss=rss, anon=rss, est=rss - 50.0), "cpu_s": t}
        )
    model.feed("samples", rows)
    view = model.view(facts.get)
    assert view.rows[0].grown_mb == 0.0
    assert view.verdict.startswith("flat so far: workers' USS +0.0 MB")


def test_a_rate_needs_a_few_seconds_of_points():
    assert rate([(0.0, 1.0), (1.0, 2.0)]) is None
    assert rate([(0.0, 1.0), (1.0, 1.5), (2.0, 2.0)]) is None  # 2 s: too short
    assert rate([(float(t), 2.0 * t) for t in range(10)]) == 120.0
    # From ``since`` on only (a parent's from its first worker), over the last 30 s only.
    bent = [(float(t), float(t) if t < 5 else 3.0 * t) for t in range(12)]
    assert rate(bent, since=5.0) == pytest.approx(180.0)
    assert rate(bent, since=10.0) is None  # 1 s from there: too short
    assert rate([(float(t), 0.0 if t < 40 else t) for t in range(80)]) == pytest.approx(60.0)


def view_for_screen(role: str = "worker 0"):
    model = LiveModel(50.0, 4000.0, "the job's memory limit (cgroup v2 /job)")
    job(model, worker_growth_per_s=1.0)
    facts = {**FACTS, 101: info(101, role, "dataloader", 0, forked=True)}
    model.feed("samples", [cheap(21.0, 101, role, "dataloader", rss=421.0, anon=41.0, est=31.0)])
    return model.view(facts.get)


def test_the_screen_shows_the_rows_the_totals_and_the_verdict_within_its_width():
    lines = render(view_for_screen(), "pid 100 (python train.py)", 120, 40, color=False)
    text = "\n".join(lines)
    assert "memprobe top  pid 100 (python train.py)  0:21  q: quit and save" in text
    assert re.search(
        r"total PSS [\d,]+ MB  sum of RSS [\d,]+ MB  cgroup charge 1,200 MB  limit 4,000 MB", text
    )
    assert "flat so far" in text and "time to the limit" in text
    header = next(ln for ln in lines if ln.lstrip().startswith("pid  role"))
    assert "USS is" in header and "MB/min" in header
    assert any(re.match(r"\s*101  worker 0 .* est\.", ln) for ln in lines)
    assert all(len(ln) <= 120 for ln in lines)
    assert "\x1b" not in text  # NO_COLOR: no colour, no attribute


def test_the_screen_colours_only_when_allowed_and_escapes_what_the_job_named():
    view = view_for_screen(role="worker 0\x1b[2J\x1b]0;pwned\x07")
    coloured = "\n".join(render(view, "t", 200, 40, color=True))
    assert "\x1b[32m" in coloured  # flat: green
    plain = "\n".join(render(view, "t", 200, 40, color=False))
    assert "\x1b" not in plain and "\x07" not in plain
    assert "worker 0\\x1b[2J\\x1b]0;pwned\\x07" in plain


def test_a_wide_character_command_line_in_a_narrow_terminal_keeps_every_line_within_its_width():
    """A CJK command line cut by characters made the title line 2x too wide: it wrapped and the
    screen scrolled its first line away. Cut by the columns the terminal shows, each line fits,
    the title first; the table's columns line up whatever the role's script."""
    from memprobe.core.text import columns

    title = "pid 100 (python 训练脚本.py --数据集 " + "图像" * 40 + ")"
    for width in (20, 41, 80, 120):
        lines = render(view_for_screen(role="工人 0"), title, width, 40, color=False)
        assert lines[0].startswith("memprobe top  pid 100 (python 训练"[:width]), lines[0]
        assert all(columns(ln) <= width for ln in lines), [ln for ln in lines if columns(ln) > width]
    lines = render(view_for_screen(role="工人 0"), title, 200, 40, color=False)
    table = lines[lines.index(next(ln for ln in lines if ln.lstrip().startswith("pid  role"))) :][:4]
    assert len({columns(ln) for ln in table}) == 1, table  # every row as wide as the head
    assert re.match(r"\s*101  工人 0 {4}dataloader", table[2]), table  # padded by columns: 6 + 2


def test_a_short_screen_says_how_many_rows_it_left_out():
    lines = render(view_for_screen(), "t", 200, 9, color=False)
    assert len(lines) <= 9
    assert any(ln.startswith("... and ") for ln in lines)


def test_not_a_terminal_one_line_every_few_seconds():
    now = [0.0]
    out = io.StringIO()
    shown = Lines(out, 5.0, outlet=Outlet(), clock=lambda: now[0])
    shown.show(LiveModel(50.0, None, "").view(), "t", "", False)  # nothing sampled yet: no line
    view = view_for_screen()
    for i in range(13):  # shown once a second, as the live view is
        now[0] = float(i)
        shown.show(view, "t", "", False)
    printed = out.getvalue().splitlines()
    assert len(printed) == 3  # at 0, 5 and 10 s
    assert printed[0] == line(view)
    assert printed[0].startswith("memprobe top: 21 s: 3 process(es): total PSS")
    assert "flat so far" in printed[0] and "time to the limit" in printed[0]


def test_the_rows_of_the_samplers_first_tick_are_kept_though_they_come_before_the_first_poll():
    # The first tick reads every process exactly; it is written before the view is first asked.
    live = Live(Lines(io.StringIO(), 5.0, outlet=Outlet()), log=lambda line: None)
    live.rows("samples", [exact(0.0, 100, "launcher", "launcher", pss=1.0, uss=0.1, rss=1.8, anon=0.1)])
    live.rows("samples", [cheap(1.0, 100, "launcher", "launcher", rss=1.8, anon=0.1, est=None)])
    view = live.model.view()
    assert view.totals.total_pss_mb == 1.0 and view.totals.unread == 0


def test_a_parents_growth_rate_starts_at_its_first_worker_not_while_it_built_its_dataset():
    model = LiveModel(50.0, None, "")
    main = info(100, "main", "main")
    worker = info(101, "worker 0", "dataloader", 0, forked=True)
    worker.ppid = 100
    model.feed("samples", [exact(0.0, 100, "main", "main", pss=50.0, uss=40.0, rss=60.0, anon=30.0)])
    for s in range(1, 21):
        t = float(s)
        anon = 30.0 + 100.0 * min(t, 10.0)  # builds its dataset for 10 s, then holds still
        rows = [cheap(t, 100, "main", "main", rss=anon + 30.0, anon=anon, est=anon)]
        if t >= 10.0:
            rows.append(cheap(t, 101, "worker 0", "dataloader", rss=anon + 30.0, anon=5.0, est=5.0))
        model.feed("samples", rows)
    view = model.view({100: main, 101: worker}.get)
    assert view.rows[0].role == "main" and view.rows[0].rate_mb_min == 0.0


def test_a_program_started_before_the_dataset_was_built_does_not_start_the_parents_growth():
    """W&B's wandb-core, exec'd by the training process before the fit builds its dataset: the
    dataset is what the parent built before its DataLoader worker, not its growth rate. The tree
    calls it "worker 0" (kind exec) until the workers appear, a program from then on
    (tests/unit/test_tree_roles.py): its rows say so, and the view follows them."""
    model = LiveModel(50.0, None, "")
    main, program = info(100, "main", "main"), info(102, "program 0", "program")
    worker = info(101, "worker 0", "dataloader", 0, forked=True)
    worker.ppid = program.ppid = 100
    model.feed("samples", [exact(0.0, 100, "main", "main", pss=50.0, uss=40.0, rss=60.0, anon=30.0)])
    for s in range(1, 21):
        t = float(s)
        anon = 30.0 + 100.0 * min(t, 10.0)  # builds its dataset for 10 s, then holds still
        rows = [cheap(t, 100, "main", "main", rss=anon + 30.0, anon=anon, est=anon)]
        named = ("worker 0", "exec") if t < 10.0 else ("program 0", "program")
        rows.append(cheap(t, 102, *named, rss=30.0, anon=25.0, est=25.0))  # from 1 s on
        if t >= 10.0:
            rows.append(cheap(t, 101, "worker 0", "dataloader", rss=anon + 30.0, anon=5.0, est=5.0))
        model.feed("samples", rows)
        if t == 5.0:  # a view while it was "worker 0": its generation (0) asked of the sampler
            model.view({100: main, 102: info(102, "worker 0", "exec", 0)}.get)
            assert 102 in model._generation
    view = model.view({100: main, 101: worker, 102: program}.get)
    assert view.rows[0].role == "main" and view.rows[0].rate_mb_min == 0.0
    assert [(r.role, r.kind) for r in view.rows if r.pid == 102] == [("program 0", "program")]
    assert 102 not in model._generation  # no worker generation of the forecast starts at it


def test_the_panel_under_a_jobs_output_draws_in_one_write_and_gives_the_screen_back(monkeypatch) -> None:
    """``memprobe record --live``: the view in the terminal's last third, in its scroll region,
    each repaint one write() that saves and restores the job's cursor; closed, the view's lines
    cleared and the whole screen scrolling again."""
    import fcntl
    import os
    import struct
    import termios

    from memprobe.live import outlet as outlet_module
    from memprobe.live.panel import Panel

    main, sub = os.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))  # 30 lines, 100 columns
    writes: list[bytes] = []
    monkeypatch.setattr(outlet_module.os, "write", lambda fd, data: writes.append(bytes(data)) or len(data))
    outlet = Outlet()
    with os.fdopen(sub, "w") as stream:
        shown = Panel(stream, outlet, color=False, name="memprobe record", hint="Ctrl-C: stop the job, save")
        shown.open()
        for _ in range(2):
            shown.show(view_for_screen(), "pid 100 (python train.py)", "", False)
            assert outlet.wait(60)  # (a repaint still waiting would be replaced by the next)
        shown.close()
        assert outlet.wait(60)
    os.close(main)
    first, again, closed = (w.decode() for w in writes)
    # Below the job's cursor cleared, room made at the foot (10 lines: a third of 30), the region
    # set around the cursor.
    assert first.startswith("\x1b[J" + "\n" * 10 + "\x1b[10A\x1b7\x1b[1;20r\x1b8")
    for drawn in (first, again):  # drawn from line 21 on, the cursor put back where the job left it
        body = drawn[drawn.index("\x1b7\x1b[21;1H") :]
        assert body.endswith("\x1b8") and "\x1b[30;1H" in body and "\x1b[31;1H" not in body
        assert "memprobe record  pid 100 (python train.py)  0:21  Ctrl-C: stop the job, save" in body
        assert re.search(r"\x1b\[25;1H\s*pid  role", body)  # the table's head under 4 lines of totals
    assert "\x1b[1;20r" not in again  # the size unchanged: the region kept
    assert closed == "\x1b7\x1b[21;1H\x1b[J\x1b8\x1b7\x1b[r\x1b8"


def test_the_panel_comes_back_when_a_terminal_too_short_for_it_grows_again(monkeypatch) -> None:
    """A terminal shrunk to 6 lines leaves no room under the job's output: the view is cleared
    and the whole screen scrolls. Grown again, the view comes back (it was never drawn again for
    the rest of the job: the panel had closed itself for good)."""
    import fcntl
    import os
    import struct
    import termios

    from memprobe.live import outlet as outlet_module
    from memprobe.live.panel import Panel

    main, sub = os.openpty()
    writes: list[bytes] = []
    monkeypatch.setattr(outlet_module.os, "write", lambda fd, data: writes.append(bytes(data)) or len(data))
    outlet = Outlet()
    with os.fdopen(sub, "w") as stream:
        shown = Panel(stream, outlet, color=False, name="memprobe record", hint="Ctrl-C: stop the job, save")
        shown.open()
        for lines in (30, 6, 6, 2, 0, 30, 30):
            fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", lines, 100, 0, 0))
            shown.show(view_for_screen(), "pid 100 (python train.py)", "", False)
            assert outlet.wait(60)
            assert shown.due()  # still a view to draw, whatever the size
        shown.close()
        assert outlet.wait(60)
    os.close(main)
    drawn = [w.decode() for w in writes]
    assert len(drawn) == 6, drawn  # drawn, released once (6 lines) and said so, drawn twice, closed
    # The whole screen scrolls; nothing cleared by where the view was: the terminal moved the
    # lines when it shrank, and the job's may be there now.
    assert drawn[1] == "\x1b7\x1b[r\x1b8"
    assert drawn[2] == (
        "memprobe: the terminal is too short for the live view (6 lines; it needs 8): "
        "it comes back once the terminal is taller\n"
    )
    # Room made at the foot again, the region set again, the view drawn in it.
    assert drawn[3].startswith("\x1b[J" + "\n" * 10 + "\x1b[10A\x1b7\x1b[1;20r\x1b8\x1b7\x1b[21;1H")
    assert "memprobe record  pid 100 (python train.py)" in drawn[3] and "\x1b[1;20r" not in drawn[4]
    assert "memprobe record  pid 100" in drawn[4]
    assert drawn[5] == "\x1b7\x1b[21;1H\x1b[J\x1b8\x1b7\x1b[r\x1b8"  # closed, not resized: its lines cleared


def test_a_resize_undone_between_two_repaints_sets_the_view_up_again(monkeypatch) -> None:
    """The size is read at every poll: shrunk and grown back within a second (the terminal
    reset its scroll region meanwhile), the next repaint makes room and sets the region again,
    as after any resize."""
    import fcntl
    import os
    import struct
    import termios

    from memprobe.live import outlet as outlet_module
    from memprobe.live.panel import Panel

    main, sub = os.openpty()
    writes: list[bytes] = []
    monkeypatch.setattr(outlet_module.os, "write", lambda fd, data: writes.append(bytes(data)) or len(data))
    outlet = Outlet()
    with os.fdopen(sub, "w") as stream:
        shown = Panel(stream, outlet, color=False, name="memprobe record", hint="Ctrl-C: stop the job, save")
        shown.open()
        for lines in (30, 20, 30):  # 20 lines seen at a poll between two repaints
            fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", lines, 100, 0, 0))
            assert shown.due()
        shown.show(view_for_screen(), "pid 100 (python train.py)", "", False)
        shown.show(view_for_screen(), "pid 100 (python train.py)", "", False)
        assert outlet.wait(60)
        for lines in (20, 30):
            fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", lines, 100, 0, 0))
            assert shown.due()
        shown.show(view_for_screen(), "pid 100 (python train.py)", "", False)
        assert outlet.wait(60)
    os.close(main)
    drawn = [w.decode() for w in writes]
    assert len(drawn) == 3 and "\x1b[1;20r" not in drawn[1]
    assert drawn[2].startswith("\x1b7\x1b[r\x1b8\x1b[J" + "\n" * 10 + "\x1b[10A\x1b7\x1b[1;20r\x1b8")


def test_a_job_that_moved_into_another_cgroup_is_shown_against_that_ones_limit_and_charge():
    """cgexec/systemd-run --scope: the sampler follows the job into the cgroup that limits it; the
    view takes that cgroup's limit, and its charge and OOM kills from then on only."""
    model = LiveModel(50.0, 24_000.0, "this machine's memory")
    job(model, worker_growth_per_s=1.0, seconds=4)  # the charge of the cgroup it left: 1,000-1,040 MB
    model.entered(700.0, "the job's memory limit (cgroup v1 /job)", 5.0, 0)
    for s in range(5, 61):
        model.feed(
            "system",
            [{"t": float(s), "cgroup_mb": 100.0 + 5.0 * (s - 5), "cgroup_oom_kills": 1 if s >= 11 else 0}],
        )
        t = float(s)
        model.feed("samples", [cheap(t, 100, "main", "main", rss=500.0, anon=250.0 + 0.5 * t, est=200.0)])
    view = model.view(FACTS.get)
    assert view.totals.limit_mb == 700.0 and view.totals.cgroup_mb == 375.0 and view.totals.oom_kills == 1
    # The main process's own +30 MB/min, into the room the new cgroup's charge left: 325 MB of 700.
    assert view.limit == "time to the limit: 700 MB in about 11 min: main process +30 MB/min"


def epochs(
    model: LiveModel,
    n: int,
    rise_per_epoch: float,
    epoch_s: int = 20,
    copy_rise: float = 0.0,
    unread: bool = False,
    shared_mb: float = 0.0,
    unread_odd: bool = False,
    view_every: int = 1,
) -> dict:
    """``n`` epochs of ``epoch_s`` s, read exactly each second: main (its anonymous memory
    +``rise_per_epoch`` an epoch) and two forked workers per epoch that copy 10 MB a second
    (``copy_rise`` more every epoch) and end a second before the epoch does; ``unread``: the
    workers never read exactly, only estimated (a loaded machine; ``unread_odd``: every other
    epoch's); ``shared_mb``: each process's share of the pages main and its workers share (PSS
    over USS). The view asked each second, as `memprobe top` does (``view_every``: as its line
    without a terminal, every --every s). Returns the facts (the sampler's ProcessInfo by pid)."""
    facts = {100: info(100, "main", "main")}
    for s in range(n * epoch_s):
        t, gen, within = float(s), s // epoch_s, s % epoch_s
        main_pss = 300.0 + rise_per_epoch * (gen + within / epoch_s)
        rows = [
            exact(t, 100, "main", "main", pss=main_pss + shared_mb, uss=main_pss, rss=400.0, anon=main_pss)
        ]
        for w in (0, 1):
            pid = 1000 + 10 * gen + w
            if within < epoch_s - 1:
                facts.setdefault(
                    pid, replace(info(pid, f"worker {w}", "dataloader", w, forked=True), generation=gen)
                )
                copied = (10.0 + copy_rise * gen / (epoch_s - 2)) * within
                rows.append(
                    cheap(t, pid, f"worker {w}", "dataloader", rss=400.0, anon=20.0, est=copied)
                    if unread or (unread_odd and gen % 2)
                    else exact(
                        t,
                        pid,
                        f"worker {w}",
                        "dataloader",
                        pss=copied + shared_mb,
                        uss=copied,
                        rss=400.0,
                        anon=20.0,
                    )
                )
            elif within == epoch_s - 1:
                rows.append(
                    {"t": t, "pid": pid, "role": f"worker {w}", "rank": -1, "tier": "gone", "missing": True}
                )
        model.feed("samples", rows)
        model.feed(
            "system",
            [
                {
                    "t": t,
                    "cgroup_mb": 100.0 + sum(r.get("pss_mb") or 0.0 for r in rows),
                    "mem_available_mb": 20_000.0,
                }
            ],
        )
        if s % view_every == 0:
            model.view(facts.get)
    return facts


def test_the_live_time_to_the_limit_takes_the_summary_s_rule_across_generations():
    """The workers' copies ramp +600 MB/min within each epoch and end with it: with a flat main
    process there is no time to the limit; with main +12 MB an epoch, the limit's epoch."""
    flat = LiveModel(50.0, 2000.0, "the job's memory limit (cgroup v2 /job)")
    facts = epochs(flat, 8, 0.0)
    assert flat.view(facts.get).limit == (
        "time to the limit: none: nothing of the job's own memory rises in a way that persists "
        "(epochs' peaks +0.0 MB each)"
    )
    rising = LiveModel(50.0, 2000.0, "the job's memory limit (cgroup v2 /job)")
    facts = epochs(rising, 8, 12.0)
    # Seven epochs ended, peaks 670.8 + 12 g MB; the charge at the last peak 842.8 MB: 1,157.2 MB of
    # room, 96.4 epochs of 20 s after the seventh.
    assert rising.view(facts.get).limit == (
        "time to the limit: 2,000 MB at about epoch 103, about 32 min after its last peak: epochs' peaks +12 MB each"
    )


def test_the_live_forecast_counts_a_worker_not_read_exactly_yet_at_its_estimate():
    """Workers copying 12 MB more each epoch (6 MB each), never read exactly on a loaded machine:
    counted at their estimated USS, the epochs' peaks rise +12 MB and the limit comes; left out,
    every peak was main's alone, flat."""
    model = LiveModel(50.0, 2000.0, "the job's memory limit (cgroup v2 /job)")
    facts = epochs(model, 8, 0.0, copy_rise=6.0, unread=True)
    assert model.view(facts.get).limit.endswith("after its last peak: epochs' peaks +12 MB each")


def test_a_worker_not_read_exactly_yet_holds_its_share_of_the_pages_it_shares_as_one_read_had():
    """Every other epoch's workers never read exactly, each sharing 100 MB's worth with main:
    counted at their estimate alone, those epochs' peaks fell 200 MB short and the line through
    them said nothing; with the share of a worker read exactly, +12 MB an epoch."""
    model = LiveModel(50.0, 4000.0, "the job's memory limit (cgroup v2 /job)")
    facts = epochs(model, 12, 12.0, shared_mb=100.0, unread_odd=True)
    assert model.view(facts.get).limit.endswith("after its last peak: epochs' peaks +12 MB each")


def test_the_generation_of_a_worker_that_ended_between_two_views_is_known():
    """Without a terminal the view comes every --every s: a view every 80 s saw one epoch's
    workers in four alive; asked of the sampler, every generation that ended is known."""
    model = LiveModel(50.0, 2000.0, "the job's memory limit (cgroup v2 /job)")
    facts = epochs(model, 9, 12.0, view_every=80)
    assert model.view(facts.get).limit.endswith("after its last peak: epochs' peaks +12 MB each")
