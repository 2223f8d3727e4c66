import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))  # shapes.py beside it
from shapes import coco

from memprobe.probe.object_map import walk

ds = coco(100_000)
t, c = time.monotonic(), time.process_time()
m = walk(ds)
print(
    m.objects,
    "objects",
    round(time.monotonic() - t, 2),
    "s",
    round(time.process_time() - c, 2),
    "CPU-s",
    m.objects / (time.process_time() - c),
    "per CPU-s",
)
