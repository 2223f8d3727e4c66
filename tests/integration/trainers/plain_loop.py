"""A plain training loop inside ``memprobe.watching()`` (tests/integration/test_trainer_callbacks.py):
``python plain_loop.py DIR [raise]``: a list of dicts, 2 forked DataLoader workers, three epochs
(``raise``: the loop raises in its second epoch); each set of scalars memprobe gives is written as
one JSON line to DIR/scalars.jsonl."""

from __future__ import annotations

import json
import sys

from fit_data import Lists
from torch.utils.data import DataLoader

import memprobe


def main() -> None:
    out, fail = sys.argv[1], sys.argv[2:] == ["raise"]
    data = Lists(200_000)
    with open(f"{out}/scalars.jsonl", "w") as f:
        log = lambda values: print(json.dumps(values), file=f, flush=True)  # noqa: E731
        with memprobe.watching(f"{out}/memprobe", every_s=1.0, on_scalars=log, render=False):
            for epoch in range(3):
                loader = DataLoader(
                    data, batch_size=256, shuffle=True, num_workers=2, multiprocessing_context="fork"
                )
                for i, batch in enumerate(loader):
                    batch[0].sum()
                    if fail and epoch == 1 and i == 100:
                        raise RuntimeError("the training loop failed")


if __name__ == "__main__":
    main()
