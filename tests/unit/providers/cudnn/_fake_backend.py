"""A stand-in for ``runtime._cudnn_backend`` that records every call (no GPU, no cuDNN).

The constants are the compiled binding's own (cudnn_graph.h values); ``Descriptor``
records ``(method, attribute, attribute type, value)`` and answers the getters the graph
engine reads from a script given per test (heuristic results, notes, workspace sizes).
"""
from __future__ import annotations

import types

from hipdnn_async.runtime import _cudnn_backend as real

CALLS: list = []


class FakeDescriptor:
    """Records calls; getters answer from ``answers[(kind, attribute)]``."""

    answers: dict = {}
    finalize_fails: dict = {}      # kind -> exception raised by finalize

    def __init__(self, kind):
        self.kind = kind
        self.calls = []
        self.finalized = False
        self.values = {}
        CALLS.append(("create", kind, self))

    def _rec(self, *call):
        self.calls.append(call)
        self.values[call[1]] = call[-1]

    def set_int64(self, attr, values):
        self._rec("int64", attr, tuple([values] if isinstance(values, int) else values))

    def set_enum(self, attr, attr_type, value):
        self._rec("enum", attr, attr_type, value)

    def set_bool(self, attr, value):
        self._rec("bool", attr, bool(value))

    def set_float(self, attr, value):
        self._rec("float", attr, float(value))

    def set_double(self, attr, value):
        self._rec("double", attr, float(value))

    def set_handle(self, attr, handle):
        self._rec("handle", attr, handle)

    def set_descriptors(self, attr, descriptors):
        ds = [descriptors] if isinstance(descriptors, FakeDescriptor) else list(descriptors)
        self._rec("descriptors", attr, tuple(ds))

    def set_chars(self, attr, text):
        self._rec("chars", attr, text)

    def finalize(self):
        exc = self.finalize_fails.get(self.kind)
        if exc is not None:
            raise exc
        self.finalized = True

    def count(self, attr, attr_type):
        return len(self.answers.get((self.kind, attr), ()))

    def get_int64(self, attr, requested=1):
        return list(self.answers.get((self.kind, attr), self.values.get(attr, (0,))))

    def get_enums(self, attr, attr_type, requested):
        return list(self.answers.get((self.kind, attr), ()))

    def get_descriptors(self, attr, kind, requested):
        return list(self.answers.get((self.kind, attr), ()))[:requested]

    def get_chars(self, attr):
        return self.answers.get((self.kind, attr), b"")


def fake_module():
    """A module object with the real constants and the recording Descriptor."""
    mod = types.SimpleNamespace(**{k: v for k, v in vars(real).items()
                                 if k[:1].isupper() and isinstance(v, int)})
    mod.Descriptor = FakeDescriptor
    mod.executed = []
    mod.execute = lambda handle, plan, uids, ptrs, ws=0: mod.executed.append(
        (handle, plan, tuple(uids), tuple(ptrs), ws))
    CALLS.clear()
    FakeDescriptor.answers = {}
    FakeDescriptor.finalize_fails = {}
    return mod
