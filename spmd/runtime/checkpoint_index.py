"""The checkpoint index (index.json): what spmd.save writes and spmd.load trusts.

    {"format": "spmd-checkpoint-2", "block_bytes": 4194304,
     "tree": {"dict": [["params", {"dict": [["w", "*"]]}], ["step", "*"]]},
     "leaves": [{"path": "params/w", "kind": "array", "shape": [7, 10], "dtype": "float32",
                 "sharding": {"mesh_shape": [2, 2], "axis_names": ["data", "model"],
                              "devices": [0, 1, 2, 3], "spec": ["data", "model"], "partial": []},
                 "shards": [{"file": "l0_s0.npy", "box": [[0, 4], [0, 5]], "device": 0,
                             "bytes": 208, "sha256": "<hex of the file>",
                             "blocks": ["<hex of bytes 0..block_bytes>", ...]}, ...]},
                {"path": "step", "kind": "int", "shape": [], "dtype": "int64", "sharding": null,
                 "shards": [{"file": "l1_s0.npy", "box": [], "device": 0, ...}]}]}

`kind` says what to give back: "array" (numpy array or spmd.Array), "numpy_scalar", or a
Python scalar ("int", "float", "bool", "complex"). `shards` are exactly the distinct shard
boxes of `sharding` (null: one box, the whole array), each written once by the lowest
device holding it. `blocks` are the sha256 of each `block_bytes` piece of the file, so a
loader that reads only part of a file can still check every byte it reads.

`parse` validates every field (types, ranges, that the shards are exactly the boxes of
the sharding, so they cover the array once with no overlap, that file names stay inside
the checkpoint directory and are used once) and raises CheckpointError on the first
problem: whatever the index says, the loader never indexes out of range, allocates more
than the files hold, reads outside the directory, or returns a value nobody wrote.
"""
from __future__ import annotations

import json
import re

import numpy as np

from ..errors import CheckpointError, ShardingError
from ..ir.mesh import Mesh
from ..ir.mesh import Sharding
from ..tree import TreeDef

FORMAT = "spmd-checkpoint-2"
BLOCK_BYTES = 4 << 20
MIN_BLOCK, MAX_BLOCK = 1 << 16, 1 << 30      # a block always holds the whole .npy header
MAX_NDIM = 64                                 # numpy's own limit
MAX_TREE_DEPTH = 200
MAX_INDEX_BYTES = 1 << 30
MAX_ARRAY_BYTES = 1 << 60

# dtypes a checkpoint may hold: plain numbers and bools (never object, str or structured)
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "complex64", "complex128")
# Python scalar kinds and the dtype kind (np.dtype.kind) each is saved with
SCALAR_KINDS = {"int": "i", "float": "f", "bool": "b", "complex": "c"}
KINDS = ("array", "numpy_scalar") + tuple(SCALAR_KINDS)

_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}\.npy")
_HEX = re.compile(r"[0-9a-f]{64}")


def _check(cond, msg):
    if not cond:
        raise CheckpointError(msg)


# -- pieces shared by save and load -------------------------------------------------------
def file_name(leaf, shard):
    return f"l{leaf}_s{shard}.npy"


def check_file_name(name):
    """A shard file is a plain name inside the checkpoint directory: no separators, no
    `..`, not hidden, ends in .npy."""
    _check(isinstance(name, str) and _FILE_NAME.fullmatch(name) is not None and ".." not in name,
           f"checkpoint index names an unsafe file {str(name)[:80]!r} (shard files are plain "
           f"names inside the checkpoint directory)")
    return name


def shard_boxes(shape, sharding):
    """[(box, device)]: the distinct boxes of `sharding` over `shape`, each with the
    lowest device holding it (the one that writes it), in order of that device."""
    if sharding is None:
        return [(tuple((0, n) for n in shape), 0)]
    owners = {}
    for dev in sorted(sharding.mesh.devices.reshape(-1).tolist()):
        owners.setdefault(sharding.shard_box(shape, dev), dev)
    return sorted(((box, dev) for box, dev in owners.items()), key=lambda bd: bd[1])


def leaf_paths(td: TreeDef):
    """'params/w'-style names of the leaves of a tree, in flattening order (for the index
    and for error messages)."""
    out = []

    def go(t, prefix):
        if t.kind == "leaf":
            out.append(prefix or "<root>")
        elif t.kind == "dict":
            for k, c in zip(t.meta, t.children):
                go(c, f"{prefix}/{k}" if prefix else str(k))
        elif t.kind in ("list", "tuple"):
            for j, c in enumerate(t.children):
                go(c, f"{prefix}/{j}" if prefix else str(j))

    go(td, "")
    return out


# -- to JSON ---------------------------------------------------------------------------------
def tree_to_json(td: TreeDef):
    if td.kind == "leaf":
        return "*"
    if td.kind == "none":
        return None
    kids = [tree_to_json(c) for c in td.children]
    if td.kind == "dict":
        return {"dict": [[k, c] for k, c in zip(td.meta, kids)]}
    return {td.kind: kids}


def sharding_to_json(s: Sharding):
    m = s.mesh
    return {"mesh_shape": list(m.shape), "axis_names": list(m.axis_names),
            "devices": m.devices.reshape(-1).tolist(),
            "spec": [e if e is None or isinstance(e, str) else list(e) for e in s.spec],
            "partial": list(s.partial)}


def dumps(tree_json, leaves):
    return json.dumps({"format": FORMAT, "block_bytes": BLOCK_BYTES, "tree": tree_json, "leaves": leaves})


# -- from JSON, validated -----------------------------------------------------------------------
class Shard:
    __slots__ = ("file", "box", "device", "bytes", "sha256", "blocks")

    def __init__(self, file, box, device, nbytes, sha256, blocks):
        self.file, self.box, self.device = file, box, device
        self.bytes, self.sha256, self.blocks = nbytes, sha256, blocks


class Leaf:
    __slots__ = ("index", "path", "kind", "shape", "dtype", "sharding", "shards")

    def __init__(self, index, path, kind, shape, dtype, sharding, shards):
        self.index, self.path, self.kind, self.shape = index, path, kind, shape
        self.dtype, self.sharding, self.shards = dtype, sharding, shards

    def __repr__(self):
        return f"checkpoint leaf {self.path!r}"


class Index:
    __slots__ = ("block_bytes", "tree", "leaves")

    def __init__(self, block_bytes, tree, leaves):
        self.block_bytes, self.tree, self.leaves = block_bytes, tree, leaves


def _is_int(x, lo=0, hi=None):
    return isinstance(x, int) and not isinstance(x, bool) and x >= lo and (hi is None or x <= hi)


def parse(text, where="index.json") -> Index:
    """index.json text -> a validated Index, or a CheckpointError naming the problem."""
    try:
        j = json.loads(text)
    except (ValueError, RecursionError) as e:      # UnicodeDecodeError is a ValueError
        raise CheckpointError(f"{where} is not valid JSON: {str(e)[:200]}") from None
    _check(isinstance(j, dict) and j.get("format") == FORMAT,
           f"{where}: not an spmd checkpoint index (format {FORMAT!r} expected, got "
           f"{str(j.get('format') if isinstance(j, dict) else type(j).__name__)[:40]!r})")
    block = j.get("block_bytes")
    _check(_is_int(block, MIN_BLOCK, MAX_BLOCK), f"{where}: block_bytes {str(block)[:40]} must be an int in "
                                                 f"[{MIN_BLOCK}, {MAX_BLOCK}]")
    tree = _tree_from_json(j.get("tree"), where)
    leaves = j.get("leaves")
    _check(isinstance(leaves, list), f"{where}: 'leaves' must be a list")
    _check(tree.num_leaves == len(leaves), f"{where}: the tree has {tree.num_leaves} leaves but "
                                           f"{len(leaves)} are listed")
    out = [_leaf(i, e, block, where) for i, e in enumerate(leaves)]
    seen = set()
    for leaf in out:
        for s in leaf.shards:
            _check(s.file not in seen, f"{where}: file {s.file!r} is named by more than one shard")
            seen.add(s.file)
    return Index(block, tree, out)


def _tree_from_json(j, where, depth=0) -> TreeDef:
    _check(depth <= MAX_TREE_DEPTH, f"{where}: tree nested more than {MAX_TREE_DEPTH} deep")
    if j == "*":
        return TreeDef("leaf")
    if j is None:
        return TreeDef("none")
    if isinstance(j, dict) and len(j) == 1:
        (kind, kids), = j.items()
        if kind == "dict" and isinstance(kids, list) and all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in kids):
            keys = [p[0] for p in kids]
            _check(keys == sorted(set(keys)), f"{where}: dict keys {str(keys)[:80]} are not sorted and distinct")
            return TreeDef("dict", tuple(keys), [_tree_from_json(p[1], where, depth + 1) for p in kids])
        if kind in ("list", "tuple") and isinstance(kids, list):
            return TreeDef(kind, None, [_tree_from_json(c, where, depth + 1) for c in kids])
    raise CheckpointError(f"{where}: malformed tree node {str(j)[:80]}")


def _leaf(i, e, block, where) -> Leaf:
    _check(isinstance(e, dict), f"{where}: leaf {i} is not an object")
    path = e.get("path")
    _check(isinstance(path, str) and len(path) < 4096, f"{where}: leaf {i} has no path name")
    what = f"{where}: leaf {path!r}"
    kind = e.get("kind")
    _check(kind in KINDS, f"{what} has kind {str(kind)[:40]!r} (one of {', '.join(KINDS)})")
    shape = e.get("shape")
    _check(isinstance(shape, list) and len(shape) <= MAX_NDIM and all(_is_int(n) for n in shape),
           f"{what} has a bad shape {str(shape)[:80]}")
    shape = tuple(shape)
    dtype = e.get("dtype")
    _check(dtype in DTYPES, f"{what} has dtype {str(dtype)[:40]!r}; a checkpoint holds {', '.join(DTYPES)}")
    dtype = np.dtype(dtype)
    volume = dtype.itemsize
    for n in shape:
        volume *= max(n, 1)      # numpy refuses such shapes even when a dimension is 0
    _check(volume < MAX_ARRAY_BYTES, f"{what} has shape {list(shape)[:10]}: too large for an array")
    if kind != "array":
        _check(shape == () and e.get("sharding") is None, f"{what}: a {kind} leaf is 0-d and unsharded")
    if kind in SCALAR_KINDS:
        _check(dtype.kind == SCALAR_KINDS[kind], f"{what}: a Python {kind} cannot have dtype {dtype}")
    sharding = None if e.get("sharding") is None else _sharding(e["sharding"], len(shape), what)
    shards = e.get("shards")
    _check(isinstance(shards, list), f"{what} has no list of shards")
    got = [_shard(s, len(shape), block, f"{what} shard {k}") for k, s in enumerate(shards)]
    # the shards must be exactly the distinct boxes of the sharding: then they cover the
    # array once, without overlap, and every element loaded is one that was saved
    want = shard_boxes(shape, sharding)
    _check(len(got) == len(want), f"{what} lists {len(got)} shards; its sharding has {len(want)} distinct boxes")
    for s, (box, dev) in zip(got, want):
        _check(s.box == box and s.device == dev,
               f"{what}: shard {s.file} has box {[list(b) for b in s.box]} on device {s.device}, but its "
               f"sharding puts box {[list(b) for b in box]} first on device {dev}")
    return Leaf(i, path, kind, shape, dtype, sharding, got)


def _sharding(j, ndim, what) -> Sharding:
    _check(isinstance(j, dict), f"{what}: sharding is not an object")
    shape, names, devices = j.get("mesh_shape"), j.get("axis_names"), j.get("devices")
    spec, partial = j.get("spec"), j.get("partial")
    _check(isinstance(shape, list) and 0 < len(shape) <= MAX_NDIM and all(_is_int(n, 1) for n in shape),
           f"{what}: mesh_shape {str(shape)[:80]} must be a list of positive ints")
    size = 1
    for n in shape:
        size *= n                # Python ints: a hostile shape cannot overflow
    _check(isinstance(devices, list) and len(devices) == size and all(_is_int(d) for d in devices)
           and sorted(devices) == list(range(size)),
           f"{what}: the mesh {shape} has {size} devices but 'devices' is not a permutation of 0..{size - 1}")
    _check(isinstance(names, list) and all(isinstance(a, str) for a in names),
           f"{what}: axis_names must be a list of strings")
    _check(isinstance(spec, list) and len(spec) == ndim and all(
        e is None or isinstance(e, str) or (isinstance(e, list) and e and all(isinstance(a, str) for a in e))
        for e in spec), f"{what}: spec {str(spec)[:80]} must have {ndim} entries, each null, an axis or a list of axes")
    _check(partial == [], f"{what}: partial {str(partial)[:80]} must be [] (saved arrays hold whole values)")
    try:
        mesh = Mesh(shape, names, np.asarray(devices, np.int64).reshape(shape))
        return Sharding(mesh, [tuple(e) if isinstance(e, list) else e for e in spec])
    except ShardingError as err:        # unknown or repeated axes, bad names
        raise CheckpointError(f"{what}: saved sharding is invalid: {err}") from None


def _shard(s, ndim, block, what) -> Shard:
    _check(isinstance(s, dict), f"{what} is not an object")
    name = check_file_name(s.get("file"))
    box = s.get("box")
    _check(isinstance(box, list) and len(box) == ndim and all(
        isinstance(b, list) and len(b) == 2 and _is_int(b[0]) and _is_int(b[1], b[0]) for b in box),
        f"{what} ({name}) has a bad box {str(box)[:80]}")
    dev, nbytes, sha, blocks = s.get("device"), s.get("bytes"), s.get("sha256"), s.get("blocks")
    _check(_is_int(dev), f"{what} ({name}) has a bad device {str(dev)[:40]}")
    _check(_is_int(nbytes, 1), f"{what} ({name}) has a bad byte count {str(nbytes)[:40]}")
    _check(isinstance(sha, str) and _HEX.fullmatch(sha), f"{what} ({name}) has no sha256")
    _check(isinstance(blocks, list) and len(blocks) == -(-nbytes // block)
           and all(isinstance(h, str) and _HEX.fullmatch(h) for h in blocks),
           f"{what} ({name}) must list the sha256 of each of its {-(-nbytes // block)} blocks")
    return Shard(name, tuple((b[0], b[1]) for b in box), dev, nbytes, sha, blocks)
