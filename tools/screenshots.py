"""The pictures of the docs site (docs/img/*.png), made from real memprobe runs on this machine.

Each picture is what a user sees after a real command: the HTML report of `memprobe run`, of
`memprobe record` on a small training job (a list of dicts read by two forked DataLoader
workers, written to the work folder by this script), of a job of two nodes put together by
`memprobe report`, and the terminal of `memprobe cure` and of `memprobe top` (read from a tmux
pane). The pages are shot with headless chromium at a fixed width; the terminals are drawn as
HTML from their text (and `top`'s colours) and shot the same way. Every PNG is cut to 256 colours,
which keeps each a few hundred KB at most.

Re-run it from the repository root after `make install-test` (it needs chromium and tmux, which
that installs; about 5 minutes on 2 cores; a report HTML is never written into the repository):

    .venv/bin/python tools/screenshots.py                    # every picture, the runs in a temporary folder
    .venv/bin/python tools/screenshots.py --only record,top  # some of them
    .venv/bin/python tools/screenshots.py --keep /tmp/shots  # keep the runs' folders (and the pages' HTML)

then look at docs/img/*.png, build the site (`make docs`) and commit the PNGs that changed.
`make test` does not run this (it takes minutes); it builds the site that shows the pictures.
The figures the docs state are the ones measured in docs/performance.md, with their commands;
these pictures show what the pages look like, from runs of their own.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageChops

REPO = Path(__file__).resolve().parents[1]
IMG = REPO / "docs" / "img"
BIN = Path(sys.executable).parent
WIDTH = 1280

# The small training job that `record` and `top` watch: the README's copy-on-access case.
JOB = '''\
"""A small training job: a list of annotation dicts read by 2 forked DataLoader workers."""
import sys
import time

from torch.utils.data import DataLoader, Dataset


class Annotations(Dataset):
    def __init__(self, n):
        self.records = [
            {"image_id": i, "file_name": f"train2017/{i:012d}.jpg", "bbox": [float(i), 1.0, 2.0, 3.0]}
            for i in range(n)
        ]

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        r = self.records[i]
        return r["image_id"] % 7, len(r["file_name"]) + r["bbox"][0]


if __name__ == "__main__":
    step_s = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    loader = DataLoader(Annotations(300_000), batch_size=256, num_workers=2, shuffle=True,
                        multiprocessing_context="fork")
    for epoch in range(2):
        for batch in loader:
            time.sleep(step_s)  # a training step
'''


# This venv's memprobe, python and torchrun first on PATH: the pages show `python job.py` as a
# user types it, not this venv's path.
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def run(args: list[str | Path], cwd: Path, **kw) -> str:
    """A command, its output returned; a failure stops the script with that output."""
    print("$", " ".join(str(a) for a in args), flush=True)
    done = subprocess.run(
        [str(a) for a in args], check=False, cwd=cwd, capture_output=True, text=True, env=ENV, **kw
    )
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def memprobe(*args: str | Path, cwd: Path) -> str:
    return run(["memprobe", *args], cwd)


def shoot(page: Path, name: str, height: int, only: str = "") -> Path:
    """PAGE (an HTML file) as docs/img/NAME.png: headless chromium, WIDTH x HEIGHT, the charts'
    scripts given 10 s of virtual time to draw; cut to 256 colours. ONLY: the id of one of the
    report's sections, shown alone (in a copy of the page beside it; headless chromium's
    screenshot does not follow a #fragment)."""
    out = IMG / f"{name}.png"
    if only:
        alone = page.with_name(f"{page.stem}-{only}.html")
        css = f"<style>header.top, nav.sections, footer, section[id]:not(#{only}) {{ display: none !important; }}</style>"
        alone.write_text(
            page.read_text(encoding="utf-8").replace("</head>", css + "</head>", 1), encoding="utf-8"
        )
        page = alone
    url = page.resolve().as_uri()
    run(
        [
            shutil.which("chromium") or "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--virtual-time-budget=10000",
            f"--window-size={WIDTH},{height}",
            f"--screenshot={out}",
            url,
        ],
        REPO,
    )
    with Image.open(out) as im:
        small = trimmed(im.convert("RGB")).quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(out, optimize=True)
    print(f"  -> {out} ({out.stat().st_size // 1024} KB)")
    return out


def trimmed(im: Image.Image, margin: int = 24) -> Image.Image:
    """IM without the empty rows below its content (the colour of its bottom-left pixel), but
    MARGIN: a window taller than its page leaves them."""
    blank = Image.new(im.mode, im.size, im.getpixel((0, im.height - 1)))
    box = ImageChops.difference(im, blank).getbbox()
    return im if box is None else im.crop((0, 0, im.width, min(im.height, box[3] + margin)))


# -- terminals as pages -----------------------------------------------------------------------------

SGR = re.compile(r"\x1b\[([0-9;]*)m")
OTHER_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-ln-z]|\x1b\][^\x07]*\x07")
COLOURS = {31: "#f47067", 32: "#6bc46d", 33: "#e0b341", 34: "#6cb6ff", 35: "#dcbdfb", 36: "#56d4dd"}


def terminal_page(text: str, title: str, out: Path) -> tuple[Path, int]:
    """TEXT (a terminal's output, with its SGR colour codes) as a dark page of fixed-width
    lines; returns the page and the height that shows it whole."""
    body, style = [], {"bold": False, "reverse": False, "colour": None}

    def span(chunk: str) -> str:
        chunk = html.escape(chunk)
        css = []
        if style["bold"]:
            css.append("font-weight:bold")
        if style["colour"]:
            css.append(f"color:{style['colour']}")
        if style["reverse"]:
            css.append("background:#d0d7de;color:#111")
        return f'<span style="{";".join(css)}">{chunk}</span>' if css else chunk

    text = OTHER_ESCAPES.sub("", text.replace("\r", ""))
    pos = 0
    for m in SGR.finditer(text):
        body.append(span(text[pos : m.start()]))
        for code in [int(c) for c in m.group(1).split(";") if c] or [0]:
            if code == 0:
                style.update(bold=False, reverse=False, colour=None)
            elif code == 1:
                style["bold"] = True
            elif code == 7:
                style["reverse"] = True
            elif code == 22:
                style["bold"] = False
            elif code == 27:
                style["reverse"] = False
            elif code == 39:
                style["colour"] = None
            elif code in COLOURS:
                style["colour"] = COLOURS[code]
        pos = m.end()
    body.append(span(text[pos:]))
    lines = text.count("\n") + 1
    page = f"""<!doctype html><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ margin: 0; background: #0d1117; font-family: sans-serif; }}
.bar {{ background: #30363d; color: #c9d1d9; padding: 6px 14px; font-size: 13px; }}
pre {{ margin: 0; padding: 12px 14px; color: #c9d1d9; font: 14px/18px "DejaVu Sans Mono", monospace; white-space: pre; }}
</style>
<div class="bar">{html.escape(title)}</div><pre>{"".join(body)}</pre>"""
    out.write_text(page, encoding="utf-8")
    return out, 30 + 24 + lines * 18 + 8


# -- the pictures -----------------------------------------------------------------------------------


def shot_run(work: Path) -> None:
    """`memprobe run lists_vs_arrays --quick`: the verdict and matrix, every run's total PSS, and
    throughput against memory by mode."""
    memprobe("run", "lists_vs_arrays", "--quick", "-o", "lists_vs_arrays-quick", cwd=work)
    page = work / "lists_vs_arrays-quick" / "report.html"
    shoot(page, "run-verdict", 1740)
    shoot(page, "run-matrix", 720, "matrix")
    shoot(page, "run-all-runs", 680, "all-runs")
    shoot(page, "run-throughput", 940, "throughput")
    shoot(sampler_chart(work / "lists_vs_arrays-quick", work / "sampler.html"), "run-sampler", 520)


def sampler_chart(results: Path, out: Path) -> Path:
    """A bar per run of RESULTS: the share of one core its sampler used (``sampler.cpu_share`` of
    each run's meta.json, as the sampler recorded it; read with memprobe's own reader), as a page."""
    import plotly.graph_objects as go

    from memprobe.results.folder import ResultsFolder

    metas = [m for m in ResultsFolder.open(results).metas() if m.get("sampler")]
    fig = go.Figure(
        go.Bar(
            x=[m["run_id"] for m in metas],
            y=[100 * m["sampler"]["cpu_share"] for m in metas],
            marker_color="#4c6ef5",
            text=[f"{100 * m['sampler']['cpu_share']:.1f} %" for m in metas],
            textposition="outside",
        )
    )
    fig.update_layout(
        title="The sampler's CPU, share of one core, in each run of memprobe run lists_vs_arrays --quick",
        yaxis_title="% of one core",
        width=WIDTH - 40,
        height=480,
        template="plotly_white",
        margin={"t": 60, "b": 110},
    )
    fig.write_html(out, include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
    return out


def shot_record(work: Path) -> None:
    """`memprobe record -- python job.py`: the page of a job of the user's own."""
    (work / "job.py").write_text(JOB, encoding="utf-8")
    memprobe("record", "-o", "record-job", "--", "python", "job.py", cwd=work)
    page = work / "record-job" / "report.html"
    shoot(page, "record", 1800)
    shoot(page, "record-timeline", 580, "timeline")


def shot_cure(work: Path) -> None:
    """`memprobe cure` on the COCO-style dataset of scenarios/user_datasets.py: the table of the
    dataset as is and with each fix, and the change to make."""
    out = memprobe(
        "cure",
        "user_datasets:coco_style",
        "--kwargs",
        '{"images": 160000}',
        "--items",
        "40000",
        "-o",
        work / "cure-coco_style",
        cwd=REPO / "scenarios",
    )
    command = "$ memprobe cure user_datasets:coco_style --kwargs '{\"images\": 160000}' --items 40000"
    page, height = terminal_page(f"{command}\n{out}", "memprobe cure", work / "cure.html")
    shoot(page, "cure", height)


def shot_top(work: Path) -> None:
    """`memprobe top PID` in a tmux pane of 148 x 24 beside the small job, read 12 s in."""
    (work / "job.py").write_text(JOB, encoding="utf-8")
    job = subprocess.Popen(["python", "job.py", "0.02"], cwd=work, env=ENV)  # ~25 s an epoch
    # A tmux server of its own (-L): its panes get this environment, never another server's.
    tmux = ["tmux", "-L", f"memprobe-shots-{os.getpid()}"]
    session = "shots"
    try:
        time.sleep(3)  # the dataset built, the workers started
        run(
            [*tmux, "new-session", "-d", "-s", session, "-x", "148", "-y", "24",
             f"{BIN / 'memprobe'} top {job.pid} -o top-job"],
            work,
        )  # fmt: skip
        time.sleep(12)
        screen = run([*tmux, "capture-pane", "-p", "-e", "-t", session], work)
        run([*tmux, "send-keys", "-t", session, "q"], work)
        for _ in range(60):
            if (
                subprocess.run(
                    [*tmux, "has-session", "-t", session], check=False, capture_output=True
                ).returncode
                != 0
            ):
                break
            time.sleep(1)
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
        job.terminate()
        job.wait(30)
    page, height = terminal_page(screen.rstrip("\n"), f"memprobe top {job.pid}", work / "top.html")
    shoot(page, "top", height)


def shot_nodes(work: Path) -> None:
    """The README's torchrun line run twice at once, K = 0 and 1 (one rank per node instead of 8,
    a free port), each node recorded to job/nodeK; then `memprobe report job/`."""
    (line,) = [
        ln
        for ln in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
        if ln.startswith("memprobe record -o job/node$K -- torchrun")
    ]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = line.replace("--nproc-per-node=8", "--nproc-per-node=1").replace(
        "--master-port=29500", f"--master-port={port}"
    )
    shutil.copy(REPO / "tests" / "integration" / "nodes" / "train.py", work / "train.py")
    env = {**ENV, "MASTER_ADDR": "127.0.0.1"}
    for name in ("SLURM_JOB_ID", "SLURM_NODEID", "SLURM_NNODES", "NODE_RANK", "GROUP_RANK"):
        env.pop(name, None)  # this machine's own would be taken for the job's
    nodes = [
        subprocess.Popen(["bash", "-c", f"{line} --workers {workers}"], cwd=work, env={**env, "K": str(k)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for k, workers in ((0, 2), (1, 3))
    ]  # fmt: skip
    for p in nodes:
        out = p.communicate(timeout=300)[0]
        if p.returncode != 0:
            sys.exit(f"a node failed ({p.returncode}):\n{out[-3000:]}")
    memprobe("report", "job/", cwd=work)
    shoot(work / "job" / "report.html", "nodes", 1700)


SHOTS: dict[str, Callable[[Path], None]] = {
    "run": shot_run,
    "record": shot_record,
    "cure": shot_cure,
    "top": shot_top,
    "nodes": shot_nodes,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SHOTS), help=f"some of: {','.join(SHOTS)}")
    parser.add_argument("--keep", type=Path, help="a folder for the runs (kept); default: a temporary one")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in SHOTS]
    if unknown:
        parser.error(f"--only: got {','.join(unknown)}; allowed: {','.join(SHOTS)}")
    for tool in ("chromium", "tmux"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed (make install-test installs it)")
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memprobe-shots-") as tmp:
        root = args.keep or Path(tmp)
        for name in names:
            work = root / name
            if work.exists():
                shutil.rmtree(work)
            work.mkdir(parents=True)
            SHOTS[name](work)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
