"""calibrate.measure_crowding under mpiexec (SPMD_CACHE_DIR holds a stored machine):
every process gets the same figures (the mean of the processes' timings), and the
chains' rounds meet on every process alike."""
import json

import spmd
from spmd.jit import calibrate

spmd.init()
mesh = spmd.Mesh((spmd.device_count(),), ("x",))
got = calibrate.measure_crowding(mesh, {"latency": 2e-5, "bandwidth": 1e9}, quick=True, runs=3)
print(f"CROWDING {spmd.process_index()} {json.dumps(got, sort_keys=True)}", flush=True)
