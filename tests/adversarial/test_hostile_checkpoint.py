"""Hostile checkpoints: corrupt, truncated, missing or foreign files, lying or malformed
indexes, paths leaving the directory. Each is a clear CheckpointError (never a crash deep
inside, a hang, or a wrong value); hypothesis mutates the index and the files."""
import hashlib
import json
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.errors import CheckpointError, SpmdError

MESH = spmd.Mesh((2, 2), ("data", "model"))


def tree():
    rng = np.random.default_rng(1)
    return {"w": rng.standard_normal((7, 10)).astype(np.float32),
            "b": rng.standard_normal(6),
            "i": np.arange(12, dtype=np.int32).reshape(3, 4),
            "step": np.int64(42), "lr": 0.5, "empty": np.zeros((0, 3), np.float16),
            "flags": [np.array([True, False, True]), 7]}


W_FILE = "l7_s1.npy"          # leaf 7 is "w" (keys sorted), shard 1 its box [0:4, 5:10]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    t = tree()
    placed = dict(t, w=spmd.device_put(t["w"], MESH.sharding("data", "model")),
                  b=spmd.device_put(t["b"], MESH.sharding(("data", "model"))),
                  i=spmd.device_put(t["i"], MESH.sharding(None, "model")))
    path = spmd.save(tmp_path_factory.mktemp("base") / "ckpt", placed)
    return path, t


@pytest.fixture
def ckpt(base, tmp_path):
    """A fresh copy of the base checkpoint to spoil."""
    path = str(tmp_path / "ckpt")
    shutil.copytree(base[0], path)
    return path


def index(path):
    with open(os.path.join(path, "index.json")) as f:
        return json.load(f)


def write_index(path, j):
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump(j, f)


def leaf(j, name):
    return next(e for e in j["leaves"] if e["path"] == name)


def shard_of(j, file):
    return next(s for e in j["leaves"] for s in e["shards"] if s["file"] == file)


def rehash(path, file):
    """Make the index agree with a tampered file (size and hashes): a lying index."""
    j = index(path)
    data = open(os.path.join(path, file), "rb").read()
    s = shard_of(j, file)
    s["bytes"] = len(data)
    s["sha256"] = hashlib.sha256(data).hexdigest()
    s["blocks"] = [hashlib.sha256(data[a:a + j["block_bytes"]]).hexdigest()
                   for a in range(0, len(data), j["block_bytes"])]
    write_index(path, j)


def load_fails(path, match, **kw):
    with pytest.raises(CheckpointError, match=match):
        spmd.load(path, **kw)


# -- the files -------------------------------------------------------------------------------
def test_corrupt_shard_is_a_sha256_mismatch(ckpt):
    f = os.path.join(ckpt, W_FILE)
    data = bytearray(open(f, "rb").read())
    data[-3] ^= 0x10
    open(f, "wb").write(bytes(data))
    load_fails(ckpt, rf"{W_FILE} is corrupt: sha256 mismatch in bytes 0\.\.{len(data)}")
    load_fails(ckpt, "corrupt", shardings=spmd.Mesh((8,), ("x",)))
    load_fails(ckpt, "corrupt", shardings={"w": MESH.sharding("data", "model"), "b": None, "i": None, "step": None,
                                           "lr": None, "empty": None, "flags": None})   # read whole, in place


def test_truncated_shard(ckpt):
    f = os.path.join(ckpt, W_FILE)
    size = os.path.getsize(f)
    open(f, "r+b").truncate(size - 4)
    load_fails(ckpt, rf"{W_FILE} .* is truncated or was changed: {size - 4} bytes, the index says {size}")
    rehash(ckpt, W_FILE)                       # even if the index agrees with the short file
    load_fails(ckpt, rf"{W_FILE} .* is {size - 4} bytes, not a header of 128 and the data of float32\[4, 5\]")
    open(f, "r+b").truncate(20)
    rehash(ckpt, W_FILE)
    load_fails(ckpt, rf"{W_FILE} .*: 20 bytes cannot hold box \[\[0, 4\], \[5, 10\]\] of float32")


def test_bad_npy_header(ckpt):
    f = os.path.join(ckpt, W_FILE)
    data = bytearray(open(f, "rb").read())
    data[:6] = b"NOTNPY"
    open(f, "wb").write(bytes(data))
    load_fails(ckpt, rf"{W_FILE} .* has a bad .npy header: the magic string is not correct")
    rehash(ckpt, W_FILE)                       # also when the index agrees with the file
    load_fails(ckpt, rf"{W_FILE} .* has a bad .npy header")
    np.save(f, np.array([1, "x"], dtype=object), allow_pickle=True)    # a pickle inside: never read
    rehash(ckpt, W_FILE)
    load_fails(ckpt, rf"{W_FILE} holds object\[2\] but the index says float32\[4, 5\]")


@pytest.mark.parametrize("replacement, says", [
    (np.zeros((4, 5), np.float64), r"float64\[4, 5\]"),
    (np.zeros((5, 4), np.float32), r"float32\[5, 4\]"),
    (np.asfortranarray(np.zeros((4, 5), np.float32)), r"float32\[4, 5\] \(Fortran order\)"),
    (np.zeros((4, 5), ">f4"), r">f4\[4, 5\]"),
])
def test_file_disagreeing_with_the_index(ckpt, replacement, says):
    np.save(os.path.join(ckpt, W_FILE), replacement)
    rehash(ckpt, W_FILE)
    load_fails(ckpt, rf"{W_FILE} holds {says}.* but the index says float32\[4, 5\] for checkpoint leaf 'w'")


def test_missing_file(ckpt):
    os.remove(os.path.join(ckpt, W_FILE))
    load_fails(ckpt, rf"checkpoint file {W_FILE} \(checkpoint leaf 'w'\) is missing from")


def test_symlinks_are_refused_even_with_the_right_content(ckpt, tmp_path):
    f = os.path.join(ckpt, W_FILE)
    outside = tmp_path / "outside.npy"
    shutil.copy(f, outside)                    # byte-identical, so every hash matches
    os.remove(f)
    os.symlink(outside, f)
    load_fails(ckpt, rf"{W_FILE} .* is a symlink; shard files must be regular files inside")
    os.remove(f)
    os.symlink(os.path.join(ckpt, "l0_s0.npy"), f)      # pointing inside is refused too
    load_fails(ckpt, "is a symlink")


def test_index_symlink_and_special_files(ckpt, tmp_path):
    os.remove(os.path.join(ckpt, W_FILE))
    os.mkdir(os.path.join(ckpt, W_FILE))
    load_fails(ckpt, "is a special file")
    real = tmp_path / "index.json"
    shutil.move(os.path.join(ckpt, "index.json"), real)
    os.symlink(real, os.path.join(ckpt, "index.json"))
    load_fails(ckpt, "cannot open .*index.json")


# -- the index -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../outside.npy", "/etc/passwd", "sub/x.npy", "..", ".hidden.npy", "",
                                  "x.npy/", "a\x00.npy", "x..npy", 5, None, ["l0_s0.npy"], "x.txt", "C:\\x.npy"])
def test_paths_outside_the_checkpoint(ckpt, name):
    j = index(ckpt)
    leaf(j, "w")["shards"][0]["file"] = name
    write_index(ckpt, j)
    load_fails(ckpt, "unsafe file")


@pytest.mark.parametrize("text, match", [
    (b"{not json", "is not valid JSON"),
    (b"\xff\xfe\x00garbage", "is not valid JSON"),
    pytest.param(b"[" * 100000 + b"]" * 100000, "is not valid JSON", id="nested-100000-deep"),
    (b"[]", "not an spmd checkpoint index"),
    (b'{"format": "spmd-checkpoint-1"}', "format 'spmd-checkpoint-2' expected, got 'spmd-checkpoint-1'"),
    (b"", "is not valid JSON"),
    (b'{"format": "spmd-checkpoint-2", "block_bytes": 4194304, "tree": "*", "leaves": [' + b"1" * 5000 + b"]}",
     "is not valid JSON"),     # an int too long to convert
])
def test_index_that_is_not_an_index(ckpt, text, match):
    open(os.path.join(ckpt, "index.json"), "wb").write(text)
    load_fails(ckpt, match)


@pytest.mark.parametrize("mutate, match", [
    (lambda j: j.update(block_bytes=10), "block_bytes 10 must be an int"),
    (lambda j: j.update(block_bytes=True), "block_bytes True must be an int"),
    (lambda j: j.update(tree={"dict": [["w", "*"]]}), "the tree has 1 leaves but 8 are listed"),
    (lambda j: j.update(tree={"set": ["*"]}), "malformed tree node"),
    (lambda j: j["tree"]["dict"].reverse(), "dict keys .* are not sorted and distinct"),
    (lambda j: j.update(leaves={"w": 1}), "'leaves' must be a list"),
    (lambda j: j["leaves"].__setitem__(0, "leaf"), "leaf 0 is not an object"),
    (lambda j: leaf(j, "w").update(kind="pickle"), "has kind 'pickle'"),
    (lambda j: leaf(j, "w").update(shape=[7, "10"]), "bad shape"),
    (lambda j: leaf(j, "w").update(shape=[7, -10]), "bad shape"),
    (lambda j: leaf(j, "w").update(shape=[8, 10]), "but its sharding puts box"),
    (lambda j: leaf(j, "w").update(shape=[7]), "spec .* must have 1 entries"),
    (lambda j: leaf(j, "w").update(dtype="object"), "has dtype 'object'"),
    (lambda j: leaf(j, "w").update(dtype="float64"), r"holds float32\[4, 5\] but the index says float64"),
    (lambda j: leaf(j, "lr").update(dtype="int64"), "a Python float cannot have dtype int64"),
    (lambda j: leaf(j, "lr").update(shape=[1]), "a float leaf is 0-d and unsharded"),
    (lambda j: leaf(j, "w").update(shards=leaf(j, "w")["shards"][:3]), "lists 3 shards; its sharding has 4"),
    (lambda j: leaf(j, "w").update(shards=None), "has no list of shards"),
    (lambda j: leaf(j, "w")["shards"][1].update(box=[[0, 4], [0, 5]]), "has box .* but its sharding puts box"),
    (lambda j: leaf(j, "w")["shards"][1].update(box=[[0, 4], [5]]), "bad box"),
    (lambda j: leaf(j, "w")["shards"][1].update(box=[[4, 0], [5, 10]]), "bad box"),
    (lambda j: leaf(j, "w")["shards"][1].update(device=3), "on device 3, but its sharding puts box .* on device 1"),
    (lambda j: leaf(j, "w")["shards"][1].update(sha256="x" * 64), "has no sha256"),
    (lambda j: leaf(j, "w")["shards"][1].update(blocks=[]), "must list the sha256 of each of its 1 blocks"),
    (lambda j: leaf(j, "w")["shards"][1].update(blocks=["0" * 64]), "corrupt"),
    (lambda j: leaf(j, "w")["shards"][1].update(bytes=10 ** 30), "must list the sha256 of each of its"),
    (lambda j: leaf(j, "w")["shards"][1].update(bytes=1000), "truncated or was changed: 208 bytes, the index "
                                                             "says 1000"),
    (lambda j: leaf(j, "w")["shards"][1].update(bytes=0), "bad byte count"),
    (lambda j: leaf(j, "w")["sharding"].update(spec=["data", "nope"]),
     "saved sharding is invalid: .*unknown mesh axis 'nope'"),
    (lambda j: leaf(j, "w")["sharding"].update(spec=["data", "data"]), "uses mesh axis 'data' more than once"),
    (lambda j: leaf(j, "w")["sharding"].update(mesh_shape=[2, 4]),
     r"the mesh \[2, 4\] has 8 devices but 'devices' is not a permutation of 0..7"),
    (lambda j: leaf(j, "w")["sharding"].update(mesh_shape=[10 ** 9, 10 ** 9]), "has 1000000000000000000 devices"),
    (lambda j: leaf(j, "w")["sharding"].update(devices=[0, 1, 2, 2]), "not a permutation"),
    (lambda j: leaf(j, "w")["sharding"].update(axis_names=["data"]), "saved sharding is invalid"),
    (lambda j: leaf(j, "w")["sharding"].update(axis_names=["data", "a b"]), "distinct identifiers"),
    (lambda j: leaf(j, "w")["sharding"].update(partial=["data"]), "partial .* must be"),
    (lambda j: leaf(j, "w").update(sharding=[]), "sharding is not an object"),
    (lambda j: leaf(j, "w").update(path=None), "leaf 7 has no path name"),
])
def test_malformed_index(ckpt, mutate, match):
    j = index(ckpt)
    mutate(j)
    write_index(ckpt, j)
    load_fails(ckpt, match)


def test_a_shard_file_named_twice(tmp_path):
    # two leaves of the same shape and dtype: if y named x's file, y would silently load x's values
    path = spmd.save(tmp_path / "c", {"x": np.zeros(3), "y": np.ones(3)})
    j = index(path)
    j["leaves"][1]["shards"][0] = dict(j["leaves"][0]["shards"][0])
    write_index(path, j)
    load_fails(path, "file 'l0_s0.npy' is named by more than one shard")


def test_an_index_claiming_a_huge_array_allocates_nothing(tmp_path):
    path = spmd.save(tmp_path / "c", {"x": np.zeros(3)})
    j = index(path)
    j["leaves"][0]["shape"] = [10 ** 9, 10 ** 6]
    j["leaves"][0]["shards"][0]["box"] = [[0, 10 ** 9], [0, 10 ** 6]]
    write_index(path, j)
    load_fails(path, "cannot hold box")
    load_fails(path, "cannot hold box", shardings=spmd.Mesh((4,), ("x",)))


def test_an_index_claiming_an_impossible_empty_shape(tmp_path):
    path = spmd.save(tmp_path / "c", {"x": np.zeros((0, 2))})
    j = index(path)
    j["leaves"][0]["shape"] = [2 ** 62, 0]
    j["leaves"][0]["shards"][0]["box"] = [[0, 2 ** 62], [0, 0]]
    write_index(path, j)
    load_fails(path, r"has shape \[4611686018427387904, 0\]: too large")


def test_save_and_load_of_paths_that_are_not_checkpoints(tmp_path):
    load_fails(tmp_path / "nowhere", "no checkpoint at")
    (tmp_path / "file").write_text("x")
    load_fails(tmp_path / "file", "has no index.json")


# -- fuzzing ---------------------------------------------------------------------------------
def _values_equal(got, want):
    lg, lw = spmd.tree_flatten(got)[0], spmd.tree_flatten(want)[0]
    assert len(lg) == len(lw)
    for x, y in zip(lg, lw):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _load_is_an_error_or_right(path, want, shardings=None):
    try:
        got = spmd.load(path, shardings)
    except SpmdError:
        return False
    _values_equal(got, want)           # a mutation the loader accepts must not change any value
    return True


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10 ** 20) | st.floats(allow_nan=True)
                    | st.text(max_size=10) | st.sampled_from(["*", "l0_s0.npy", "float32", "data", "array"]),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                    max_leaves=6)


def _paths(node, prefix=()):
    """Every node of a JSON document, as the keys leading to it."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


@st.composite
def json_mutation(draw, doc):
    """A copy of doc with one node, anywhere in it (each node equally likely), replaced,
    removed, duplicated or turned into its JSON text."""
    doc = json.loads(json.dumps(doc))
    where = draw(st.sampled_from(list(_paths(doc))))
    if not where:
        return draw(JSON)
    parent = doc
    for k in where[:-1]:
        parent = parent[k]
    key = where[-1]
    op = draw(st.sampled_from(["replace", "remove", "duplicate", "stringify"]))
    if op == "remove":
        del parent[key]
    elif op == "duplicate" and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(parent[key])))
    elif op == "stringify":
        parent[key] = json.dumps(parent[key])
    else:
        parent[key] = draw(JSON)
    return doc


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@pytest.mark.timeout(120)
@FUZZ
@given(data=st.data())
def test_fuzzed_index_is_a_clear_error_or_right(base, data):
    path0, want = base
    d = tempfile.mkdtemp()
    try:
        path = os.path.join(d, "ckpt")
        shutil.copytree(path0, path)
        write_index(path, data.draw(json_mutation(index(path0))))
        _load_is_an_error_or_right(path, want, data.draw(st.sampled_from([None, spmd.Mesh((3,), ("x",))])))
    finally:
        shutil.rmtree(d)


@pytest.mark.slow
@pytest.mark.timeout(120)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_fuzzed_index_bytes(base, data):
    path0, want = base
    text = bytearray(open(os.path.join(path0, "index.json"), "rb").read())
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(text) - 1))
        op = data.draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        if op == "flip":
            text[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "delete":
            del text[pos]
        elif op == "insert":
            text.insert(pos, data.draw(st.sampled_from(b'0123456789",[]{}:-.e ')))
        else:
            del text[pos:]
        if not text:
            break
    d = tempfile.mkdtemp()
    try:
        path = os.path.join(d, "ckpt")
        shutil.copytree(path0, path)
        open(os.path.join(path, "index.json"), "wb").write(bytes(text))
        _load_is_an_error_or_right(path, want)
    finally:
        shutil.rmtree(d)


@pytest.mark.slow
@pytest.mark.timeout(120)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_fuzzed_shard_bytes_are_always_caught(base, data):
    path0, want = base
    j = index(path0)
    files = [(s, s["file"]) for e in j["leaves"] for s in e["shards"]]
    shard, name = data.draw(st.sampled_from(files))
    raw = bytearray(open(os.path.join(path0, name), "rb").read())
    op = data.draw(st.sampled_from(["flip", "truncate", "append"]))
    if op == "flip":
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    elif op == "truncate":
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    else:
        raw += b"\0"
    d = tempfile.mkdtemp()
    try:
        path = os.path.join(d, "ckpt")
        shutil.copytree(path0, path)
        open(os.path.join(path, name), "wb").write(bytes(raw))
        failed = not _load_is_an_error_or_right(path, want)
        # every byte of a file the load needs is checked; only a file of an empty box is not needed
        assert failed or int(np.prod([b - a for a, b in shard["box"]])) == 0
    finally:
        shutil.rmtree(d)
