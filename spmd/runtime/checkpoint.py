"""spmd.save / spmd.load: sharded checkpoints that load onto any mesh.

A checkpoint is a directory:
    index.json          the tree, and per leaf its shape, dtype, sharding and shards
                        (checkpoint_index.py describes and validates it)
    l{leaf}_s{k}.npy    one .npy file per distinct shard box: replicas are written once,
                        by the lowest device holding the box

Save: each shard is written where it lives (Runtime.call_on): local runtime, this
process; MPI, each rank its own, to a shared file system; Ray, each rank's actor, to the
path it sees (a file system shared with the driver). Writing hashes as it goes (sha256
of the file and of each 4 MiB block); the processes swap the hashes; process 0 writes
the index. Everything goes to this save's own `<path>.tmp.<host>.<pid>.<random>`, every
file and the directory are fsynced; then, holding an flock on the parent directory (so
concurrent saves to one path take turns for the swap and never delete each other's
work), an existing checkpoint at `<path>` is renamed to `<path>.old`, the new one to
`<path>`, and `<path>.old` deleted. If a crash falls between the two renames, `load(path)`
finds `<path>.old` and the next save puts it back first. So a crash at any point leaves
the previous checkpoint loadable; a leftover temp directory is ignored by load and
latest and removed by the next save once its process is gone. Of two concurrent saves
the later swap wins, whole.

A load that races a save reads the old or the new checkpoint whole: when files vanish
or fail their hashes while the checkpoint at `path` was swapped, it reads again (a
CheckpointError only for a checkpoint that held still).

Load reshards: each destination buffer (one per distinct target box; replicas share it)
is made where it will live (Ray: on the actor of its first device, so the data never
passes through the driver) and filled from the saved shards that overlap it. Per saved
file it reads only the byte span the buffer needs (explicit offsets, one read per file,
rounded out to whole 4 MiB blocks; a whole shard going to one contiguous buffer is read
straight into it), checks every block it read against its
sha256, and copies the overlaps into place; replicas share one buffer. The whole-file
sha256 is for `verify(path)` and for sha256sum; a load checks blocks, so that a partial
read is checked too.

No pickle anywhere: the index is JSON, the .npy headers are parsed by numpy's header
reader and the data read as raw bytes, MPI ranks exchange JSON bytes. Any bad input
(corrupt, truncated, missing or foreign files, a malformed or lying index, paths that
leave the directory) is a CheckpointError, on every rank.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import stat
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import CheckpointError, ShardingError
from ..ir.mesh import Mesh
from ..ir.mesh import Sharding
from ..tree import broadcast_prefix, tree_flatten, tree_unflatten
from . import checkpoint_index as cx
from .array import Array
from .current_runtime import get_runtime

INDEX = "index.json"
# files written / read at once: I/O and sha256 release the GIL, but more threads than cores
# only fight over memory bandwidth
IO_THREADS = max(1, min(8, os.cpu_count() or 1))
WRITE_CHUNK = 16 << 20
HEADER_BYTES = 1 << 16          # numpy's header reader refuses headers over 10000 bytes


# -- the processes taking part -------------------------------------------------------------
class _Procs:
    """The processes taking part, through the Runtime contract: one (local runtime, Ray
    driver) has nothing to exchange; under MPI, messages are JSON bytes exchanged with
    `Runtime.allgather_bytes` (no pickle)."""

    def __init__(self, rt, what="a checkpoint"):
        self.rt, self.what = rt, what
        self.count, self.me = rt.process_count(), rt.process_index()

    def allgather(self, obj) -> list:
        if self.count == 1:
            return [obj]
        return [json.loads(b) for b in self.rt.allgather_bytes(json.dumps(obj).encode(), self.what)]

    def agree(self, error):
        """Every process raises if any did (so no rank is left waiting in a collective)."""
        errors = [(r, e) for r, e in enumerate(self.allgather(error)) if e]
        if errors:
            r, e = errors[0]
            raise CheckpointError(e if self.count == 1 else f"rank {r}: {e}")

    def on_root(self, fn):
        """Run fn on process 0 only; every process raises if it failed."""
        err = None
        if self.me == 0:
            try:
                fn()
            except CheckpointError as e:
                err = str(e)
            except OSError as e:
                err = f"{type(e).__name__}: {e}"
        self.agree(err)


def _capture(fn):
    """(result, None) or (None, message) for the errors a process reports to the others."""
    try:
        return fn(), None
    except CheckpointError as e:
        return None, str(e)
    except OSError as e:
        return None, f"{type(e).__name__}: {e}"


def _parallel(fn, items, threads=IO_THREADS):
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(threads, len(items))) as ex:
        return list(ex.map(fn, items))


def _threads(rt):
    """I/O threads: one per core here; on Ray, where the actors do the I/O and the driver's
    threads only wait for them, one per rank."""
    return max(IO_THREADS, rt.num_devices) if getattr(rt, "remote_io", False) else IO_THREADS


def _file_dtype(dtype):
    """Files are little-endian whatever the machine (a checkpoint moves between hosts)."""
    return np.dtype(dtype).newbyteorder("<")


# -- save -----------------------------------------------------------------------------------
def save(path, tree):
    """Write `tree` (nested dicts/lists/tuples of numpy arrays, numpy or Python scalars and
    spmd.Arrays) to the directory `path`, atomically. Every process must call it.
    Returns the absolute path."""
    rt = get_runtime()
    procs = _Procs(rt, "spmd.save")
    path = os.path.abspath(os.fspath(path))
    # a temp directory of this save's own: concurrent saves never write into each other's
    tmp = path + ".tmp." + procs.allgather(_token())[0]
    leaves, td = tree_flatten(tree)
    names = cx.leaf_paths(td)
    entries, jobs = [], []
    for i, (name, leaf) in enumerate(zip(names, leaves)):
        entry, leaf_jobs = _plan_leaf(i, name, leaf, procs.me)
        entries.append(entry)
        jobs += leaf_jobs
    procs.on_root(lambda: _prepare(path, tmp))

    def write_all():
        return dict(_parallel(lambda job: (job[0], job[1](os.path.join(tmp, job[0]))), jobs, _threads(rt)))
    written, err = _capture(write_all)
    gathered = procs.allgather({"error": err, "files": written or {}})
    errors = [g["error"] for g in gathered if g["error"]]
    if errors and procs.me == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    procs.agree(errors[0] if errors else None)
    files = {}
    for g in gathered:
        files.update(g["files"])
    procs.on_root(lambda: _commit(path, tmp, cx.dumps(cx.tree_to_json(td), _with_hashes(entries, files))))
    return path


def _plan_leaf(i, name, leaf, me):
    """The index entry of one leaf (hashes still missing) and the files this process
    writes for it: [(file name, (full path) -> its hashes, once written)]."""
    if isinstance(leaf, Array):
        sh, shape, rt = leaf.sharding, leaf.shape, leaf._runtime
        dtype = _savable_dtype(leaf.dtype, name)
        if sh.partial:
            raise CheckpointError(f"spmd.save: leaf {name!r} has partial sharding {sh.text()}; reduce it first")
        local = set(rt.local_devices(sh.mesh))
        shards, jobs = [], []
        for k, (box, dev) in enumerate(cx.shard_boxes(shape, sh)):
            f = cx.file_name(i, k)
            shards.append({"file": f, "box": [list(b) for b in box], "device": dev})
            if dev in local:
                def write(full, dev=dev, box=box):
                    return rt.call_on(dev, _write_shard, full, leaf._handles[dev], box)
                jobs.append((f, write))
        return {"path": name, "kind": "array", "shape": list(shape), "dtype": dtype.name,
                "sharding": cx.sharding_to_json(sh), "shards": shards}, jobs
    if isinstance(leaf, bool):
        kind = "bool"
    elif isinstance(leaf, int):
        kind = "int"
    elif isinstance(leaf, float):
        kind = "float"
    elif isinstance(leaf, complex):
        kind = "complex"
    elif isinstance(leaf, np.generic):
        kind = "numpy_scalar"
    elif isinstance(leaf, np.ndarray):
        kind = "array"
    else:
        raise CheckpointError(f"spmd.save: leaf {name!r} is a {type(leaf).__name__}; a checkpoint holds numpy "
                              f"arrays, numpy or Python scalars and spmd.Arrays")
    try:
        arr = np.asarray(leaf, dtype=np.int64) if kind == "int" else np.asarray(leaf)
    except OverflowError:
        raise CheckpointError(f"spmd.save: leaf {name!r} = {leaf} does not fit in int64") from None
    dtype = _savable_dtype(arr.dtype, name)
    shards = [{"file": cx.file_name(i, 0), "box": [[0, n] for n in arr.shape], "device": 0}]
    jobs = [(cx.file_name(i, 0), lambda full: _write_npy(full, arr))] if me == 0 else []
    return {"path": name, "kind": kind, "shape": list(arr.shape), "dtype": dtype.name, "sharding": None,
            "shards": shards}, jobs


def _savable_dtype(dtype, name):
    dtype = np.dtype(dtype)
    if dtype.name not in cx.DTYPES or dtype.fields is not None:
        raise CheckpointError(f"spmd.save: leaf {name!r} has dtype {dtype}; a checkpoint holds {', '.join(cx.DTYPES)}")
    return np.dtype(dtype.name)


def _with_hashes(entries, files):
    for e in entries:
        for s in e["shards"]:
            got = files.get(s["file"])
            if got is None:
                raise CheckpointError(f"spmd.save: no process wrote {s['file']} (leaf {e['path']!r})")
            s.update(got)
    return entries


def _remove(p):
    if os.path.islink(p) or os.path.isfile(p):
        os.remove(p)
    elif os.path.isdir(p):
        shutil.rmtree(p)


def _complete(p):
    return os.path.isfile(os.path.join(p, INDEX))


def _token():
    """host.pid.random: names this save's temp directory (and says whose it is)."""
    return f"{socket.gethostname()}.{os.getpid()}.{os.urandom(4).hex()}"


class _DirLock:
    """An exclusive flock on the checkpoint's parent directory, held by process 0 of a
    save for the few renames that swap checkpoints, so concurrent saves to one path (two
    jobs, two threads) take turns there and never remove each other's work; nothing is
    left behind. Where the file system has no flock, the renames go ahead unlocked."""

    _thread_lock = __import__("threading").Lock()     # flock is per open file, not per thread

    def __init__(self, directory):
        self.directory = directory

    def __enter__(self):
        import fcntl
        self._thread_lock.acquire()
        self.fd = None
        try:
            self.fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            pass
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)          # releases the flock
        self._thread_lock.release()


def _prepare(path, tmp):
    """Process 0, before anyone writes: make sure `path` is ours to replace, start this
    save's own temp directory."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _DirLock(os.path.dirname(path)):          # not in the middle of another save's swap
        _check_replaceable(path)
    os.makedirs(tmp)


def _check_replaceable(path):
    if os.path.lexists(path):
        if not (os.path.isdir(path) and (_complete(path) or not os.listdir(path))):
            raise CheckpointError(f"spmd.save: refusing to replace {path}: it is not an spmd checkpoint "
                                  f"(no {INDEX})")


def _stale_temps(path):
    """Temp directories of saves to `path` that can no longer finish: the legacy
    `<path>.tmp`, and `<path>.tmp.<host>.<pid>.<r>` of this host whose process is gone."""
    d, base = os.path.split(path)
    host = socket.gethostname()
    out = []
    for n in os.listdir(d):
        if n == base + ".tmp":
            out.append(n)
        elif n.startswith(base + ".tmp."):
            parts = n[len(base) + 5:].rsplit(".", 2)
            if len(parts) == 3 and parts[0] == host and parts[1].isdigit() and not _pid_alive(int(parts[1])):
                out.append(n)
    return [os.path.join(d, n) for n in out]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except OSError:
        return True


def _commit(path, tmp, index_text):
    """Process 0, after every file is written and fsynced: index, fsync, then under the
    directory lock: finish an interrupted swap, rename the current checkpoint to
    `<path>.old`, this one to `<path>`, remove the old one and stale temp directories.
    At every moment `<path>` or `<path>.old` is a complete checkpoint."""
    try:
        _swap(path, tmp, index_text)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap(path, tmp, index_text):
    with open(os.path.join(tmp, INDEX), "x") as f:
        f.write(index_text)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    old = path + ".old"
    with _DirLock(os.path.dirname(path)):
        if not os.path.lexists(path) and _complete(old):
            os.rename(old, path)              # a crash fell between the two renames of a save
        if os.path.lexists(path):
            _check_replaceable(path)
            if os.path.lexists(old):
                _remove(old)
            os.rename(path, old)
        os.rename(tmp, path)
        _fsync_dir(os.path.dirname(path))
        if os.path.lexists(old):
            _remove(old)
        for t in _stale_temps(path):
            shutil.rmtree(t, ignore_errors=True)


def _fsync_dir(p):
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Digest:
    """sha256 of the whole stream and of each `block` bytes of it."""

    def __init__(self, block):
        self.block, self.whole, self.cur, self.fill, self.blocks, self.n = block, hashlib.sha256(), \
            hashlib.sha256(), 0, [], 0

    def update(self, data):
        self.whole.update(data)
        self.n += len(data)
        while len(data):
            take = min(len(data), self.block - self.fill)
            self.cur.update(data[:take])
            self.fill += take
            data = data[take:]
            if self.fill == self.block:
                self.blocks.append(self.cur.hexdigest())
                self.cur, self.fill = hashlib.sha256(), 0

    def result(self):
        if self.fill:
            self.blocks.append(self.cur.hexdigest())
        return {"bytes": self.n, "sha256": self.whole.hexdigest(), "blocks": self.blocks}


def _npy_header(shape, dtype):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)})
    return np.frombuffer(buf.getvalue(), np.uint8)


def _byte_chunks(arr):
    """The C-order bytes of arr, in pieces of about WRITE_CHUNK (copying at most that much)."""
    if arr.flags.c_contiguous:
        flat = arr.reshape(-1).view(np.uint8)
        for a in range(0, flat.size, WRITE_CHUNK):
            yield flat[a:a + WRITE_CHUNK]
        return
    rows = max(1, WRITE_CHUNK // max(1, arr[0].nbytes))
    for a in range(0, arr.shape[0], rows):
        yield np.ascontiguousarray(arr[a:a + rows]).reshape(-1).view(np.uint8)


def _write_shard(full, data, box):
    """One device's shard, without its padding, to the file `full` (runs where the
    shard lives: Runtime.call_on)."""
    if not os.path.isdir(os.path.dirname(full)):
        raise CheckpointError(f"spmd.save: {os.path.dirname(full)} does not exist on the node of "
                              f"{socket.gethostname()} that holds a shard; a checkpoint on Ray or MPI "
                              f"needs a file system that every node sees at the same path")
    return _write_npy(full, np.asarray(data)[tuple(slice(0, b - a) for a, b in box)])


def _write_npy(full, arr):
    """Write arr as a .npy file, fsync it; its size and hashes for the index."""
    arr = np.asarray(arr)
    arr = arr.astype(_file_dtype(arr.dtype), copy=False)
    digest = _Digest(cx.BLOCK_BYTES)
    with open(full, "xb") as f:
        header = _npy_header(arr.shape, arr.dtype)
        digest.update(header)
        f.write(header)
        for chunk in _byte_chunks(arr):
            digest.update(chunk)
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return digest.result()


# -- load -----------------------------------------------------------------------------------
def load(path, shardings=None):
    """Read a checkpoint. `shardings`: None -> numpy arrays (and the saved scalars); a
    Mesh -> spmd.Arrays replicated on it; a Sharding or a tree of them (a prefix of the
    checkpoint's tree; None entries -> numpy) -> spmd.Arrays split that way. Every
    process must call it; each reads only the bytes its devices need."""
    rt = get_runtime()
    procs = _Procs(rt, "spmd.load")
    path = os.path.abspath(os.fspath(path))
    result, err = _capture(lambda: _load_consistent(path, shardings, rt))
    procs.agree(err)
    return result


def _identity(path):
    """Which checkpoint `path` names now: (directory read, its inode, the index's inode
    and mtime), or None when there is none."""
    try:
        p = _resolve(path)
        st, ix = os.stat(p), os.stat(os.path.join(p, INDEX))
        return p, st.st_ino, ix.st_ino, ix.st_mtime_ns
    except (CheckpointError, OSError):
        return None


def _load_consistent(path, shardings, rt, attempts=20):
    """_load, again when a save replaced the checkpoint while it was being read (its
    files vanished or changed under us): a load racing a save returns the old or the new
    checkpoint, whole, and reports corruption only of a checkpoint that held still."""
    import time
    for k in range(attempts):
        before = _identity(path)
        try:
            return _load(path, shardings, rt)
        except (CheckpointError, OSError):
            if k + 1 == attempts or _identity(path) == before:
                raise
            time.sleep(0.01 * (k + 1))


def _load(path, shardings, rt):
    path = _resolve(path)
    index = _read_index(path)
    targets = _targets(index, shardings)
    # which saved shard goes where: [(leaf, target sharding or None, {dest box: [devices]})]
    plans = []
    needed = {}                       # (leaf, shard k) -> the Leaf, for the files we read
    for leaf, target in zip(index.leaves, targets):
        if target is None:
            dests = {tuple((0, n) for n in leaf.shape): []}
        else:
            dests = {}
            for dev in rt.local_devices(target.mesh):
                dests.setdefault(target.shard_box(leaf.shape, dev), []).append(dev)
        plans.append((leaf, target, dests))
        for k, s in enumerate(leaf.shards):
            if any(_overlap(box, s.box) for box in dests):
                needed[(leaf.index, k)] = leaf
    # before allocating anything: the files exist, are ours, and hold the data they claim
    for (i, k), leaf in needed.items():
        _stat_shard(path, leaf, leaf.shards[k])
    # one job per destination buffer (replicas share it): (its devices, shape, box); on
    # Ray it runs on the actor of the buffer's first device (call_on)
    leaves = []                       # (leaf, target sharding or None, its jobs)
    for leaf, target, dests in plans:
        if target is None:
            jobs = [(None, leaf.shape, next(iter(dests)))]
        else:
            shape = target.local_shape(leaf.shape)
            jobs = [(devs, shape, box) for box, devs in dests.items()]
        leaves.append((leaf, target, jobs))

    def run(item):
        leaf, (devs, shape, box) = item
        args = (path, index.block_bytes, leaf, shape, box, _box_reads(leaf, box))
        return _fill(*args) if devs is None else rt.call_on(devs[0], _fill, *args, keep=True)
    results = iter(_parallel(run, [(leaf, job) for leaf, _, jobs in leaves for job in jobs], _threads(rt)))
    values = []
    for leaf, target, jobs in leaves:
        got = [next(results) for _ in jobs]
        if target is None:
            values.append(_finish(leaf, got[0]))
        else:
            handles = {d: h for (devs, _, _), h in zip(jobs, got) for d in devs}
            values.append(Array(leaf.shape, leaf.dtype, target, dict(sorted(handles.items())), rt))
    return tree_unflatten(index.tree, values)


def _box_reads(leaf, box):
    """The saved shards that overlap `box`: [(k, lo, hi in the shard, lo, hi in the box)]."""
    reads = []
    for k, s in enumerate(leaf.shards):
        ov = _overlap(box, s.box)
        if ov is not None:
            lo, hi = ov
            reads.append((k, tuple(a - sa for a, (sa, _) in zip(lo, s.box)),
                          tuple(b - sa for b, (sa, _) in zip(hi, s.box)),
                          tuple(a - d for a, (d, _) in zip(lo, box)), tuple(b - d for b, (d, _) in zip(hi, box))))
    return reads


def _fill(path, block, leaf, shape, box, reads):
    """A new buffer of `shape` whose `box` region holds the checkpoint's values (the
    padding beyond the box is zeros), read from the saved shards (runs where the buffer
    is to live: Runtime.call_on)."""
    buf = np.zeros(shape, leaf.dtype)
    view = buf[tuple(slice(0, b - a) for a, b in box) + (Ellipsis,)]       # a view, also 0-d
    parts = {}
    for k, lo, hi, dlo, dhi in reads:
        dst = view[tuple(slice(a, b) for a, b in zip(dlo, dhi)) + (Ellipsis,)]
        parts.setdefault(k, []).append((lo, hi, dst))
    for k, ps in parts.items():
        _read_shard(path, block, leaf, leaf.shards[k], ps)
    return buf


def _finish(leaf, value):
    if leaf.kind == "numpy_scalar":
        return value[()]
    if leaf.kind in cx.SCALAR_KINDS:
        return value[()].item()
    return value


def _overlap(a, b):
    """The intersection of two boxes as (lo, hi), or None if it holds no element."""
    lo = tuple(max(x, y) for (x, _), (y, _) in zip(a, b))
    hi = tuple(min(x, y) for (_, x), (_, y) in zip(a, b))
    return None if any(l >= h for l, h in zip(lo, hi)) else (lo, hi)


def _targets(index, shardings):
    n = len(index.leaves)
    if shardings is None or isinstance(shardings, (Mesh, Sharding)):
        targets = [shardings] * n
    else:
        skeleton = tree_unflatten(index.tree, [0] * n)
        try:
            targets = broadcast_prefix(shardings, skeleton, is_leaf=lambda x: isinstance(x, (Sharding, Mesh)))
        except ValueError as err:
            raise CheckpointError(f"spmd.load: shardings do not match the checkpoint's tree "
                                  f"{index.tree!r}: {str(err)[:300]}") from None
    out = []
    for leaf, t in zip(index.leaves, targets):
        if isinstance(t, Mesh):
            # a mesh places arrays; saved Python scalars stay Python scalars
            t = None if leaf.kind in cx.SCALAR_KINDS else Sharding(t, (None,) * len(leaf.shape))
        elif isinstance(t, Sharding):
            if t.partial:
                raise ShardingError(f"spmd.load: sharding {t.text()} for {leaf!r} is partial; an Array holds "
                                    f"whole values")
            t = t.for_rank(len(leaf.shape), f"{leaf!r} (shape {list(leaf.shape)})")
        elif t is not None:
            raise CheckpointError(f"spmd.load: the sharding for {leaf!r} must be None, a Mesh or a Sharding, "
                                  f"got {type(t).__name__}")
        out.append(t)
    return out


def _resolve(path):
    """The directory to read: `path`, or `path.old` if a crash fell between the renames."""
    if _complete(path):
        return path
    old = path + ".old"
    if not os.path.lexists(path) and _complete(old):
        return old
    if not os.path.lexists(path):
        raise CheckpointError(f"no checkpoint at {path}")
    raise CheckpointError(f"{path} has no {INDEX}: not an spmd checkpoint, or a save that never finished")


def _read_index(path):
    where = os.path.join(path, INDEX)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise CheckpointError(f"cannot open {where}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size > cx.MAX_INDEX_BYTES:
            raise CheckpointError(f"{where} is {size} bytes; an index is at most {cx.MAX_INDEX_BYTES}")
        return cx.parse(f.read(), where)


def _stat_shard(path, leaf, s):
    full = os.path.join(path, s.file)
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {s.file} ({leaf!r}) is missing from {path}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"checkpoint file {s.file} ({leaf!r}) is a "
                              f"{'symlink' if stat.S_ISLNK(st.st_mode) else 'special file'}; shard files must "
                              f"be regular files inside the checkpoint directory")
    if st.st_size != s.bytes:
        raise CheckpointError(f"checkpoint file {s.file} ({leaf!r}) is truncated or was changed: "
                              f"{st.st_size} bytes, the index says {s.bytes}")
    need = int(np.prod([b - a for a, b in s.box], dtype=object)) * leaf.dtype.itemsize
    if s.bytes < need:
        raise CheckpointError(f"checkpoint file {s.file} ({leaf!r}): {s.bytes} bytes cannot hold box "
                              f"{[list(b) for b in s.box]} of {leaf.dtype}")


def _pread_into(fd, buf, pos, name):
    got = 0
    while got < buf.size:
        n = os.preadv(fd, [buf[got:]], pos + got)
        if n == 0:
            raise CheckpointError(f"checkpoint file {name} is truncated (changed while loading)")
        got += n


def _verify(s, block, start, pieces, name):
    """Check the bytes of a file from `start` (a block boundary) to a block boundary or the
    end, given as consecutive uint8 pieces, against the index's block hashes."""
    h, pos = hashlib.sha256(), start
    for p in pieces:
        i = 0
        while i < p.size:
            take = min(p.size - i, block - pos % block)
            h.update(p[i:i + take])
            i, pos = i + take, pos + take
            if pos % block == 0 or pos == s.bytes:
                k = (pos - 1) // block
                if h.hexdigest() != s.blocks[k]:
                    raise CheckpointError(f"checkpoint file {name} is corrupt: sha256 mismatch in bytes "
                                          f"{k * block}..{pos}")
                h = hashlib.sha256()


def _read_verified(fd, s, block, start, stop, name):
    """Bytes [start, stop) of the file (block-aligned), each block checked against the index."""
    buf = np.empty(stop - start, np.uint8)
    _pread_into(fd, buf, start, name)
    _verify(s, block, start, [buf], name)
    return buf


# numpy parses a .npy header with ast.literal_eval, and CPython 3.11 before 3.11.8 keeps the
# ast module's recursion depth per interpreter, not per thread: ranks reading headers at
# once failed with "AST constructor recursion depth mismatch". One header at a time.
_HEADER_LOCK = threading.Lock()


def _read_header(head, leaf, s):
    """Parse and check the .npy header; returns the data offset."""
    f = io.BytesIO(head.tobytes())
    try:
        with _HEADER_LOCK:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
    except Exception as e:           # noqa: BLE001 - whatever numpy's header parser says, it is a bad file
        raise CheckpointError(f"checkpoint file {s.file} ({leaf!r}) has a bad .npy header: {e}") from None
    want_shape = tuple(b - a for a, b in s.box)
    # .npy has no bfloat16: its files say raw 2-byte elements (|V2), the index says bfloat16
    same = dtype == _file_dtype(leaf.dtype) or (np.dtype(leaf.dtype).name == "bfloat16" and dtype == np.dtype("V2"))
    if fortran or tuple(shape) != want_shape or not same:
        raise CheckpointError(f"checkpoint file {s.file} holds {dtype}{list(shape)}"
                              f"{' (Fortran order)' if fortran else ''} but the index says "
                              f"{_file_dtype(leaf.dtype)}{list(want_shape)} for {leaf!r}")
    offset = f.tell()
    if offset + int(np.prod(want_shape, dtype=object)) * dtype.itemsize != s.bytes:
        raise CheckpointError(f"checkpoint file {s.file} ({leaf!r}) is {s.bytes} bytes, not a header of "
                              f"{offset} and the data of {dtype}{list(want_shape)}")
    return offset


def _read_shard(path, block, leaf, s, parts):
    """Copy regions of one saved shard into their destinations: parts = [(lo, hi, dest)],
    lo/hi in the shard's own coordinates. Reads one span: from the first byte any part
    needs to the last."""
    fd = os.open(os.path.join(path, s.file), os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if os.fstat(fd).st_size != s.bytes:
            raise CheckpointError(f"checkpoint file {s.file} changed while loading")
        # the header is parsed before its block is hashed (only the blocks of the span are
        # read): it is checked field by field against the index and the file size instead,
        # so a header that passes says exactly what the genuine one says
        offset = _read_header(np.frombuffer(os.pread(fd, min(HEADER_BYTES, s.bytes), 0), np.uint8), leaf, s)
        shape = tuple(b - a for a, b in s.box)
        dtype = _file_dtype(leaf.dtype)
        strides = [dtype.itemsize] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]

        def at(idx):                   # byte offset of an element of the shard
            return offset + sum(i * st for i, st in zip(idx, strides))
        (lo, hi, dest), = parts if len(parts) == 1 else [(None, None, None)]
        if hi == shape and not any(lo) and dest.flags.c_contiguous and dest.dtype == dtype:
            # the whole shard into one contiguous destination: read straight into it
            head = np.empty(offset, np.uint8)
            _pread_into(fd, head, 0, s.file)
            data = dest.reshape(-1).view(np.uint8)
            _pread_into(fd, data, offset, s.file)
            _verify(s, block, 0, [head, data], s.file)
            return
        first = min(at(lo) for lo, _, _ in parts)
        last = max(at([h - 1 for h in hi]) + dtype.itemsize for _, hi, _ in parts)
        start, stop = first // block * block, min(-(-last // block) * block, s.bytes)
        buf = _read_verified(fd, s, block, start, stop, s.file)
        for lo, hi, dest in parts:
            dest[...] = np.ndarray(tuple(h - l for l, h in zip(lo, hi)), dtype, buffer=buf,
                                   offset=at(lo) - start, strides=tuple(strides))
    finally:
        os.close(fd)


# -- finding and checking checkpoints ---------------------------------------------------------
def latest(directory):
    """The newest complete checkpoint in `directory` (the greatest name, so name them by
    zero-padded step), or None. Unfinished saves (.tmp, no index) are skipped."""
    if not os.path.isdir(directory):
        return None
    names = {n[:-4] if n.endswith(".old") else n for n in os.listdir(directory)
             if not n.endswith(".tmp") and ".tmp." not in n}
    for n in sorted(names, reverse=True):
        p = os.path.join(directory, n)
        if _complete_or_swapping(p):
            return p
    return None


def _complete_or_swapping(p, looks=50):
    """Is there a complete checkpoint at p? A save swapping p and p.old keeps one of them
    complete at every instant, but a single look at each can fall between its renames (p
    gone, then p.old removed once the new p is in): look at both in turn until one is
    complete, or there is nothing there."""
    for _ in range(looks):
        if _complete(p) or _complete(p + ".old"):
            return True
        if not os.path.lexists(p) and not os.path.lexists(p + ".old"):
            return False
    return False                       # a directory that is not a checkpoint


def verify(path):
    """Check every file of a checkpoint against the index (whole-file sha256 and every
    block); raises CheckpointError, returns the number of bytes checked."""
    path = _resolve(os.path.abspath(os.fspath(path)))
    index = _read_index(path)
    total = 0
    for leaf in index.leaves:
        for s in leaf.shards:
            _stat_shard(path, leaf, s)
            fd = os.open(os.path.join(path, s.file), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                whole = hashlib.sha256()
                for a in range(0, s.bytes, index.block_bytes):
                    whole.update(_read_verified(fd, s, index.block_bytes, a,
                                                min(a + index.block_bytes, s.bytes), s.file))
                if whole.hexdigest() != s.sha256:
                    raise CheckpointError(f"checkpoint file {s.file} is corrupt (sha256 of the file)")
                _read_header(_read_verified(fd, s, index.block_bytes, 0, min(index.block_bytes, s.bytes), s.file),
                             leaf, s)
            finally:
                os.close(fd)
            total += s.bytes
    return total


__all__ = ["save", "load", "latest", "verify"]
