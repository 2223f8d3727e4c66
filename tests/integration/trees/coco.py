"""What every tree program shares, after the structure of the public demonstration of
copy-on-access ("Demystify RAM Usage in Multi-Process Data Loaders", Yuxin Wu, 2022;
github.com/ppwwyyxx/RAM-multiprocess-dataloader): COCO-style annotations loaded from a JSON file
as a list of dicts (``create_coco``), the same records pickled into one uint8 array plus an
offsets array (``NumpySerializedList``, as detectron2 does), a map-style dataset over either, and
the demonstration's worker loop (read every record and pickle it), bounded in time so that a
program ends on its own.

A program imports this module as ``coco`` (the script's folder is first on ``sys.path``; spawn
children get the same path). Each worker prints one line ``TREE {"pid": ..., "uss_mb": ...}``
before it exits: its own private memory as it read it itself, for the tests to compare with
memprobe's figure. The annotations file itself is written by coco_json.py.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from typing import Any

import numpy as np


def create_coco(path: str) -> list[Any]:
    with open(path) as f:
        obj = json.load(f)
    return obj["annotations"]


class NumpySerializedList:
    """Each record pickled into one uint8 array, with an int64 array of end offsets: two
    objects with one reference count each, whatever the number of records."""

    def __init__(self, lst: list) -> None:
        def _serialize(data: Any) -> np.ndarray:
            return np.frombuffer(pickle.dumps(data, protocol=-1), dtype=np.uint8)

        parts = [_serialize(x) for x in lst]
        self._addr = np.cumsum(np.asarray([len(x) for x in parts], dtype=np.int64))
        self._lst = np.concatenate(parts)

    def __len__(self) -> int:
        return len(self._addr)

    def __getitem__(self, idx: int) -> Any:
        start = 0 if idx == 0 else self._addr[idx - 1].item()
        end = self._addr[idx].item()
        return pickle.loads(memoryview(self._lst[start:end]))


class DatasetFromList:
    """A map-style dataset (what torch's DataLoader and start_processes take). Not a subclass of
    torch's Dataset, so that the programs that do not use torch (os.fork, Pool, spawn) do not
    import it: each import costs a second or two of CPU per process in the tests."""

    def __init__(self, lst: Any) -> None:
        self.lst = lst

    def __len__(self) -> int:
        return len(self.lst)

    def __getitem__(self, idx: int) -> Any:
        return self.lst[idx]


def build(data: str, path: str) -> DatasetFromList:
    """``list``: the annotations as loaded (a list of dicts); ``numpy``: serialized, the list
    dropped. Under `memprobe record`, once memprobe has sampled this process: what it builds is
    then seen as built, however late the sampler's first tick (under load it once came after a
    rank had built its data: built -0.4 MB)."""
    wait_until_sampled()
    records = create_coco(path)
    return DatasetFromList(records if data == "list" else NumpySerializedList(records))


def scan(dataset: Any, seconds: float, *, at_least: int = 0) -> int:
    """The demonstration's worker: read each record and pickle it, pass after pass, until
    ``seconds`` have gone by and ``at_least`` records were read (a list of 120k dicts takes ~1 s
    a pass on one free core). A short sleep every 500 records stands for the demonstration's
    fake latency and spreads the copying over a few seconds."""
    deadline = time.monotonic() + seconds
    n = 0
    while True:
        for i in range(len(dataset)):
            pickle.dumps(dataset[i])
            n += 1
            if n % 500 == 0:
                time.sleep(0.001)
                if n >= at_least and time.monotonic() >= deadline:
                    return n


def wait_until_sampled(within: float = 120.0) -> None:
    """Until `memprobe record` has written a sample of this process (its run's folder is where
    the job's MEMPROBE_MARK_FILE lies; samples.jsonl is flushed each tick): an event, where a
    fixed wait would assume the sampler's pace. Without memprobe (run alone), at once."""
    marks = os.environ.get("MEMPROBE_MARK_FILE")
    if not marks:
        return
    samples, mine = os.path.join(os.path.dirname(marks), "samples.jsonl"), f'"pid": {os.getpid()},'
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(samples) as f:
                if mine in f.read():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"no sample of pid {os.getpid()} in {samples} within {within} s")


def own_uss_mb() -> float:
    with open("/proc/self/smaps_rollup") as f:
        kb = sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
    return kb / 1024


def report(**facts: Any) -> None:
    line = "TREE " + json.dumps({"pid": os.getpid(), "uss_mb": round(own_uss_mb(), 1), **facts}) + "\n"
    os.write(1, line.encode())  # one write: print's text and newline may interleave with a sibling's


def worker_main(dataset: Any, seconds: float, hold: float, **facts: Any) -> None:
    """Scan, then hold still for ``hold`` s (so the last reading of the worker is of its final
    state), then say how much private memory it has."""
    # Over a list, one whole pass at least (however loaded the machine): every worker copies it
    # all. A serialized dataset has nothing to copy, and a pass over it is three times as slow.
    n = scan(dataset, seconds, at_least=len(dataset) if isinstance(dataset.lst, list) else 0)
    time.sleep(hold)
    report(items=n, **facts)


def arguments(description: str, **extra: Any) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", required=True, help="COCO-style instances file (see make_coco_json)")
    p.add_argument("--data", choices=("list", "numpy"), default="list")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seconds", type=float, default=4.0, help="how long each worker reads records")
    p.add_argument("--hold", type=float, default=1.5, help="how long each worker holds still before it exits")
    return p
