"""What the end of a long recording costs: the finish, `memprobe report`, and recovering a killed one.

Not a test: for each job length and process count it writes a synthetic recording with
benchmarks/gen_long_record.py (the JSON lines `memprobe record` leaves when the job ends), then
measures, each in its own child process under /usr/bin/time (wall, user + system CPU, peak RSS):

    finish    what `memprobe record` does when the job has ended: gather the JSON lines into
              Parquet, analyse, write summary.json and report.html (memprobe.session.finish.finalize)
    report    `memprobe report DIR` on the finished folder
    recover   `memprobe report DIR` on a copy of the folder as a killed memprobe left it (JSON
              lines never gathered; --recover only: the copy needs the JSON lines' disk space twice)

    python benchmarks/bench_finish.py --hours 1 8 24 72 --processes 3
    python benchmarks/bench_finish.py --hours 1 8 --processes 64 --recover
    python benchmarks/bench_finish.py --hours 8 --processes 64 --src old=/tmp/src-main --src new=.
    python benchmarks/bench_finish.py --hours 72 --processes 64 --recover --in-place --base /work/long

Prints one Markdown row per measurement; the folders are removed afterwards (--keep to keep).
``--src NAME=DIR`` (repeated) measures memprobe from each source tree DIR (put first on
PYTHONPATH) in turn, interleaved, each on its own copy of the one folder generated; ``--reuse``
takes the folder already generated in --base instead of writing it again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FINISH = (
    "import sys; from memprobe.results.folder import ResultsFolder; from memprobe.run.session import finalize; "
    "finalize(ResultsFolder.open(sys.argv[1]), 'complete', render=True)"
)


def measured(argv: list[str], src: Path | None = None) -> dict:
    """Run ``argv`` under /usr/bin/time (memprobe from ``src`` when given): wall s, CPU s, peak RSS
    MB, exit code."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src.resolve()), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        done = subprocess.run(
            ["/usr/bin/time", "-o", out.name, "-f", "%e %U %S %M", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        wall, user, system, peak_kb = out.read().split()[-4:]
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
    return {
        "wall_s": float(wall),
        "cpu_s": float(user) + float(system),
        "peak_mb": int(peak_kb) / 1024,
        "exit": done.returncode,
    }


def row(hours: float, processes: int, rows: int, what: str, m: dict) -> str:
    failed = "" if m["exit"] == 0 else f" (exit {m['exit']})"
    return (
        f"| {hours:g} h | {processes} | {rows:,} | {what}{failed} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} "
        f"| {m['peak_mb']:,.0f} |"
    )


def measure_in_place(folder: Path, hours: float, processes: int, rows: int, recover: bool) -> None:
    """Finish and report ``folder`` itself, then (``recover``) generate it again and recover it as
    a killed memprobe left it: one folder's disk at a time."""
    from gen_long_record import generate

    m = measured([sys.executable, "-c", FINISH, str(folder)])
    print(row(hours, processes, rows, "finish", m), flush=True)
    m = measured([sys.executable, "-m", "memprobe", "report", str(folder)])
    print(row(hours, processes, rows, "report", m), flush=True)
    if recover:
        shutil.rmtree(folder)
        generate(folder, hours, processes)
        m = measured([sys.executable, "-m", "memprobe", "report", str(folder)])
        print(row(hours, processes, rows, "recover (killed)", m), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hours", type=float, nargs="+", default=[1, 8, 24, 72])
    p.add_argument("--processes", type=int, nargs="+", default=[3])
    p.add_argument("--recover", action="store_true", help="also recover a killed copy (twice the disk)")
    p.add_argument("--base", type=Path, default=Path(tempfile.gettempdir()), help="where the folders go")
    p.add_argument("--keep", action="store_true", help="keep the folders")
    p.add_argument(
        "--src", action="append", default=[], metavar="NAME=DIR", help="memprobe from the tree DIR"
    )
    p.add_argument("--reuse", action="store_true", help="the folders already generated in --base")
    p.add_argument(
        "--in-place",
        action="store_true",
        help="measure on the generated folder itself, no copy (72 h x 64: the JSON lines are 28.5 GB);"
        " with --recover the folder is generated a second time for it",
    )
    args = p.parse_args()
    sources: list[tuple[str, Path | None]] = [
        (name, Path(tree)) for name, _, tree in (s.partition("=") for s in args.src)
    ] or [("", None)]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.2f}")
    print("| job | processes | sample rows | step | wall s | CPU s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for processes in args.processes:
        for hours in args.hours:
            folder = args.base / f"memprobe-long-{hours:g}h-{processes}p"
            t0 = time.monotonic()
            sys.path.insert(0, str(HERE))
            from gen_long_record import INTERVAL_S, generate

            if not (args.reuse and folder.exists()):
                shutil.rmtree(folder, ignore_errors=True)
                generate(folder, hours, processes)
            ticks = int(hours * 3600 / INTERVAL_S)  # what generate() writes
            rows = ticks * processes - processes + 1
            mb = sum(f.stat().st_size for f in folder.glob("runs/*/*.jsonl")) / 2**20
            print(
                f"<!-- {rows:,} sample rows, {mb:,.0f} MB of JSON lines, ready in {time.monotonic() - t0:.0f} s -->",
                flush=True,
            )
            if args.in_place:
                measure_in_place(folder, hours, processes, rows, args.recover)
                if not args.keep:
                    shutil.rmtree(folder, ignore_errors=True)
                continue
            for name, src in sources:
                what = f"{name}: " if name else ""
                copy = folder.with_name(f"{folder.name}-{name or 'run'}")
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(folder, copy)
                killed = copy.with_name(copy.name + "-killed")
                if args.recover:
                    shutil.rmtree(killed, ignore_errors=True)
                    shutil.copytree(folder, killed)
                m = measured([sys.executable, "-c", FINISH, str(copy)], src)
                print(row(hours, processes, rows, what + "finish", m), flush=True)
                m = measured([sys.executable, "-m", "memprobe", "report", str(copy)], src)
                print(row(hours, processes, rows, what + "report", m), flush=True)
                if args.recover:
                    m = measured([sys.executable, "-m", "memprobe", "report", str(killed)], src)
                    print(row(hours, processes, rows, what + "recover (killed)", m), flush=True)
                if not args.keep:
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.rmtree(killed, ignore_errors=True)
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
