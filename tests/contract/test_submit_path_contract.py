"""The submit path on the fake CUDA runtime (issue 11 item 2): a variant pack of the same
buffer objects is bound once (the pointer checks, cudaPointerGetAttributes, run for its
first submission only); new data copied into a bound buffer is read by the next
submission; a buffer object whose pointer moved, or a new object, is bound again."""
from __future__ import annotations

import pytest

from oracle import _reference as R
from oracle._cases import assert_close, reduction_tol

from . import _capture_scenarios as S
from ._fakes import between, calls, violations


@pytest.fixture(scope="module")
def reuse(fake_gpu):
    r = fake_gpu.call(S.submit_reuse_case)
    assert not violations(r["log"]), violations(r["log"])
    return r


def _checks(r, start, end):
    return len(calls(between(r["log"], start, end), "cudaPointerGetAttributes"))


def test_the_first_submission_checks_every_pointer_and_later_ones_none(reuse):
    assert _checks(reuse, "first", "again") == 3           # x, w, y
    assert _checks(reuse, "again", "read_again") == 0
    assert len(calls(between(reuse["log"], "again", "read_again"), "cudnnConvolutionForward")) == 2


def test_new_data_in_a_bound_buffer_is_read(reuse):
    tol = reduction_tol("conv_fprop", "float32", S.C * 9)
    assert_close(reuse["y_again"], R.conv_fprop(reuse["x_new"], reuse["w"], pre=1, post=1), *tol)


def test_a_moved_pointer_or_a_new_object_binds_again(reuse):
    assert _checks(reuse, "moved", "read_moved") == 3
    tol = reduction_tol("conv_fprop", "float32", S.C * 9)
    assert_close(reuse["y_moved"], R.conv_fprop(reuse["x2"], reuse["w"], pre=1, post=1), *tol)
    assert _checks(reuse, "new", "end") == 3


def test_on_one_device_a_submission_leaves_the_current_device_alone(reuse):
    # the fake runtime sees one device: it is current on every thread, so neither the
    # launch nor a waiter's on-demand event record asks or switches (multi-GPU
    # discipline: test_multi_device_contract)
    again = between(reuse["log"], "again", "read_again")
    assert len(calls(again, "cudnnConvolutionForward")) == 2
    assert not calls(again, "cudaGetDevice") and not calls(again, "cudaSetDevice")
