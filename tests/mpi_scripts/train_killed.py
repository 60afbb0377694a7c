"""examples/train_gpt.py with its arguments, where rank KILL_RANK is SIGKILLed just
before step KILL_AT (environment) -- a rank lost in the middle of training. Rank 0
prints the losses it saw as `LOSSES [...]`."""
import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import spmd  # noqa: E402
import train_gpt  # noqa: E402

KILL_AT = int(os.environ.get("KILL_AT", "-1"))
KILL_RANK = int(os.environ.get("KILL_RANK", "1"))
_batches = train_gpt.batches


def batches(*args, **kwargs):
    for item in _batches(*args, **kwargs):
        if item[0] == KILL_AT and spmd.process_index() == KILL_RANK:
            os.kill(os.getpid(), signal.SIGKILL)
        yield item


train_gpt.batches = batches
losses = train_gpt.main(sys.argv[1:])
if spmd.process_index() == 0:
    print("LOSSES", json.dumps([float(v) for v in losses]), flush=True)
    rt = spmd.runtime.current_runtime.get_runtime()
    if rt.name == "ray":                  # where each rank actor ran, by node address
        import ray
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        print("RANK NODES", json.dumps({w["rank"]: ips[w["node"]] for w in rt.where()}), flush=True)
        print("RANK NICE", json.dumps([rt.call_on(d, lambda: os.getpriority(os.PRIO_PROCESS, 0))
                                       for d in range(rt.num_devices)]), flush=True)
