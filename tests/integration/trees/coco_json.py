"""A synthetic COCO-style instances file for the tree programs (see coco.py), written without
torch so that the tests make it in a second:

    python coco_json.py instances.json 60000
"""

from __future__ import annotations

import json
import os
import random
import sys


def make_coco_json(path: str, annotations: int, seed: int = 0) -> None:
    """Write a COCO-style instances file: images, categories and ``annotations`` annotation
    dicts (polygon segmentation of 6..24 points, bbox, area, ids), floats rounded as COCO's."""
    rng = random.Random(seed)
    images = max(1, annotations // 7)
    anns = []
    for i in range(annotations):
        x, y = rng.uniform(0, 600), rng.uniform(0, 400)
        w, h = rng.uniform(4, 200), rng.uniform(4, 200)
        poly = [
            round(v, 2)
            for _ in range(rng.randint(4, 12))
            for v in (x + rng.uniform(0, w), y + rng.uniform(0, h))
        ]
        anns.append(
            {
                "segmentation": [poly],
                "area": round(w * h * 0.6, 4),
                "iscrowd": 0,
                "image_id": 100_000 + i % images,
                "bbox": [round(x, 2), round(y, 2), round(w, 2), round(h, 2)],
                "category_id": 1 + i % 80,
                "id": 900_000 + i,
            }
        )
    obj = {
        "info": {"description": "memprobe tree tests (synthetic COCO-style)"},
        "images": [
            {"id": 100_000 + k, "file_name": f"{100_000 + k:012d}.jpg", "width": 640, "height": 480}
            for k in range(images)
        ],
        "categories": [{"id": c, "name": f"class{c}"} for c in range(1, 81)],
        "annotations": anns,
    }
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(json.dumps(obj))  # the C encoder at once: json.dump encodes piece by piece, 3x slower
    os.replace(tmp, path)


if __name__ == "__main__":
    make_coco_json(sys.argv[1], int(sys.argv[2]))
