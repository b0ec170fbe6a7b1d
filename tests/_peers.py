"""Peer libraries of the test suite (PyTorch) and the `peers` extra that installs them.

The light ``test`` extra leaves out PyTorch (from PyPI alone, the CUDA build: several GB).
A test that compares against a peer imports it through :func:`peer`: without the extra it
skips with a reason naming the extra; with ``CI`` set (``.ci/run`` sets it and installs
the extra) a missing peer is a failure, so CI runs every peer test.
"""
import os

import pytest

__all__ = ["EXTRA", "peer", "peer_or_none", "reason"]

EXTRA = "peers"


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def reason(why: str) -> str:
    """The skip reason for a missing peer: `why` it is needed, and the extra to install."""
    return (f"{why}; PyTorch comes with the '{EXTRA}' extra: "
            f"pip install -e '.[test,{EXTRA}]' (see docs/guide/install.md)")


def peer(module: str, why: str):
    """Import the peer `module`, or skip naming the extra (fail where ``CI`` is set)."""
    if _ci():
        try:
            return __import__(module)
        except ImportError as exc:
            pytest.fail(f"{reason(why)} ({exc}; CI is set: peer tests must run there)",
                        pytrace=False)
    return pytest.importorskip(module, reason=reason(why))


def peer_or_none(module: str):
    """The peer `module`, or None where it is absent (a failure where ``CI`` is set)."""
    try:
        return __import__(module)
    except ImportError as exc:
        if _ci():
            pytest.fail(f"{reason(module + ' is a peer of these tests')} ({exc}; CI is set: "
                        "peer tests must run there)", pytrace=False)
        return None
