"""spmd.save / spmd.load: sharded checkpoints that load onto any mesh.

Layout of a checkpoint directory:
    index.json          tree structure; per leaf: global shape, dtype, sharding, and its
                        shards (file, global box, sha256)
    l{leaf}_s{k}.npy    one file per distinct shard box (replicas are written once, by
                        the lowest device holding the box)

No pickle anywhere: .npy files are read with allow_pickle=False, the index is JSON and
is validated field by field. A save is atomic: everything is written under
`<path>.tmp`, fsynced, then renamed to `<path>` (an existing checkpoint at `<path>` is
replaced only after the new one is complete), so a crash mid-save leaves the previous
checkpoint intact. Each process writes the shards of its own devices (under MPI every
rank writes its own; rank 0 writes the index after a barrier).

`load` reshards: each device's box is cut out of the saved shards that overlap it,
reading only those slices (memory-mapped), so a checkpoint saved on a 2x2 mesh loads on
1, 2 or 8 devices. Every file read is checked against its sha256 first.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np

from ..errors import CheckpointError, SpmdError
from ..ir import dtypes
from ..sharding.mesh import Mesh
from ..sharding.spec import Sharding
from ..tree import broadcast_prefix, tree_flatten, tree_unflatten, TreeDef
from .array import Array
from .context import get_runtime

FORMAT = "spmd-checkpoint-1"


# -- tree structure as JSON ----------------------------------------------------------------
def _tree_json(td: TreeDef):
    if td.kind == "leaf":
        return "*"
    if td.kind == "none":
        return None
    kids = [_tree_json(c) for c in td.children]
    if td.kind == "dict":
        return {"dict": [[k, c] for k, c in zip(td.meta, kids)]}
    return {td.kind: kids}


def _tree_from_json(j, depth=0) -> TreeDef:
    if depth > 100:
        raise CheckpointError("index: tree nested too deeply")
    if j == "*":
        return TreeDef("leaf")
    if j is None:
        return TreeDef("none")
    if isinstance(j, dict) and len(j) == 1:
        (kind, kids), = j.items()
        if kind == "dict" and isinstance(kids, list) and all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in kids):
            return TreeDef("dict", tuple(p[0] for p in kids), [_tree_from_json(p[1], depth + 1) for p in kids])
        if kind in ("list", "tuple") and isinstance(kids, list):
            return TreeDef(kind, None, [_tree_from_json(c, depth + 1) for c in kids])
    raise CheckpointError(f"index: malformed tree node {str(j)[:80]}")


def _sharding_json(s: Sharding):
    m = s.mesh
    return {"mesh_shape": list(m.shape), "axis_names": list(m.axis_names),
            "devices": m.devices.reshape(-1).tolist(),
            "spec": [e if e is None or isinstance(e, str) else list(e) for e in s.spec]}


# -- save -----------------------------------------------------------------------------------
def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_npy(path, arr):
    with open(path, "wb") as f:
        np.save(f, np.asarray(arr), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def save(path, tree):
    """Write `tree` (numpy arrays, scalars, spmd.Arrays) to the directory `path`."""
    rt = get_runtime()
    path = os.path.abspath(os.fspath(path))
    tmp = path + ".tmp"
    leaves, td = tree_flatten(tree)
    me = rt.process_index()
    if me == 0:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        os.makedirs(tmp)
    _barrier(rt)
    entries = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Array):
            sh = leaf.sharding.replace(partial=())
            shape, dt = leaf.shape, dtypes.canon(leaf.dtype)
            owners = {}
            for dev in sh.mesh.devices.reshape(-1).tolist():
                owners.setdefault(sh.shard_box(shape, dev), dev)
            local = set(rt.local_devices(sh.mesh))
            mine = {box: d for box, d in owners.items() if d in local}
            data = rt.get({d: leaf._handles[d] for d in mine.values()}) if mine else {}
            shards = []
            for k, (box, dev) in enumerate(sorted(owners.items(), key=lambda kv: kv[1])):
                name = f"l{i}_s{k}.npy"
                sha = None
                if dev in local:
                    piece = np.asarray(data[dev])[tuple(slice(0, b - a) for a, b in box)]
                    sha = _write_npy(os.path.join(tmp, name), piece)
                shards.append({"file": name, "box": [list(b) for b in box], "sha256": sha, "device": dev})
            entries.append({"shape": list(shape), "dtype": dt, "sharding": _sharding_json(sh), "shards": shards})
        else:
            arr = np.asarray(leaf)
            dt = dtypes.canon(arr.dtype)
            sha = _write_npy(os.path.join(tmp, f"l{i}_s0.npy"), arr.astype(dt)) if me == 0 else None
            entries.append({"shape": list(arr.shape), "dtype": dt, "sharding": None,
                            "shards": [{"file": f"l{i}_s0.npy", "box": [[0, n] for n in arr.shape],
                                        "sha256": sha, "device": 0}]})
    entries = _gather_hashes(rt, entries)
    if me == 0:
        index = {"format": FORMAT, "tree": _tree_json(td), "leaves": entries}
        with open(os.path.join(tmp, "index.json"), "w") as f:
            json.dump(index, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync(tmp)
        old = None
        if os.path.exists(path):
            old = path + ".old"
            if os.path.exists(old):
                shutil.rmtree(old)
            os.rename(path, old)
        os.rename(tmp, path)
        _fsync(os.path.dirname(path))
        if old:
            shutil.rmtree(old)
    _barrier(rt)
    return path


def _barrier(rt):
    b = getattr(rt, "barrier", None)
    if b is not None and rt.process_count() > 1:
        b()


def _gather_hashes(rt, entries):
    """Under MPI each rank knows the hashes of the files it wrote: merge them on every rank."""
    if rt.process_count() == 1:
        return entries
    mine = {(i, k): s["sha256"] for i, e in enumerate(entries) for k, s in enumerate(e["shards"]) if s["sha256"]}
    allh = rt.world.allgather(mine)
    for d in allh:
        for (i, k), sha in d.items():
            entries[i]["shards"][k]["sha256"] = sha
    return entries


# -- load -----------------------------------------------------------------------------------
def _check(cond, msg):
    if not cond:
        raise CheckpointError(msg)


def _read_index(path):
    ipath = os.path.join(path, "index.json")
    _check(os.path.isdir(path), f"no checkpoint at {path}")
    _check(os.path.isfile(ipath), f"checkpoint {path} has no index.json (an unfinished save?)")
    try:
        with open(ipath) as f:
            index = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{ipath} is not valid JSON: {e}") from None
    _check(isinstance(index, dict) and index.get("format") == FORMAT,
           f"{ipath}: not an spmd checkpoint index (format {FORMAT!r} expected)")
    _check(isinstance(index.get("leaves"), list), f"{ipath}: 'leaves' must be a list")
    return index


def _safe_file(path, name):
    _check(isinstance(name, str) and name and os.path.basename(name) == name and name not in (".", "..")
           and not name.startswith("."), f"checkpoint index names an unsafe file {name!r}")
    full = os.path.join(path, name)
    real = os.path.realpath(full)
    _check(os.path.dirname(real) == os.path.realpath(path),
           f"checkpoint file {name!r} resolves outside the checkpoint directory")
    _check(os.path.isfile(real), f"checkpoint file {name} is missing from {path}")
    return full


def _int_list(x, n=None):
    return isinstance(x, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in x) \
        and (n is None or len(x) == n)


def _validate_leaf(i, e):
    _check(isinstance(e, dict), f"index: leaf {i} is not an object")
    _check(_int_list(e.get("shape")), f"index: leaf {i} has a bad shape {e.get('shape')!r}")
    _check(e.get("dtype") in dtypes.DTYPES, f"index: leaf {i} has an unsupported dtype {e.get('dtype')!r}")
    shards = e.get("shards")
    _check(isinstance(shards, list) and shards, f"index: leaf {i} has no shards")
    nd = len(e["shape"])
    for s in shards:
        _check(isinstance(s, dict) and isinstance(s.get("sha256"), str) and len(s["sha256"]) == 64,
               f"index: leaf {i} has a shard without a sha256")
        _check(isinstance(s.get("file"), str), f"index: leaf {i} has a shard whose file is {s.get('file')!r}")
        box = s.get("box")
        _check(isinstance(box, list) and len(box) == nd and all(
            _int_list(b, 2) and b[0] <= b[1] <= n for b, n in zip(box, e["shape"])),
            f"index: leaf {i} shard {s.get('file')!r} has a box {box!r} outside shape {e['shape']}")


class _Source:
    """The saved shards of one leaf, opened lazily and checked once."""

    def __init__(self, path, i, e):
        self.path, self.i, self.e = path, i, e
        self.dtype = np.dtype(e["dtype"])
        self._open = {}

    def shard(self, s):
        name = s.get("file")
        arr = self._open.get(name)
        if arr is None:
            full = _safe_file(self.path, name)
            if os.environ.get("SPMD_CHECKPOINT_VERIFY", "1") != "0":
                h = hashlib.sha256()
                with open(full, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 22), b""):
                        h.update(chunk)
                _check(h.hexdigest() == s["sha256"], f"checkpoint file {name} is corrupt (sha256 mismatch)")
            try:
                arr = np.load(full, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, EOFError) as err:
                raise CheckpointError(f"checkpoint file {name} is not a readable .npy: {err}") from None
            want = tuple(b - a for a, b in s["box"])
            _check(arr.shape == want and arr.dtype == self.dtype,
                   f"checkpoint file {name} holds {arr.dtype}{list(arr.shape)} but the index says "
                   f"{self.dtype}{list(want)}")
            self._open[name] = arr
        return arr

    def read_box(self, box):
        """The global region `box` ((start, stop) per dim), cut from the overlapping shards."""
        out = np.zeros(tuple(b - a for a, b in box), self.dtype)
        covered = 0
        for s in self.e["shards"]:
            lo = [max(a, sa) for (a, _), (sa, _) in zip(box, s["box"])]
            hi = [min(b, sb) for (_, b), (_, sb) in zip(box, s["box"])]
            if any(l >= h for l, h in zip(lo, hi)) and out.size:
                continue
            src = self.shard(s)
            if not out.size:
                continue
            out[tuple(slice(l - a, h - a) for l, h, (a, _) in zip(lo, hi, box))] = \
                src[tuple(slice(l - sa, h - sa) for l, h, (sa, _) in zip(lo, hi, s["box"]))]
            covered += int(np.prod([h - l for l, h in zip(lo, hi)]))
        _check(covered >= out.size, f"checkpoint leaf {self.i}: the saved shards do not cover region {box}")
        return out


def load(path, shardings=None):
    """Read a checkpoint. shardings: None -> numpy arrays; a Mesh -> replicated on it;
    a Sharding or a tree of them (None = numpy) -> spmd.Arrays split that way."""
    path = os.path.abspath(os.fspath(path))
    index = _read_index(path)
    td = _tree_from_json(index.get("tree"))
    entries = index["leaves"]
    _check(td.num_leaves == len(entries), f"index: the tree has {td.num_leaves} leaves but {len(entries)} are listed")
    for i, e in enumerate(entries):
        _validate_leaf(i, e)
    skeleton = tree_unflatten(td, [0] * len(entries))
    if shardings is None or isinstance(shardings, (Mesh, Sharding)):
        targets = [shardings] * len(entries)
    else:
        try:
            targets = broadcast_prefix(shardings, skeleton, is_leaf=lambda x: isinstance(x, (Sharding, Mesh)))
        except ValueError as err:
            raise CheckpointError(f"load: shardings do not match the checkpoint's tree: {err}") from None
    out = []
    for i, (e, target) in enumerate(zip(entries, targets)):
        src = _Source(path, i, e)
        shape = tuple(e["shape"])
        if target is None:
            out.append(src.read_box(tuple((0, n) for n in shape)))
            continue
        if isinstance(target, Mesh):
            target = Sharding(target, (None,) * len(shape))
        target = target.for_rank(len(shape), f"checkpoint leaf {i}")
        rt = get_runtime()
        handles = {}
        local_shape = target.local_shape(shape)
        for dev in rt.local_devices(target.mesh):
            box = target.shard_box(shape, dev)
            piece = src.read_box(box)
            padded = np.zeros(local_shape, src.dtype)
            padded[tuple(slice(0, b - a) for a, b in box)] = piece
            handles[dev] = rt.put(dev, padded)
        out.append(Array(shape, src.dtype, target, handles, rt))
    return tree_unflatten(td, out)


def latest(directory):
    """The newest complete checkpoint under `directory` (names sort by step), or None."""
    if not os.path.isdir(directory):
        return None
    names = sorted(n for n in os.listdir(directory)
                   if not n.endswith((".tmp", ".old")) and os.path.isfile(os.path.join(directory, n, "index.json")))
    return os.path.join(directory, names[-1]) if names else None


__all__ = ["save", "load", "latest", "CheckpointError", "SpmdError"]
