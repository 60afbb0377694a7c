"""spmd.AUTO's sharding search: choose.py is the entry (choose -> AutoPlan)."""
from .choose import AutoPlan, baseline, choose  # noqa: F401
