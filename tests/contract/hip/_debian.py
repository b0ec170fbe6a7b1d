"""The real HIP and MIOpen headers, fetched from Debian at test time (nothing vendored).

Debian ships AMD's public headers in ``libamdhip64-dev`` and ``libmiopen-dev``; the
contract fakes and the ABI checks (``_abi_rocm.py``) are compiled against them, so a wrong
signature, enum value or struct layout in our bindings fails to compile or fails a
``static_assert``. The packages are downloaded with apt's own client into a private apt
configuration (sid, experimental and bookworm lists under the cache directory; the machine's apt
state is never touched, nothing is installed) and, where ``apt-get`` is missing or fails,
from the exact pool URL on deb.debian.org. Every ``.deb`` is checked against the SHA-256
pinned below, then unpacked with ``dpkg-deb -x`` (or Python's ``ar``/``tar`` readers where
dpkg is missing).

Each ROCm release is one :class:`DebianHeaders` source of the contract suite's header
cache (``tests/contract/_headers.py``: ``ensure(source)`` extracts it once under
``<cache>/headers/<name>/``); the ``.deb`` files stay in ``<cache>/debs/``. A source that
cannot be fetched raises ``HeadersUnavailable``, which the fixtures turn into a skip
naming the reason, or a failure where ``CI`` is set (CI must not pass by skipping).
"""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .._headers import HeaderSource, HeadersUnavailable, cache_root, locked

__all__ = ["DebPackage", "DebianHeaders", "HipHeaders", "ROCM_SOURCES", "HIP5_SOURCE",
           "fetch_deb"]

MIRROR = "http://deb.debian.org/debian"
# bookworm (Debian 12): the suite of ROCm 5.2.3's libamdhip64-dev (5.2.3-8)
_SUITES = ("sid", "experimental", "bookworm")
_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
FetchError = HeadersUnavailable


@dataclass(frozen=True)
class DebPackage:
    """One Debian binary package, pinned by version and SHA-256 (of the ``.deb``).

    ``pool`` is the path under the mirror, as apt's ``Filename:`` field gives it.
    """

    name: str
    version: str
    pool: str
    sha256: str

    @property
    def filename(self) -> str:
        return self.pool.rsplit("/", 1)[1]


@dataclass(frozen=True)
class DebianHeaders(HeaderSource):
    """The HIP + MIOpen headers of one ROCm release, from Debian packages.

    ``miopen`` is MIOpen's own version (``miopen/version.h``), ``rocm`` the ROCm release it
    belongs to, ``hip_major`` the soname major of the ``libamdhip64`` it links against.
    """

    packages: tuple = ()
    miopen: tuple = (0, 0, 0)
    rocm: str = ""
    hip_major: int = 0

    @property
    def label(self) -> str:
        return "miopen-" + ".".join(map(str, self.miopen))

    def fetch(self, dest: Path) -> dict:
        for pkg in self.packages:
            _extract(fetch_deb(pkg), dest)
        for need in ("hip/hip_runtime_api.h", "hip/hip_version.h", "miopen/miopen.h",
                     "miopen/version.h"):
            if not (dest / self.include / need).is_file():
                raise FetchError(f"{self.name}: the packages lack {need}")
        return {"packages": [f"{p.name} {p.version}" for p in self.packages],
                "miopen": ".".join(map(str, self.miopen)), "rocm": self.rocm,
                "version": f"MIOpen {'.'.join(map(str, self.miopen))} / ROCm {self.rocm}"}


# apt-cache show on sid / experimental (2026-12-01); sha256 of the downloaded .debs.
# libamdhip64-dev alone provides every header hip_runtime_api.h includes (hip_version.h,
# driver_types.h, texture_types.h, ...); libmiopen-dev has miopen.h, config.h, version.h.
ROCM_SOURCES = (
    DebianHeaders("rocm-6.4.3", "usr/include", packages=(
        DebPackage("libamdhip64-dev", "6.4.3-5",
                   "pool/main/r/rocm-hipamd/libamdhip64-dev_6.4.3-5_amd64.deb",
                   "f2a3a542d41883f87a45e2d0554c1c84ccf350c836b9e8b35473dadbc34ced5e"),
        DebPackage("libmiopen-dev", "6.4.3+dfsg-1+b1",
                   "pool/main/m/miopen/libmiopen-dev_6.4.3+dfsg-1+b1_amd64.deb",
                   "084e272a0ee00ade0610eed70dc7840f7faa7633ed9e0f14720e0ae293ed2720"),
    ), miopen=(3, 4, 0), rocm="6.4.3", hip_major=6),
    DebianHeaders("rocm-7.2.4", "usr/include", packages=(
        DebPackage("libamdhip64-dev", "7.2.4-1~exp2",
                   "pool/main/r/rocm-hipamd/libamdhip64-dev_7.2.4-1~exp2_amd64.deb",
                   "28ae316c5be2d33b53fae8f2151e76a758f84aa3493abafeaef935e49cc5ba07"),
        DebPackage("libmiopen-dev", "7.2.4+dfsg-1",
                   "pool/main/m/miopen/libmiopen-dev_7.2.4+dfsg-1_amd64.deb",
                   "016990485d0e9f9390888c35fe757f046fb942cff741bb3fc315b15cb895012c"),
    ), miopen=(3, 5, 1), rocm="7.2.4", hip_major=7),
)


@dataclass(frozen=True)
class HipHeaders(HeaderSource):
    """The HIP headers alone of one ROCm release (no MIOpen: nothing is built against them,
    they only compile-check ``_gpu.HIP5_CONSTANTS``)."""

    packages: tuple = ()
    rocm: str = ""
    hip_major: int = 0

    @property
    def label(self) -> str:
        return "hip-" + self.rocm

    def fetch(self, dest: Path) -> dict:
        for pkg in self.packages:
            _extract(fetch_deb(pkg), dest)
        for need in ("hip/hip_runtime_api.h", "hip/hip_version.h", "hip/driver_types.h"):
            if not (dest / self.include / need).is_file():
                raise FetchError(f"{self.name}: the packages lack {need}")
        return {"packages": [f"{p.name} {p.version}" for p in self.packages],
                "rocm": self.rocm, "version": f"ROCm {self.rocm} (HIP only)"}


# apt-cache show libamdhip64-dev=5.2.3-8 on bookworm/main (2026-12-01); sha256 of the
# downloaded .deb (equal to the Packages index's SHA256). It alone holds
# hip/hip_runtime_api.h, hip/driver_types.h and hip/hip_version.h (its Depends, the
# runtime, hiprtc builtins, comgr and hsa -dev packages, add none of them).
HIP5_SOURCE = HipHeaders("rocm-5.2.3-hip", "usr/include", packages=(
    DebPackage("libamdhip64-dev", "5.2.3-8",
               "pool/main/r/rocm-hipamd/libamdhip64-dev_5.2.3-8_amd64.deb",
               "1f87b72e5aa86025c6cb96312c75ee7f549c42475f4bc51049ab7b67cc4e762e"),
), rocm="5.2.3", hip_major=5)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------- download
def _apt_options(apt_dir: Path) -> list[str]:
    """A private apt configuration: our own sources, lists and cache; no system state."""
    apt_dir.mkdir(parents=True, exist_ok=True)
    sources = apt_dir / "sources.list"
    signed = f"[signed-by={_KEYRING}] " if os.path.exists(_KEYRING) else ""
    text = "".join(f"deb {signed}{MIRROR} {s} main\n" for s in _SUITES)
    if not sources.exists() or sources.read_text() != text:
        # a cache made with fewer suites: its lists are stale, update again
        sources.write_text(text)
        (apt_dir / "lists.updated").unlink(missing_ok=True)
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    return ["-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={apt_dir / 'lists'}",
            "-o", f"Dir::Cache={apt_dir / 'cache'}", "-o", "Dir::State::status=/dev/null",
            "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=" + _user(), "-q"]


def _user() -> str:
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name


def _apt_download(pkg: DebPackage, dest: Path, apt_dir: Path) -> None:
    """``apt-get download name=version`` (apt checks the archive signature)."""
    apt = shutil.which("apt-get")
    if apt is None:
        raise FetchError("apt-get is not on PATH")
    opts = _apt_options(apt_dir)
    stamp = apt_dir / "lists.updated"
    if not stamp.exists():
        run = subprocess.run([apt, *opts, "update"], capture_output=True, text=True,
                             timeout=300)
        if run.returncode != 0:
            raise FetchError(f"apt-get update ({', '.join(_SUITES)}) failed: "
                             f"{run.stderr.strip()[-400:]}")
        stamp.write_text("")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        run = subprocess.run([apt, *opts, "download", f"{pkg.name}={pkg.version}"],
                             capture_output=True, text=True, cwd=tmp, timeout=300)
        got = list(Path(tmp).glob("*.deb"))
        if run.returncode != 0 or len(got) != 1:
            raise FetchError(f"apt-get download {pkg.name}={pkg.version} failed: "
                             f"{run.stderr.strip()[-400:]}")
        os.replace(got[0], dest)


def _pool_download(pkg: DebPackage, dest: Path) -> None:
    """The exact pool URL on deb.debian.org."""
    url = f"{MIRROR}/{pkg.pool}"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            data = resp.read()
    except OSError as exc:
        raise FetchError(f"GET {url}: {exc}") from None
    tmp = dest.with_suffix(".part")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


def fetch_deb(pkg: DebPackage) -> Path:
    """The verified ``.deb`` of ``pkg`` in the cache (downloaded once)."""
    root = cache_root()
    debs = root / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    dest = debs / pkg.filename
    with locked(debs / f".{pkg.filename}.lock"):
        if dest.exists() and _sha256(dest) == pkg.sha256:
            return dest
        errors = []
        for how in ("apt", "pool"):
            try:
                if how == "apt":
                    _apt_download(pkg, dest, root / "apt")
                else:
                    _pool_download(pkg, dest)
            except (FetchError, OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{how}: {exc}")
                continue
            digest = _sha256(dest)
            if digest == pkg.sha256:
                return dest
            dest.unlink()
            errors.append(f"{how}: sha256 {digest} != pinned {pkg.sha256}")
        raise FetchError(f"cannot fetch {pkg.name} {pkg.version}: " + "; ".join(errors))


# ---------------------------------------------------------------------- unpack
def _extract(deb: Path, target: Path) -> None:
    """Unpack ``deb``'s data into ``target`` (dpkg-deb -x, or Python's readers)."""
    if shutil.which("dpkg-deb"):
        run = subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], capture_output=True,
                             text=True, timeout=120)
        if run.returncode == 0:
            return
        raise FetchError(f"dpkg-deb -x {deb.name}: {run.stderr.strip()[-300:]}")
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise FetchError(f"{deb.name} is not an ar archive")
    pos = 8
    while pos + 60 <= len(data):
        name = data[pos:pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise FetchError(f"{deb.name}: zstd data needs dpkg-deb")
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                tar.extractall(target, filter="data")
            return
    raise FetchError(f"{deb.name} has no data.tar member")
