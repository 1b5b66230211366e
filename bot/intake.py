"""Getting a bundle onto disk: Slack file metadata and download, or a job id in the jobs directory.

Input: a Slack file id or a job id; output: a local ``Path``. Does network and file I/O (async;
filesystem walks in threads). The bot token is sent only to Slack's file host or the configured API
host, never across a redirect, and an HTML answer (Slack's login page) is refused.
"""

from __future__ import annotations

import asyncio
import re
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp

# What the core reads (crashcart.ingest): archives, and single logs (plain or .gz).
BUNDLE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz", ".zip")
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".stdout", ".stderr")
FileKind = Literal["bundle", "log", "unsupported"]
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SLACK_FILE_HOSTS = frozenset({"files.slack.com"})
CHUNK = 1024 * 1024
COUNT_LIMIT_BYTES = 256 * 1024**2  # compressed archives larger than this are not pre-counted


class DownloadError(Exception):
    """The file could not be fetched; ``str(exc)`` is a short, token-free reason."""


class UploadTooLarge(Exception):
    def __init__(self, size: int, cap: int) -> None:
        super().__init__(f"{size} > {cap}")
        self.size = size
        self.cap = cap


@dataclass(frozen=True)
class SlackFile:
    id: str
    name: str
    size: int
    url: str | None  # url_private_download


def is_bundle_name(name: str | None) -> bool:
    return bool(name) and str(name).lower().endswith(BUNDLE_SUFFIXES)


def file_kind(name: str | None) -> FileKind:
    """An archive (analysed whenever uploaded), a single log (analysed when asked for), or neither."""
    lower = str(name or "").lower()
    if lower.endswith(BUNDLE_SUFFIXES):
        return "bundle"
    if lower.removesuffix(".gz").endswith(LOG_SUFFIXES) or (lower.endswith(".gz") and ".tar." not in lower):
        return "log"
    return "unsupported"


def safe_name(name: str) -> str:
    """A file name that is safe to create in our work directory (no separators, no dot-dot)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", name.rsplit("/", 1)[-1]).lstrip(".")
    return base[:200] or "bundle"


def file_from_info(info: dict[str, Any]) -> SlackFile:
    f = info.get("file") or {}
    return SlackFile(
        id=str(f.get("id", "")),
        name=str(f.get("name") or f.get("title") or f.get("id") or "bundle"),
        size=int(f.get("size") or 0),
        url=f.get("url_private_download") or f.get("url_private"),
    )


def token_hosts(api_url: str) -> frozenset[str]:
    """Hosts that may receive the bot token: Slack's file host and the Web API host we were given."""
    host = urlsplit(api_url).netloc.lower()
    return SLACK_FILE_HOSTS | ({host} if host else set())


def plain_http_host(api_url: str) -> str | None:
    """The one host the token may reach over plain http: the configured API host, if it is http itself."""
    parts = urlsplit(api_url)
    return parts.netloc.lower() if parts.scheme == "http" and parts.netloc else None


async def download(
    url: str,
    token: str,
    dest: Path,
    *,
    max_bytes: int,
    allowed_hosts: frozenset[str],
    http_host: str | None = None,
    timeout_s: float = 300.0,
) -> int:
    """Stream ``url`` into ``dest`` (via ``dest.part``); return the byte count.

    :param http_host: the only host that may be reached over plain http (a local Slack API stand-in)
    :raises DownloadError: a host we do not send the token to, plain http elsewhere than ``http_host``, a
        redirect, an error status, an HTML page
    :raises UploadTooLarge: more than ``max_bytes`` arrived
    """
    parts = urlsplit(url)
    host = parts.netloc.lower()
    if parts.scheme not in ("https", "http") or host not in allowed_hosts:
        raise DownloadError(f"refusing to send the bot token to {parts.netloc or 'an unknown host'}")
    if parts.scheme == "http" and host != http_host:
        raise DownloadError(f"refusing to send the bot token to {parts.netloc} over plain http")
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    client_timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=client_timeout, trust_env=False) as session,
            session.get(url, headers={"Authorization": f"Bearer {token}"}, allow_redirects=False) as resp,
        ):
            if resp.status != 200:
                raise DownloadError(f"HTTP {resp.status}")
            if resp.content_type.startswith("text/html"):
                raise DownloadError("Slack answered with a web page: is the app installed with files:read?")
            with part.open("wb") as fh:
                async for block in resp.content.iter_chunked(CHUNK):
                    written += len(block)
                    if written > max_bytes:
                        raise UploadTooLarge(written, max_bytes)
                    await asyncio.to_thread(fh.write, block)
    except aiohttp.ClientError as exc:
        part.unlink(missing_ok=True)
        raise DownloadError(type(exc).__name__) from exc
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    part.replace(dest)
    return written


def find_job_bundle(jobs_dir: Path, job_id: str) -> Path | None:
    """``<jobs_dir>/<job_id>/`` or ``<job_id>.tar.gz|.tgz|.tar|.zip``; None when absent or the id is unsafe."""
    if not JOB_ID.fullmatch(job_id) or ".." in job_id:
        return None
    candidates = [jobs_dir / job_id, *(jobs_dir / f"{job_id}{s}" for s in BUNDLE_SUFFIXES)]
    root = jobs_dir.resolve()
    for path in candidates:
        if (path.is_dir() or path.is_file()) and path.resolve().parent == root:
            return path
    return None


def bundle_size(path: Path) -> int:
    """Bytes of a bundle file, or of every file under a bundle directory."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def count_files(path: Path) -> int | None:
    """Files in a bundle, for the status line; None when counting would cost a pass over a big archive."""
    try:
        if path.is_dir():
            return sum(1 for p in path.rglob("*") if p.is_file())
        name = path.name.lower()
        if file_kind(name) == "log":
            return 1
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                return sum(1 for i in zf.infolist() if not i.is_dir())
        if name.endswith(".tar") or (name.endswith((".tar.gz", ".tgz")) and path.stat().st_size <= COUNT_LIMIT_BYTES):
            with tarfile.open(path) as tf:
                return sum(1 for m in tf if m.isfile())
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError):
        return None  # the pipeline reports what is wrong with the archive
    return None
