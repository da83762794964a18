"""Files that survive a kill: append-only JSON lines, and whole files written atomically.

An append-only file grows by whole lines: the lines of one `append_lines` go out in one
`write` and are on disk (fsync) when it returns. A writer killed mid-write leaves a torn last
line, the bytes after the last newline. Readers ignore it and the next append cuts it off
first, so a kill -9 loses at most the lines being written and never corrupts the file; any
other line that is not JSON is an error that names the file and the line.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from dragonlab.core.errors import InputError

T = TypeVar("T")


class JsonFormatError(InputError):
    """A JSON or JSON-lines file that is not what dragonlab wrote; names the file (and line)."""


def append_lines(path: str | os.PathLike, objs: Iterable) -> None:
    """Append one compact JSON line per object, after cutting a torn last line."""
    payload = b"".join(json.dumps(o, separators=(",", ":")).encode() + b"\n" for o in objs)
    if not payload:
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        keep = _complete_size(fd, size)
        if keep != size:
            os.ftruncate(fd, keep)
        view = memoryview(payload)
        while view:  # a regular file takes it all at once, short of a full disk
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _complete_size(fd: int, size: int, chunk: int = 1 << 16) -> int:
    """Bytes up to and including the last newline, searched from the end."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        i = os.pread(fd, end - start, start).rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


def read_lines(path: str | os.PathLike, parse: Callable[[Any], T] = lambda obj: obj, *,
               error: type[ValueError] = JsonFormatError) -> Iterator[T]:
    """`parse` of each complete line's JSON value; blank lines and a torn last line are skipped.
    A line that is not JSON, or that `parse` rejects (ValueError, TypeError, KeyError), raises
    `error` naming the file and the line. A `.gz` file (a sealed one, see `seal`) is read through
    gzip; one that is not gzip raises `error` too."""
    if not str(path).endswith(".gz"):
        with open(path, "rb") as f:
            yield from _parse_lines(path, f, parse, error)
        return
    with gzip.open(path, "rb") as f:
        try:
            yield from _parse_lines(path, f, parse, error)
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:  # not gzip, or cut short
            raise error(f"{path}: not a readable gzip file ({type(e).__name__}: {e})") from None


def _parse_lines(path, f, parse: Callable[[Any], T], error: type[ValueError]) -> Iterator[T]:
    for no, raw in enumerate(f, 1):
        if not raw.endswith(b"\n"):
            return  # torn: the writer was killed before it finished the line
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise error(f"{path}:{no}: not JSON ({_why(e)})") from None
        try:
            value = parse(obj)
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            raise error(f"{path}:{no}: {e if isinstance(e, ValueError) else _why(e)}") from None
        yield value


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value of a whole file; one that is not JSON raises JsonFormatError naming it."""
    try:
        return json.loads(Path(path).read_bytes())
    except (ValueError, RecursionError) as e:
        raise JsonFormatError(f"{path}: not JSON ({_why(e)})") from None


def _why(e: Exception) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at line {e.lineno} column {e.colno}" if e.lineno > 1 else f"{e.msg} at column {e.colno}"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 at byte {e.start}"
    return f"{type(e).__name__}: {e}"


def seal(path: str | os.PathLike) -> Path:
    """Compress a finished append-only file into `<path>.gz` and remove it: the `.gz` appears whole
    (a temporary file, fsync, one rename) with every complete line and no torn one, and the same
    lines always give the same bytes (no timestamp in the gzip header), so a sealed file can go
    into git once and never change. Refuses to replace an existing `.gz`."""
    path = Path(path)
    out = path.with_name(path.name + ".gz")
    if out.exists():
        raise InputError(f"{out} already exists: a sealed file never changes; append under another name")
    size = _complete_size_of(path)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    with open(path, "rb") as src, open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            left = size
            while left:
                chunk = src.read(min(left, 1 << 20))
                gz.write(chunk)
                left -= len(chunk)
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, out)
    path.unlink()
    return out


def complete_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes up to the end of its last complete line (a torn last line left out)."""
    with open(path, "rb") as f:
        return f.read(_complete_size_of(Path(path)))


def _complete_size_of(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return _complete_size(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Write a whole file or nothing: a temporary file beside it, then one rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
