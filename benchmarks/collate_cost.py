"""What torch's ``default_collate`` costs on a batch of small numpy arrays, against one
``numpy.stack`` (what ThreadDataLoader's worker threads do for such a batch,
``memprobe/loaders/thread/collate.py``), in one thread: the cost without the GIL hand-offs that
two worker threads add to it (``docs/perf/threads.md``, "Cheap items").

    python benchmarks/collate_cost.py [--batch 256] [--calls 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch.utils.data import default_collate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=256, help="arrays per batch (256)")
    ap.add_argument("--calls", type=int, default=300, help="calls per timing (300)")
    ap.add_argument("--repeats", type=int, default=3, help="timings per case, interleaved (3)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    boxes = [rng.random(4, dtype=np.float32) for _ in range(args.batch)]
    records = [{"id": i, "path": f"{i}.jpg", "label": i % 10, "box": b} for i, b in enumerate(boxes)]
    cases = {
        "default_collate(boxes)": lambda: default_collate(boxes),
        "torch.as_tensor(np.stack(boxes))": lambda: torch.as_tensor(np.stack(boxes)),
        "default_collate(records)": lambda: default_collate(records),
    }
    assert torch.equal(cases["default_collate(boxes)"](), cases["torch.as_tensor(np.stack(boxes))"]())
    for _ in range(args.repeats):
        for name, call in cases.items():
            t0 = time.perf_counter()
            for _ in range(args.calls):
                call()
            print(f"{name}: {(time.perf_counter() - t0) / args.calls * 1e3:.3f} ms per batch of {args.batch}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
