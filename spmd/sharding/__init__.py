from .mesh import Mesh  # noqa: F401
from .spec import Sharding  # noqa: F401
