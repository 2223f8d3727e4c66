import os
import time

import memprobe

pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        data = [str(i) for i in range(100_000)]
        for _ in range(10):
            memprobe.mark(10)
            time.sleep(0.1)
        os._exit(0)
    pids.append(pid)
for p in pids:
    os.waitpid(p, 0)
