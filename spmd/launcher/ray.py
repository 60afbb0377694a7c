"""Starting the ranks on Ray. The placement itself lives with the Ray runtime that uses
it (runtime/ray_placement.py: runtime/ must not import launcher/); re-exported here for
the launcher and for scripts that imported it from here."""
from ..runtime.ray_placement import (LOOPBACK, STRATEGIES, connect, cpus_per_rank,  # noqa: F401
                                     default_num_devices, place_ranks, restart_rank)
