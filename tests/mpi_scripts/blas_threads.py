"""Prints this rank's BLAS thread count after spmd.init() under MPI."""
from threadpoolctl import threadpool_info

import spmd

spmd.init()
blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(f"BLAS {spmd.process_index()} {min(blas)}", flush=True)
