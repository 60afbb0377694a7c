"""numpy in: tracing a user's function into a Graph. The numpy-API table (numpy_api.py)
with the library functions behind it (numpy_lib/), indexing and writes
(indexing.py, functionalize.py), structured control flow (control.py), reverse-mode
autodiff (autodiff.py), spmd.random's keys (random.py) and the guard on np.random
(random_guard.py)."""
