"""The benchmarks' one way to time: medians of interleaved runs."""
import time

import numpy as np


def interleaved(fs, runs):
    """Median milliseconds of each function, the runs of all of them interleaved so that
    they share the machine's state (other load, clocks) alike."""
    for f in fs:
        f()                                 # warm up (and compile)
    ts = [[] for _ in fs]
    for _ in range(runs):
        for f, t in zip(fs, ts):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
    return [1e3 * float(np.median(t)) for t in ts]
