"""How many of a job's lines `memprobe record --live` costs the terminal when it is resized.

A job prints a numbered line every 50 ms in a tmux pane under `memprobe record --live`, and says
how many it printed when it ends. `--grow`: 5 s in, the pane grows once, from 20 lines to 40;
else a storm: 5 s in, the pane is resized 40 times, 0.1 s apart (20 to 48 lines, 60 to 140
columns); the job prints for 7 s more. The
pane's history (tmux keeps what scrolled off) is read back: the job's lines missing from it, and
those with something else on them (the view drawn over them). Without memprobe the same resizes
lose none (`--without`): what is counted is memprobe's.

    python benchmarks/resize_storm.py [--grow]               # this checkout
    python benchmarks/resize_storm.py --code DIR [--grow]    # DIR/memprobe first (another checkout)
    python benchmarks/resize_storm.py --without [--grow]     # the job alone
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """
import os, sys, time
i = 0
while not os.path.exists(sys.argv[1]):
    print(f"job line {i}: all of this line intact", flush=True)
    i += 1
    time.sleep(0.05)
open(sys.argv[1] + ".count", "w").write(str(i))
"""
LINE = re.compile(r"^job line (\d+): all of this line intact$")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code", help="put this folder first on PYTHONPATH (another checkout's memprobe)")
    p.add_argument("--without", action="store_true", help="the job alone, without memprobe")
    p.add_argument("--grow", action="store_true", help="one resize, from 20 lines to 40")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    for _ in range(args.rounds):
        missing, garbled, printed = storm(args.code, args.without, args.grow)
        print(
            f"job lines missing from the terminal: {missing} of {printed}; with something drawn over them: {garbled}"
        )
    return 0


def storm(code: str | None, without: bool, grow: bool) -> tuple[int, int, int]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "job.py").write_text(JOB)
        stop = tmp / "stop"
        job = [sys.executable, str(tmp / "job.py"), str(stop)]
        memprobe = [
            sys.executable,
            "-m",
            "memprobe",
            "record",
            "--live",
            "--no-report",
            "-o",
            str(tmp / "out"),
            "--",
        ]
        command = job if without else [*memprobe, *job]
        env = f"PYTHONPATH={shlex.quote(code)} " if code else ""
        tmux = ["tmux", "-S", str(tmp / "sock")]
        shell = f"env {env}{shlex.join(command)}; sleep 600"
        lines = "20" if grow else "30"
        subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", lines, shell], check=True)
        try:
            time.sleep(5)
            # (-y alone, as a window dragged taller: tmux then brings back lines that had scrolled
            # off, and the cursor moves down with them; with -x too it adds blank lines instead)
            storm = [["-x", str(60 + i % 3 * 40), "-y", str(20 + i % 5 * 7)] for i in range(1, 41)]
            for size in [["-y", "40"]] if grow else storm:
                subprocess.run([*tmux, "resize-window", *size], check=True)
                time.sleep(0.1)
            if not grow:  # (a resize to the size it has resets the scroll region in tmux too)
                subprocess.run([*tmux, "resize-window", "-x", "120", "-y", "30"], check=True)
            time.sleep(7)  # the job prints on (with 4 s, memprobe's earlier code lost no line: see docs)
            stop.touch()
            count = Path(f"{stop}.count")
            while not count.exists():
                time.sleep(0.1)
            printed = int(count.read_text())
            time.sleep(2)
            history = subprocess.run(
                [*tmux, "capture-pane", "-p", "-S", "-"], capture_output=True, text=True, check=True
            ).stdout
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True)
    rows = [row for row in history.splitlines() if row.startswith("job line ")]
    whole = {int(m[1]) for row in rows if (m := LINE.match(row))}
    numbers = {int(row.split()[2].rstrip(":")) for row in rows if row.split()[2].rstrip(":").isdigit()}
    return printed - len(numbers), len(numbers - whole), printed


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    sys.exit(main())
