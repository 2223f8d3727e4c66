"""memprobe.SharedList against a list of dicts, a detectron2-style serialized numpy list, numpy
records and Arrow, under fork, spawn and thread loaders, measured by memprobe itself.

    nice -n 10 .venv/bin/python benchmarks/bench_shared_list.py --rounds 5 --out /tmp/bench_shared_list.jsonl

Every round runs every (mode, container) pair once, in a new shuffled order (interleaved rounds:
the machine's load falls on every pair alike), each with ``memprobe.profile`` (2 workers,
``--items`` random items, batch 256, ``gc.freeze()`` before the workers start so that the
interpreter's own one-off copy is not counted against any container). Per run it keeps the
workers' USS growth (the main process's in thread mode), total PSS at its peak and items/s; the
build time of each container from the same columns is timed in this process, once a round. The
table gives the median over rounds and the range [min-max].

The records are memprobe's built-in annotation rows (``memprobe.datasets.records``: id, image
path, label, a box of 4 floats); every container's ``__getitem__`` returns the same dict.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

import memprobe
from memprobe.datasets import BACKENDS, ListDataset, RecordSpec, make_columns
from memprobe.datasets.records import Columns

CONTAINERS = ("list", "shared_list", "d2_serialized", "numpy", "arrow")
MODES = ("fork", "spawn", "thread")


class SerializedNumpyList:
    """detectron2's serialized list, written here from its description (detectron2
    ``DatasetFromList(serialize=True)`` / ``NumpySerializedList``, detectron2/data/common.py):
    each record pickled into a numpy uint8 array, all concatenated into one array, with the
    cumulative end offsets in an int64 array. A plain numpy buffer: spawn pickles it into every
    worker."""

    def __init__(self, records: Iterable[Any]) -> None:
        pieces = [
            np.frombuffer(pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8) for r in records
        ]
        self.ends = np.cumsum([len(p) for p in pieces], dtype=np.int64)
        self.buffer = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, index: int) -> Any:
        start = int(self.ends[index - 1]) if index > 0 else 0
        return pickle.loads(memoryview(self.buffer[start : int(self.ends[index])]))


class Records(ListDataset):
    """ListDataset's reads (the same dict per item) over any sequence of its record dicts: a
    list, a SharedList, a serialized list."""

    def __init__(self, records: Any) -> None:
        self.records = records


def record_dicts(columns: Columns) -> Iterator[dict]:
    """The rows as dicts, one at a time (a generator: a serialized container never holds them all)."""
    for i, path, label, box in zip(
        columns.ids.tolist(), columns.paths, columns.labels.tolist(), columns.boxes.tolist(), strict=True
    ):
        yield {"id": i, "path": path, "label": label, "box": box}


def build_from(container: str, columns: Columns) -> Dataset:
    if container in ("numpy", "arrow"):
        return BACKENDS[container](columns)
    if container == "list":
        return Records(list(record_dicts(columns)))
    if container == "shared_list":
        return Records(memprobe.SharedList(record_dicts(columns)))
    if container == "d2_serialized":
        return Records(SerializedNumpyList(record_dicts(columns)))
    raise ValueError(f"unknown container {container!r}; allowed: {', '.join(CONTAINERS)}")


def bench_dataset(container: str, records: int) -> Dataset:
    """The factory memprobe.profile imports by name ("bench_shared_list:bench_dataset")."""
    return build_from(container, make_columns(RecordSpec(records=records)))


def build_seconds(container: str, columns: Columns) -> float:
    start = time.perf_counter()
    dataset = build_from(container, columns)
    took = time.perf_counter() - start
    del dataset
    return took


def one_run(container: str, mode: str, args: argparse.Namespace, out: Path) -> dict:
    result = memprobe.profile(
        "bench_shared_list:bench_dataset",
        kwargs={"container": container, "records": args.records},
        mode=mode,
        workers=2,
        items=args.items,
        batch_size=256,
        gc_freeze=True,
        out=out,
    )
    result.assert_ok()
    s = result.summary
    growth = s.main_uss_growth_mb if mode == "thread" else s.worker_uss_growth_mb
    return {
        "container": container,
        "mode": mode,
        "growth_mb": growth,
        "growth_max_mb": s.main_uss_growth_mb if mode == "thread" else s.worker_uss_growth_max_mb,
        "total_pss_peak_mb": s.total_pss_peak_mb,
        "items_per_s": s.items_per_s,
        "items": s.items,
    }


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


def table(rows: list[dict]) -> str:
    lines = [
        "| mode | container | worker USS growth, MB | total PSS peak, MB | items/s | build, s |",
        "|---|---|---|---|---|---|",
    ]
    builds = {
        c: [r["build_s"] for r in rows if r.get("build_s") is not None and r["container"] == c]
        for c in CONTAINERS
    }
    for mode in MODES:
        for container in CONTAINERS:
            runs = [r for r in rows if r.get("mode") == mode and r["container"] == container]
            if not runs:
                continue
            lines.append(
                f"| {mode} | {container} | {spread([r['growth_mb'] for r in runs], '+.1f')} | "
                f"{spread([r['total_pss_peak_mb'] for r in runs], '.0f')} | "
                f"{spread([r['items_per_s'] for r in runs], ',.0f')} | "
                f"{spread(builds[container], '.2f') if builds[container] else '-'} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--items", type=int, default=40_000)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--containers", default=",".join(CONTAINERS))
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "bench_shared_list.jsonl")
    args = parser.parse_args()
    modes, containers = args.modes.split(","), args.containers.split(",")
    columns = make_columns(RecordSpec(records=args.records))
    shuffle = random.Random(0)
    rows: list[dict] = []
    with args.out.open("w") as log, tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for container in shuffle.sample(containers, len(containers)):
                row = {"round": rnd, "container": container, "build_s": build_seconds(container, columns)}
                rows.append(row)
                log.write(json.dumps(row) + "\n")
            pairs = [(m, c) for m in modes for c in containers]
            for mode, container in shuffle.sample(pairs, len(pairs)):
                row = {
                    "round": rnd,
                    **one_run(container, mode, args, Path(tmp) / f"{rnd}-{mode}-{container}"),
                }
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
