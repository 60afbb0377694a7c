"""How a private Ray's raylet starts a Python worker: run as a script (not imported) by
the raylet, in place of Ray's own setup_worker.py (transports/ray/ray_private.py says so),

    python ray_worker_setup.py WORKER_ARGS...

Ray's setup_worker.py imports ray (~0.4 s of CPU on a 2-core machine) only to read the
worker's runtime-env context and exec the worker, which then imports ray again. A rank
actor's worker has no runtime env: this execs the worker at once, with the standard
library alone, and with SPMD_IMPORT_LAZY=1 (spmd/__init__.py: its `import spmd` loads
none of the API until something uses it). A worker with anything to set up (a runtime env's variables, another
interpreter, a command prefix, another entry point; a worker of another language) goes
through Ray's own script, given the same arguments.
"""
import importlib.util
import json
import os
import sys

CONTEXT = "--serialized-runtime-env-context"
LANGUAGE = "--language"


def plain_worker(args):
    """The worker's own arguments when it needs nothing set up (a Python worker with an
    empty runtime-env context), else None."""
    context, language, rest = None, None, []
    for a in args:
        if a.startswith(CONTEXT + "="):
            context = a[len(CONTEXT) + 1:]
        elif a.startswith(LANGUAGE + "="):
            language = a[len(LANGUAGE) + 1:]
        elif a.startswith((CONTEXT, LANGUAGE)):
            return None                # another spelling: Ray's script reads it
        else:
            rest.append(a)
    if language != "PYTHON" or not rest:
        return None
    try:
        c = json.loads(context) if context else {}
    except ValueError:
        return None
    if not isinstance(c, dict):
        return None
    empty = not c.get("command_prefix") and not c.get("env_vars") and not c.get("override_worker_entrypoint") \
        and c.get("py_executable") in (None, sys.executable) and not c.get("java_jars")
    known = set(c) <= {"command_prefix", "env_vars", "py_executable", "override_worker_entrypoint", "java_jars"}
    return rest if empty and known else None


def ray_setup_worker():
    """Ray's own setup_worker.py (found without importing ray)."""
    ray = importlib.util.find_spec("ray").submodule_search_locations[0]
    return os.path.join(ray, "_private", "workers", "setup_worker.py")


def main(args):
    rest = plain_worker(args)
    if rest is None:
        os.execv(sys.executable, [sys.executable, ray_setup_worker()] + args)
    # a rank actor runs compiled programs, no user script: spmd's API loads when first
    # used (spmd/__init__.py), not when the actor's class imports spmd
    os.environ["SPMD_IMPORT_LAZY"] = "1"
    os.execv(sys.executable, [sys.executable] + rest)


if __name__ == "__main__":
    main(sys.argv[1:])
