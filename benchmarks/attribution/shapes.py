"""Datasets shaped like users': a pycocotools-like COCO index, tokenized text."""

import numpy as np
from torch.utils.data import Dataset


class CocoIndex(Dataset):
    """What pycocotools' COCO keeps: the json's dict, and its indexes over the same objects."""

    def __init__(self, images=100_000, per_image=3):
        rng = np.random.default_rng(0)
        imgs = [
            {"id": i, "file_name": f"train2017/{i:012d}.jpg", "height": 480, "width": 640}
            for i in range(images)
        ]
        anns = [
            {
                "id": k,
                "image_id": k // per_image,
                "category_id": int(c),
                "bbox": [float(x) for x in b],
                "area": float(b[2] * b[3]),
                "iscrowd": 0,
            }
            for k, (b, c) in enumerate(
                zip(
                    rng.random((images * per_image, 4)) * 600,
                    rng.integers(1, 91, images * per_image),
                    strict=True,
                )
            )
        ]
        cats = [{"id": c, "name": f"category {c}", "supercategory": "thing"} for c in range(1, 91)]
        self.dataset = {"images": imgs, "annotations": anns, "categories": cats}
        self.anns = {a["id"]: a for a in anns}
        self.imgs = {i["id"]: i for i in imgs}
        self.imgToAnns = {}
        for a in anns:
            self.imgToAnns.setdefault(a["image_id"], []).append(a)
        self.ids = list(self.imgs)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        img = self.imgs[self.ids[i]]
        boxes = [a["bbox"] for a in self.imgToAnns[img["id"]]]
        return len(img["file_name"]), np.asarray(boxes, dtype=np.float32).sum()


class Tokenized(Dataset):
    """Tokenized text as lists of ints; the raw text kept and never read."""

    def __init__(self, n=100_000, length=64):
        rng = np.random.default_rng(0)
        self.input_ids = [rng.integers(1000, 50000, length).tolist() for _ in range(n)]
        self.texts = [f"document {i}: " + "lorem ipsum dolor sit amet " * 8 for i in range(n)]

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, i):
        return np.asarray(self.input_ids[i], dtype=np.int64)


def coco(images=100_000):
    return CocoIndex(images)


def tokenized(n=100_000):
    return Tokenized(n)
