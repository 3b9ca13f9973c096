"""The index endpoint's disk (sandbox/download_cache.py, issue 30 §2): each setup's budget
of bytes fetched, the cap both setup caches share kept while storing, and the spool (a
private folder under the cache, a bounded number of files at once, never the host's /tmp).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from sandbox import download_cache
from sandbox.download_cache import DownloadCache, FetchBudget, SpoolFull, cache_bytes
from sandbox.index_endpoint import IndexEndpoint, PackageSources
from tests.support.private_index import make_wheel, private_index

KiB = 1024


def test_the_budget_refuses_past_its_limit_and_after() -> None:
    budget = FetchBudget(100)
    assert budget.charge(60) and budget.charge(40)
    assert not budget.charge(1)
    assert not budget.charge(0 + 1), "once past it, nothing more"


def _sources(tmp_path: Path, cap: int) -> PackageSources:
    return PackageSources(cache_dir=tmp_path / "package-cache",
                          venv_cache_dir=tmp_path / "venv-cache", cache_max_bytes=cap)


def _part(cache: DownloadCache, size: int) -> tuple[Path, str]:
    part = cache.spool_file()
    data = os.urandom(size)
    part.write_bytes(data)
    return part, hashlib.sha256(data).hexdigest()


def _stored(sources: PackageSources, size: int, age: float) -> Path:
    folder = sources.cache_dir / "sha256"  # type: ignore[operator]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / os.urandom(8).hex()
    path.write_bytes(os.urandom(size))
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_storing_makes_room_from_old_entries_and_keeps_the_cap(tmp_path: Path) -> None:
    sources = _sources(tmp_path, 256 * KiB)
    old = _stored(sources, 128 * KiB, age=86_400)
    recent = _stored(sources, 64 * KiB, age=10)  # in use: never evicted
    venv_entry = tmp_path / "venv-cache" / "entries" / "e"
    venv_entry.mkdir(parents=True)
    (venv_entry / "meta.json").write_text(json.dumps({"bytes": 32 * KiB}))
    cache = DownloadCache(sources)
    try:
        part, digest = _part(cache, 100 * KiB)
        assert cache.store(part, digest) == sources.cache_dir / "sha256" / digest  # type: ignore[operator]
        assert not old.exists() and recent.exists()
        assert cache_bytes(sources) <= 256 * KiB
        # No room left that is not in use: served from the spool, not kept.
        part, digest = _part(cache, 100 * KiB)
        assert cache.store(part, digest) is None and part.exists()
        cache.release(part)
        assert cache_bytes(sources) <= 256 * KiB and not part.exists()
    finally:
        cache.close()


def test_a_file_over_the_cap_is_never_stored(tmp_path: Path) -> None:
    """Nor does it evict anything first: no eviction could make room for it, so the idle
    entries already kept stay (else each oversize offer empties the cache)."""
    sources = _sources(tmp_path, 16 * KiB)
    idle = [_stored(sources, 4 * KiB, age=86_400) for _ in range(2)]
    cache = DownloadCache(sources)
    try:
        part, digest = _part(cache, 64 * KiB)
        assert cache.store(part, digest) is None
        cache.release(part)
    finally:
        cache.close()
    assert [path.exists() for path in idle] == [True, True], "evicted for nothing"
    unbounded = _sources(tmp_path, 0)
    cache = DownloadCache(unbounded)
    try:
        part, digest = _part(cache, 64 * KiB)
        assert cache.store(part, digest) is not None, "no cap: stored"
    finally:
        cache.close()


def test_the_spool_is_private_under_the_cache_and_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download_cache, "SPOOL_WAIT_SECONDS", 0.2)
    sources = _sources(tmp_path, 0)
    cache = DownloadCache(sources)
    try:
        assert cache.spool.parent == tmp_path / "package-cache" / "spool"
        assert (cache.spool.stat().st_mode & 0o777) == 0o700
        parts = [cache.spool_file() for _ in range(download_cache.SPOOL_MAX_FILES)]
        with pytest.raises(SpoolFull):
            cache.spool_file()
        cache.release(parts.pop())
        parts.append(cache.spool_file())  # a slot freed is a slot again
        assert len(list(cache.spool.iterdir())) == download_cache.SPOOL_MAX_FILES
    finally:
        cache.close()
    assert not cache.spool.exists()


def test_a_spool_left_by_a_killed_worker_goes_after_a_day(tmp_path: Path) -> None:
    stale = tmp_path / "package-cache" / "spool" / "spool-old"
    stale.mkdir(parents=True)
    (stale / ".part-x").write_bytes(b"x" * 4096)
    os.utime(stale, (time.time() - 2 * 86_400,) * 2)
    DownloadCache(_sources(tmp_path, 0)).close()
    assert not stale.exists()


def test_an_unhashed_file_goes_through_the_spool_never_tmp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over real HTTP: a link without a sha256 is fetched into the endpoint's spool,
    served, and removed; the host's temporary folder gets nothing."""
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    wheel = make_wheel(tmp_path, "plain", "1.0", "X = 1\n")
    page = f'<a href="../../files/{wheel.name}">{wheel.name}</a>'
    with private_index("tok", [wheel], pages={"plain": page}) as index:
        sources = PackageSources(index.url, cache_dir=tmp_path / "cache")
        service = IndexEndpoint(sources, os.getuid(), os.getgid(), tcp=True)
        try:
            base = f"http://127.0.0.1:{service.port}"
            listed = urllib.request.urlopen(f"{base}/i/0/plain/").read().decode()
            href = re.findall(r'href="([^"#]+)', listed)[0]
            body = urllib.request.urlopen(base + href).read()
            deadline = time.monotonic() + 10  # removed once sent: just after pip read it
            while list(service.disk.spool.iterdir()) and time.monotonic() < deadline:
                time.sleep(0.05)
            spooled = list(service.disk.spool.iterdir())
            in_tmp = list(host_tmp.iterdir())
        finally:
            service.close()
    assert body == wheel.read_bytes() and spooled == []
    assert in_tmp == [] and service.disk.spool.parent == tmp_path / "cache" / "spool"
    assert not (tmp_path / "cache" / "sha256").exists(), "nothing to check: nothing kept"


def test_the_endpoint_refuses_past_the_budget_naming_it(tmp_path: Path) -> None:
    wheels = [make_wheel(tmp_path, f"w{k}", "1.0", "X = '" + "x" * 40_000 + "'\n")
              for k in range(3)]
    with private_index("tok", wheels) as index:
        sources = PackageSources(index.url, cache_dir=tmp_path / "cache")
        service = IndexEndpoint(sources, os.getuid(), os.getgid(), tcp=True,
                                quota_bytes=wheels[0].stat().st_size + 100)
        try:
            base = f"http://127.0.0.1:{service.port}"
            answers = []
            for k in range(3):
                listed = urllib.request.urlopen(f"{base}/i/0/w{k}/").read().decode()
                href = re.findall(r'href="([^"#]+)', listed)[0]
                try:
                    answers.append(urllib.request.urlopen(base + href).status)
                except urllib.error.HTTPError as exc:
                    answers.append(exc.code)
                    reason = str(exc.reason)
            lines = service.log.lines()
        finally:
            service.close()
    assert answers == [200, 403, 403]
    assert "past this setup's budget of 0 MiB" in reason
    assert "FROGNANO_SETUP_FETCH_MAX_GB" in reason and len(lines) == 2


def _fetch_file(base: str, project: str) -> tuple[int, str]:
    """A project's one file through the endpoint: the status, and the reason if refused."""
    listed = urllib.request.urlopen(f"{base}/i/0/{project}/").read().decode()
    href = re.findall(r'href="([^"#]+)', listed)[0]
    try:
        return urllib.request.urlopen(base + href).status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, str(exc.reason)


def test_cache_hits_are_charged_to_the_budget(tmp_path: Path) -> None:
    """A setup whose files are all in the shared cache still has its budget: hits spend
    it like downloads, and the file past it is refused, naming the budget."""
    wheels = [make_wheel(tmp_path, f"w{k}", "1.0", f"X = {os.urandom(3000)!r}\n")
              for k in range(3)]
    sizes = [wheel.stat().st_size for wheel in wheels]
    cache_dir = tmp_path / "cache"
    with private_index("tok", wheels) as index:
        sources = PackageSources(index.url, cache_dir=cache_dir)
        warm = IndexEndpoint(sources, os.getuid(), os.getgid(), tcp=True)
        try:  # an earlier run's setup: all three files into the cache
            assert [_fetch_file(f"http://127.0.0.1:{warm.port}", f"w{k}")[0]
                    for k in range(3)] == [200, 200, 200]
        finally:
            warm.close()
        fetched = len(index.requests)
        service = IndexEndpoint(sources, os.getuid(), os.getgid(), tcp=True,
                                quota_bytes=sizes[0] + sizes[1] + min(sizes) // 2)
        try:
            base = f"http://127.0.0.1:{service.port}"
            answers = [_fetch_file(base, f"w{k}") for k in range(3)]
            lines = service.log.lines()
        finally:
            service.close()
        files = [r for r in index.requests[fetched:] if r["path"].endswith(".whl")]
    assert len(list((cache_dir / "sha256").iterdir())) == 3 and files == []  # all hits
    assert [status for status, _ in answers] == [200, 200, 403]
    assert "refused w2-1.0-py3-none-any.whl: past this setup's budget" in answers[2][1]
    assert "FROGNANO_SETUP_FETCH_MAX_GB" in answers[2][1] and len(lines) == 1


def test_the_budget_is_the_setting_else_the_sandboxs_disk_quota(tmp_path: Path) -> None:
    for sources, limit in ((PackageSources(fetch_max_bytes=5 * KiB), 5 * KiB),
                           (PackageSources(), 7 * KiB)):
        service = IndexEndpoint(sources, os.getuid(), os.getgid(), tcp=True,
                                quota_bytes=7 * KiB)
        service.close()
        assert service.budget.limit == limit
