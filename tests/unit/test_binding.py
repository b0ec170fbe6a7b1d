"""hipdnn_async.runtime._binding: a binding is reused only for the same keys and buffer objects with
unchanged fingerprints; int pointers, DLPack-only objects and non-dict packs are bound on
every call; the cache holds buffers weakly; a host cache compares NumPy prints and keeps
bounded packs only."""
import gc
import weakref

import pytest

from hipdnn_async import VariantPackError
from hipdnn_async.runtime._binding import CACHE_SIZE, BindingCache
from _peers import peer


class TorchLike:
    """data_ptr() / shape / stride() / dtype, and a CAI (as a PyTorch CUDA tensor)."""

    def __init__(self, ptr, shape=(2, 3), strides=(3, 1), dtype="float32"):
        self.ptr, self.shape, self.strides_, self.dtype = ptr, shape, strides, dtype

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self.strides_

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": "<f4",
                "strides": None, "version": 3}


class CaiDict:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4",
                                         "version": 3}


class DlpackOnly:
    def __dlpack__(self, stream=None):
        raise NotImplementedError

    def __dlpack_device__(self):
        return (2, 0)


class Recorder:
    def __init__(self):
        self.binds = 0

    def bind(self, vp, ws):
        self.binds += 1
        for k, v in vp.items():
            if v is None:
                raise VariantPackError(f"execute: tensor {k!r} is None")
        return {k: id(v) for k, v in vp.items()}, ws

    @staticmethod
    def make_fn(buffers, ws):
        return lambda: (buffers, ws)


def cache(enabled=True):
    r = Recorder()
    return r, BindingCache(r.bind, r.make_fn, enabled=enabled)


def test_the_same_buffers_reuse_the_binding():
    r, c = cache()
    a, b = TorchLike(0x1000), CaiDict(0x2000)
    first = c.get({"x": a, "y": b}, None)
    again = c.get({"x": a, "y": b}, None)       # a new dict with the same buffers
    assert again is first and r.binds == 1 and (c.hits, c.misses) == (1, 1)
    assert c.get({"y": b, "x": a}, None) is not first   # another order binds anew
    assert r.binds == 2


@pytest.mark.parametrize("change", ["ptr", "shape", "stride", "dtype"])
def test_a_changed_torch_like_buffer_binds_anew(change):
    r, c = cache()
    a = TorchLike(0x1000)
    first = c.get({"x": a}, None)
    if change == "ptr":
        a.ptr = 0x3000            # Tensor.set_() / resize_() moved the data
    elif change == "shape":
        a.shape = (3, 2)
    elif change == "stride":
        a.strides_ = (1, 2)
    else:
        a.dtype = "float16"
    second = c.get({"x": a}, None)
    assert second is not first and r.binds == 2


@pytest.mark.parametrize("what", ["shape", "stride"])
def test_a_torch_like_buffer_with_a_mutable_shape_is_checked_by_its_interface(what):
    # the torch fingerprint keeps shape and stride() as they come (torch.Size and tuples
    # are immutable); a list mutated in place would still compare equal to itself, so
    # such an object is fingerprinted through its __cuda_array_interface__ instead
    from hipdnn_async.runtime._binding import _fingerprint_fn, _fp_cai
    r, c = cache()
    a = TorchLike(0x1000, shape=[2, 3]) if what == "shape" else TorchLike(0x1000, strides=[3, 1])
    assert _fingerprint_fn(a) is _fp_cai
    assert _fingerprint_fn(TorchLike(0x1000)) is not _fp_cai       # tuples: the torch one
    first = c.get({"x": a}, None)
    assert c.get({"x": a}, None) is first
    if what == "shape":
        a.shape[0] = 3                            # in place: the same list object
    else:
        a.ptr = 0x5000
    assert c.get({"x": a}, None) is not first and r.binds == 2



class EqualsAnything(tuple):
    """A tuple that claims equality with any other (a fake's shape or strides)."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = tuple.__hash__


class LiveShape(tuple):
    """A tuple whose items are read from a list that changes in place (one object)."""

    def __new__(cls, items):
        self = super().__new__(cls, ())
        self.items = items
        return self

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


@pytest.mark.parametrize("change", ["eq shape", "live shape", "to eq shape", "to eq stride"])
def test_a_tuple_subclass_cannot_hide_a_changed_shape_or_stride(change):
    # a changed shape or stride() binds anew (as in the test above), whatever the
    # shape's or stride()'s own __eq__ / __iter__ say; the shape is the interface's too,
    # which a GPU binding reads: a stale binding would keep the old one
    r, c = cache()
    if change == "eq shape":
        a = TorchLike(0x1000, shape=EqualsAnything((2, 3)))
    elif change == "live shape":
        a = TorchLike(0x1000, shape=LiveShape([2, 3]))
    else:
        a = TorchLike(0x1000)
    first = c.get({"x": a}, None)
    if change == "eq shape":
        a.shape = EqualsAnything((3, 2))
    elif change == "live shape":
        a.shape.items[:] = [3, 2]
    elif change == "to eq shape":
        a.shape = EqualsAnything((3, 2))     # a plain tuple at first, then the subclass
    else:
        a.strides_ = EqualsAnything((1, 2))
    assert tuple(a.__cuda_array_interface__["shape"]) == ((2, 3) if change == "to eq stride"
                                                          else (3, 2))
    assert c.get({"x": a}, None) is not first and r.binds == 2


def test_interface_strides_changed_in_place_bind_anew():
    r, c = cache()
    b = CaiDict(0x2000)
    b.__cuda_array_interface__["strides"] = [4]
    first = c.get({"y": b}, None)
    assert c.get({"y": b}, None) is first
    b.__cuda_array_interface__["strides"][0] = 8        # the same list, in place
    assert c.get({"y": b}, None) is not first and r.binds == 2


def test_a_mutated_interface_dict_binds_anew():
    r, c = cache()
    b = CaiDict(0x2000)
    first = c.get({"y": b}, None)
    b.__cuda_array_interface__["data"] = (0x4000, False)
    assert c.get({"y": b}, None) is not first and r.binds == 2


@pytest.mark.parametrize("buf", [0x5000, DlpackOnly()], ids=["int pointer", "dlpack"])
def test_ints_and_dlpack_objects_bind_every_time(buf):
    r, c = cache()
    c.get({"x": buf}, None)
    c.get({"x": buf}, None)
    assert r.binds == 2 and c.hits == 0


def test_a_new_workspace_object_binds_anew_and_a_mapping_is_never_cached():
    r, c = cache()
    a, ws1, ws2 = TorchLike(0x1000), CaiDict(0x9000), CaiDict(0x9000)
    first = c.get({"x": a}, ws1)
    assert c.get({"x": a}, ws1) is first
    assert c.get({"x": a}, ws2) is not first
    n = r.binds

    class Pack(dict):
        pass
    c.get(Pack(x=a), ws1)
    c.get(Pack(x=a), ws1)
    assert r.binds == n + 2


def test_errors_come_from_the_full_binding_and_nothing_is_cached():
    r, c = cache()
    with pytest.raises(VariantPackError, match="tensor 'x' is None"):
        c.get({"x": None}, None)
    with pytest.raises(VariantPackError):
        c.get({"x": None}, None)
    assert r.binds == 2


def test_the_cache_holds_buffers_weakly_and_keeps_a_few():
    r, c = cache()
    a = TorchLike(0x1000)
    ref = weakref.ref(a)
    c.get({"x": a}, None)
    del a
    gc.collect()
    assert ref() is None
    bufs = [TorchLike(0x1000 + i) for i in range(CACHE_SIZE + 1)]
    for b in bufs:
        c.get({"x": b}, None)
    n = r.binds
    c.get({"x": bufs[-1]}, None)                  # recent: cached
    c.get({"x": bufs[0]}, None)                   # the oldest was dropped
    assert r.binds == n + 1


def test_a_host_device_binds_every_time():
    r, c = cache(enabled=False)
    a = TorchLike(0x1000)
    c.get({"x": a}, None)
    c.get({"x": a}, None)
    assert r.binds == 2


# ---------------------------------------------------------------- host (NumPy) buffers
def host_cache():
    r = Recorder()
    return r, BindingCache(r.bind, r.make_fn, enabled=True, host=True)


def test_the_same_numpy_arrays_reuse_the_binding():
    import numpy as np
    r, c = host_cache()
    x, y = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
    first = c.get({"x": x, "y": y}, None)
    assert c.get({"x": x, "y": y}, None) is first and r.binds == 1
    assert c.get({"x": x, "y": np.zeros((2, 3), np.float32)}, None) is not first


@pytest.mark.parametrize("change", ["shape", "strides", "dtype", "read-only"])
def test_a_numpy_array_changed_in_place_binds_anew(change):
    # an array's data pointer is fixed, but these can be set on the same object; the
    # binding (a view of them) would be stale
    import numpy as np
    r, c = host_cache()
    x = np.zeros((2, 3), np.float32)
    first = c.get({"x": x}, None)
    if change == "shape":
        x.shape = (3, 2)
    elif change == "strides":
        with pytest.warns(DeprecationWarning):   # deprecated in NumPy 2.4, still works
            x.strides = (4, 8)
    elif change == "dtype":
        x.dtype = np.int32
    else:
        x.flags.writeable = False
    assert c.get({"x": x}, None) is not first and r.binds == 2


def test_a_new_array_at_a_freed_ones_address_binds_anew():
    import numpy as np
    r, c = host_cache()
    hits = 0
    for _ in range(50):          # id() and the data pointer are often reused
        c.get({"x": np.zeros((2, 3), np.float32)}, None)
        hits += c.hits
    assert hits == 0 and r.binds == 50


def test_a_host_binding_keeps_at_most_host_cache_bytes_and_no_allocated_workspace():
    import numpy as np
    from hipdnn_async.runtime._binding import HOST_CACHE_BYTES
    r, c = host_cache()
    big = np.zeros(HOST_CACHE_BYTES // 4 + 1, np.float32)
    c.get({"x": big}, None)
    c.get({"x": big}, None)
    assert r.binds == 2                      # too large to keep alive: bound each time
    small = np.zeros(4, np.float32)

    def bind_with_fresh_ws(vp, ws):
        r.binds += 1
        return dict(vp), np.empty(8, np.uint8)     # a workspace allocated for the binding

    c2 = BindingCache(bind_with_fresh_ws, Recorder.make_fn, enabled=True, host=True)
    c2.get({"x": small}, None)
    c2.get({"x": small}, None)
    assert r.binds == 4                      # concurrent runs would share it: not kept


def test_a_host_binding_counts_a_torch_tensors_bytes():
    """A CPU torch tensor is host memory as a NumPy array is: a pack holding one larger
    than HOST_CACHE_BYTES (or a small view of a larger storage, which the binding would
    keep alive in full) is bound on every call, never kept by the cache."""
    torch = peer("torch", "a CPU torch tensor in a host variant pack")
    from hipdnn_async.runtime._binding import HOST_CACHE_BYTES
    r, c = host_cache()
    big = torch.zeros(HOST_CACHE_BYTES // 4 + 1)
    assert big.untyped_storage().nbytes() > HOST_CACHE_BYTES
    c.get({"x": big}, None)
    c.get({"x": big}, None)
    assert r.binds == 2 and not c._entries
    ref = weakref.ref(big)
    del big
    gc.collect()
    assert ref() is None                    # the cache kept nothing alive
    view = torch.zeros(HOST_CACHE_BYTES // 4 + 1)[:4]
    c.get({"x": view}, None)
    c.get({"x": view}, None)
    assert r.binds == 4 and not c._entries
    small = torch.zeros(4)                  # within the bound: kept, then a hit
    c.get({"x": small}, None)
    c.get({"x": small}, None)
    assert r.binds == 5 and c.hits == 1


def test_a_host_binding_counts_the_array_a_numpy_view_keeps_alive():
    """A small NumPy view keeps its whole base array alive: a pack holding a view of an
    array larger than HOST_CACHE_BYTES is bound on every call, and once the caller drops
    both, nothing of them stays alive."""
    import numpy as np
    from hipdnn_async.runtime._binding import HOST_CACHE_BYTES
    r, c = host_cache()
    view = np.zeros(HOST_CACHE_BYTES // 4 + 1, np.float32)[:4].reshape(2, 2)
    assert view.nbytes == 16 and view.base.nbytes > HOST_CACHE_BYTES
    c.get({"x": view}, None)
    c.get({"x": view}, None)
    assert r.binds == 2 and not c._entries
    ref = weakref.ref(view.base)
    del view
    gc.collect()
    assert ref() is None
    small = np.zeros(64, np.float32)[:4]     # a view of a small array: kept, then a hit
    c.get({"x": small}, None)
    c.get({"x": small}, None)
    assert r.binds == 3 and c.hits == 1


def _bound_every_call(view):
    """Whether a host cache binds a pack of ``view`` on each of two calls, keeping none."""
    r, c = host_cache()
    c.get({"x": view}, None)
    c.get({"x": view}, None)
    return r.binds == 2 and not c._entries


def test_a_host_binding_counts_the_memory_a_strided_or_buffer_view_keeps_alive():
    """A small view made by ``as_strided`` (NumPy links it to a DummyArray holding the
    array, not to the array) or by ``np.frombuffer`` (linked to the bytes object) keeps its
    whole base alive too: such a pack of an array larger than HOST_CACHE_BYTES is bound on
    every call and freed once the caller drops it."""
    import numpy as np
    from numpy.lib.stride_tricks import as_strided
    from hipdnn_async.runtime._binding import HOST_CACHE_BYTES
    for make in (lambda big: as_strided(big, (2, 2), (8, 4)),
                 lambda big: np.frombuffer(memoryview(big).cast("B"), np.float32, 4)):
        big = np.zeros(HOST_CACHE_BYTES // 4 + 1, np.float32)
        view = make(big)
        assert view.nbytes == 16 and big.nbytes > HOST_CACHE_BYTES
        assert _bound_every_call(view)
        ref = weakref.ref(big)
        del big, view
        gc.collect()
        assert ref() is None, "the binding cache keeps a view's large base alive"


def test_a_host_binding_counts_the_torch_storage_under_a_numpy_array():
    """``tensor.numpy()`` of a small slice is a NumPy array whose base is the torch
    tensor, which keeps its whole storage alive: counted as such (bound every call)."""
    torch = peer("torch", "a NumPy array over a CPU torch tensor's storage")
    import numpy as np
    from hipdnn_async.runtime._binding import HOST_CACHE_BYTES
    big = torch.zeros(HOST_CACHE_BYTES // 4 + 1)
    for view in (big[:4].numpy(), np.asarray(big[4:8])):
        assert view.nbytes == 16 and _bound_every_call(view)
    ref = weakref.ref(big)
    del big, view
    gc.collect()
    assert ref() is None


def _conv_1x1_graph(name, x_dims):
    """A FLOAT 1x1 conv_fprop graph on ``x_dims`` (K = C): (graph, x, w, y)."""
    import hipdnn_async as hd
    g = hd.Graph(name=name, io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=x_dims, name="x")
    w = g.tensor(dims=(x_dims[1], x_dims[1], 1, 1), name="w")
    return g, x, w, g.conv_fprop(x, w).set_output(True)


def test_a_cpu_plan_does_not_keep_the_base_of_small_strided_views_alive():
    """Through a CPU plan: buffers given as small ``as_strided`` views (the usual way to
    make an NHWC view) of a 16 MiB array are not kept alive by the binding cache."""
    import numpy as np
    from numpy.lib.stride_tricks import as_strided
    import hipdnn_async as hd
    g, x, w, y = _conv_1x1_graph("strided_views", (1, 4, 4, 4))
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        big = np.random.default_rng(0).uniform(-1, 1, 4 << 20).astype(np.float32)
        view = lambda t, off: as_strided(big[off:], t.dims, [s * 4 for s in t.strides])
        xa, wa, ya = view(x, 0), view(w, 64), view(y, 1 << 20)
        for _ in range(2):
            plan.execute_sync({x: xa, w: wa, y: ya})
        want = np.einsum("kc,nchw->nkhw", wa[:, :, 0, 0].astype(np.float64), xa)
        assert np.allclose(ya, want, rtol=1e-5, atol=1e-5)
        ref = weakref.ref(big)
        del big, xa, wa, ya
        gc.collect()
        assert ref() is None, "the binding cache keeps a 16 MiB base array alive"


def _identity_cache(take_workspace=None):
    """A host cache whose binder returns the pack's arrays themselves (as the CPU device's
    does for arrays in logical dims and strides), counting binds."""
    r = Recorder()

    def bind(vp, ws):
        r.binds += 1
        return dict(vp), ws
    return r, BindingCache(bind, Recorder.make_fn, enabled=True, host=True,
                           take_workspace=take_workspace)


def test_a_large_pack_of_arrays_bound_as_themselves_is_cached_by_reference():
    """Past HOST_CACHE_BYTES a pack whose arrays bind as themselves is still reused, but
    the cache keeps none of it alive: a hit rebuilds the role map from the pack given."""
    import numpy as np
    from hipdnn_async.runtime._binding import HOST_CACHE_BYTES
    r, c = _identity_cache()
    x = np.zeros(HOST_CACHE_BYTES // 4 + 1, np.float32)
    y = np.zeros(8, np.float32)
    first = c.get({"x": x, "y": y}, None)
    second = c.get({"x": x, "y": y}, None)
    assert r.binds == 1 and c.hits == 1
    assert second.buffers["x"] is x and second.buffers["y"] is y
    bound = second.fn()[0]
    assert bound["x"] is x and bound["y"] is y and first is not second
    (entry,) = c._entries
    assert entry.recipe is not None and entry.buffers is None and entry.fn is None
    x.shape = (1, -1)                          # a changed print: bound anew
    c.get({"x": x, "y": y}, None)
    assert r.binds == 2
    refs = [weakref.ref(a) for a in (x, y)]
    del x, y, first, second, bound
    gc.collect()
    assert all(ref() is None for ref in refs), "the cache kept a large pack alive"
    assert len(c._entries) == 2                # entries whose arrays are gone never hit


def test_a_large_pack_bound_through_a_view_is_not_cached():
    import numpy as np
    from hipdnn_async.runtime._binding import HOST_CACHE_BYTES
    r = Recorder()

    def bind(vp, ws):
        r.binds += 1
        return {k: v.reshape(-1) for k, v in vp.items()}, ws   # views made by binding
    c = BindingCache(bind, Recorder.make_fn, enabled=True, host=True)
    x = np.zeros((2, HOST_CACHE_BYTES // 8 + 1), np.float32)
    c.get({"x": x}, None)
    c.get({"x": x}, None)
    assert r.binds == 2 and not c._entries


def test_a_large_pack_with_a_pooled_workspace_takes_a_fresh_one_per_hit():
    import numpy as np
    from hipdnn_async.runtime._binding import HOST_CACHE_BYTES
    takes = []

    def take():
        takes.append(np.empty(8, np.uint8))
        return takes[-1]
    r = Recorder()

    def bind(vp, ws):
        r.binds += 1
        return dict(vp), np.empty(8, np.uint8)
    c = BindingCache(bind, Recorder.make_fn, enabled=True, host=True, take_workspace=take)
    x = np.zeros(HOST_CACHE_BYTES // 4 + 1, np.float32)
    got = [c.get({"x": x}, None) for _ in range(3)]
    assert r.binds == 1 and len(takes) == 2
    assert all(b.workspace is t and b.fn()[1] is t for b, t in zip(got[1:], takes))
    assert c._entries[0].recipe is not None and c._entries[0].workspace is None


def test_a_cpu_plan_does_not_keep_a_large_torch_pack_alive():
    """Through a CPU plan: after an execution with torch tensors of 8 MiB, the plan's
    binding cache holds no reference to them while the device stays open."""
    torch = peer("torch", "CPU torch tensors as a CPU plan's buffers")
    import hipdnn_async as hd
    g, x, w, y = _conv_1x1_graph("big_torch", (8, 64, 64, 64))
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        xt, wt, yt = torch.rand(8, 64, 64, 64), torch.rand(64, 64, 1, 1), torch.empty(8, 64, 64, 64)
        plan.execute_sync({x: xt, w: wt, y: yt})
        want = torch.nn.functional.conv2d(xt.double(), wt.double())
        assert torch.allclose(yt.double(), want, rtol=1e-4, atol=1e-4)
        ref = weakref.ref(xt)
        del xt, yt
        gc.collect()
        assert ref() is None, "the binding cache keeps an 8 MiB torch tensor alive"


def test_a_host_binding_with_an_allocated_workspace_is_kept_without_it():
    """With ``take_workspace`` such a binding is cached, but each hit takes a fresh
    workspace and makes its function anew: executions in flight together never share
    one, and the cache keeps no workspace alive."""
    import numpy as np
    r, takes = Recorder(), []

    def bind_with_fresh_ws(vp, ws):
        r.binds += 1
        return dict(vp), np.empty(8, np.uint8)

    def take():
        takes.append(np.empty(8, np.uint8))
        return takes[-1]

    c = BindingCache(bind_with_fresh_ws, Recorder.make_fn, enabled=True, host=True,
                     take_workspace=take)
    small = np.zeros(4, np.float32)
    got = [c.get({"x": small}, None) for _ in range(3)]
    assert r.binds == 1 and c.hits == 2 and len(takes) == 2
    assert all(b.workspace is t for b, t in zip(got[1:], takes))     # each its own
    assert len({id(b.workspace) for b in got}) == 3
    assert all(b.fn()[1] is t for b, t in zip(got[1:], takes))       # functions too
    assert all(b.fn()[0] == {"x": small} for b in got)
    (entry,) = c._entries
    assert entry.fresh_ws and entry.workspace is None and entry.fn is None
    assert not any(b.cacheable for b in got)          # the one-off bindings handed out
    c.get({"x": np.zeros(4, np.float32)}, None)       # another buffer: bound anew
    assert r.binds == 2


class CopyableFn:
    """A work-item function that copies itself onto another workspace (as a oneDNN launch
    without host hooks does: ``_onednn.Launch.with_workspace``)."""
    made = 0

    def __init__(self, buffers, ws):
        self.buffers, self.ws = buffers, ws

    @classmethod
    def make_fn(cls, buffers, ws):
        cls.made += 1
        return cls(buffers, ws)

    def with_workspace(self, ws):
        return CopyableFn(self.buffers, ws)

    def __call__(self):
        return self.buffers, self.ws


def test_a_fresh_workspace_hit_copies_the_template_function():
    """A cached binding whose function copies onto another workspace keeps a copy on none
    (its template) and hands each hit a copy on that hit's fresh workspace: the function
    is made once, the workspaces stay distinct, and the template holds no workspace."""
    import numpy as np
    takes = []

    def take():
        takes.append(np.empty(8, np.uint8))
        return takes[-1]

    CopyableFn.made = 0
    c = BindingCache(lambda vp, ws: (dict(vp), np.empty(8, np.uint8)), CopyableFn.make_fn,
                     enabled=True, host=True, take_workspace=take)
    small = np.zeros(4, np.float32)
    got = [c.get({"x": small}, None) for _ in range(4)]
    assert CopyableFn.made == 1 and c.hits == 3 and len(takes) == 3
    assert [b.fn()[1] for b in got[1:]] == takes          # each hit on its own workspace
    assert all(b.fn()[0] == {"x": small} for b in got)
    (entry,) = c._entries
    assert entry.template is not None and entry.template.ws is None and entry.fn is None


def test_a_function_that_cannot_copy_is_made_anew_on_each_hit():
    import numpy as np

    class Hooked(CopyableFn):
        def with_workspace(self, ws):
            return None             # host hooks that read the workspace: no copy

    Hooked.made = 0
    c = BindingCache(lambda vp, ws: (dict(vp), np.empty(8, np.uint8)), Hooked.make_fn,
                     enabled=True, host=True, take_workspace=lambda: np.empty(8, np.uint8))
    small = np.zeros(4, np.float32)
    got = [c.get({"x": small}, None) for _ in range(3)]
    assert Hooked.made == 3 and c._entries[0].template is None
    assert len({id(b.fn()[1]) for b in got}) == 3


def test_a_device_array_binds_by_its_view():
    import numpy as np
    import hipdnn_async as hd
    r, c = host_cache()
    with hd.Device("cpu", streams=1) as dev:
        a = dev.empty((2, 3), "float32")
        first = c.get({"x": a}, None)
        assert c.get({"x": a}, None) is first
        a.view = np.zeros((2, 3), np.float32)    # another view object: bound anew
        assert c.get({"x": a}, None) is not first and r.binds == 2


def _peak_bytes_of(fn, vp, n=1000) -> int:
    """Bytes above the start that Python allocated at the peak of ``n`` calls ``fn(vp,
    None)`` (tracemalloc; ``itertools.repeat`` so the loop itself allocates nothing)."""
    import itertools
    import tracemalloc
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in itertools.repeat(None, n):
            fn(vp, None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - start


def test_a_cache_hit_allocates_nothing_in_python():
    """A binding-cache hit (the same NumPy arrays, unchanged) allocates no Python memory,
    not even transiently: tracemalloc's peak over 1000 lookups is that of 1000 calls of a
    no-op (the measurement's own floor); a miss (the cache off) allocates."""
    import numpy as np
    r, c = host_cache()
    vp = {"x": np.zeros((1, 8, 8, 8), np.float32), "w": np.zeros((8, 8, 1, 1), np.float32),
          "y": np.zeros((1, 8, 8, 8), np.float32)}
    first = c.get(vp, None)
    floor = _peak_bytes_of(lambda vp, ws: None, vp)
    assert _peak_bytes_of(c.lookup, vp) <= floor
    assert c.lookup(vp, None) is first and r.binds == 1
    r_off = Recorder()
    off = BindingCache(r_off.bind, r_off.make_fn, enabled=False, host=True)
    assert _peak_bytes_of(off.lookup, vp) > floor and r_off.binds == 1000
