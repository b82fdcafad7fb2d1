"""An fsspec file system over SquashFS images, under the protocol ``squashfs``:

>>> import fsspec
>>> fs = fsspec.filesystem("squashfs", fo="img.sqfs")
>>> fs.ls("")
>>> with fsspec.open("squashfs://data/train.csv::s3://bucket/img.sqfs", "rt") as f:
...     header = f.readline()

It is an archive file system in fsspec's style (``fo`` and ``target_protocol`` /
``target_options`` name the image). Where the image is a local file, an ``http(s)://`` address
or an ``s3://`` object without ``target_options``, squashd's own source reads it (ranged
requests in parallel, its own caches, S3 credentials from the ``AWS_*`` environment and
``~/.aws``); anywhere else it is read through the file fsspec opens for it. Paths are relative
to the image's root; listings are read from the image as asked, never all at open.
"""

from __future__ import annotations

import os
import stat as _stat
from typing import Any, Dict, List, Optional

import fsspec
from fsspec.archive import AbstractArchiveFileSystem
from fsspec.utils import infer_storage_options

import squashd

#: Protocols whose objects squashd's own source reads.
_LOCAL = {"file", "local"}
_HTTP = {"http", "https"}
_S3 = {"s3", "s3a"}


def _info(name: str, st: os.stat_result, link_stat: Optional[os.stat_result] = None) -> Dict[str, Any]:
    mode = st.st_mode
    if _stat.S_ISDIR(mode):
        kind = "directory"
    elif _stat.S_ISREG(mode):
        kind = "file"
    else:
        kind = "other"
    return {
        "name": name,
        "size": st.st_size if kind == "file" else 0,
        "type": kind,
        "mode": mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "mtime": st.st_mtime,
        "ino": st.st_ino,
        "nlink": st.st_nlink,
        "islink": link_stat is not None and _stat.S_ISLNK(link_stat.st_mode),
    }


class SquashFileSystem(AbstractArchiveFileSystem):
    """The files of one SquashFS image, read-only.

    ``fo``: the image: a path, a URL, a file object or an open :class:`squashd.Image`;
    ``target_protocol``/``target_options``: where and how to fetch it, as for fsspec's other
    archive file systems; ``offset``, ``partition``, ``cache``, ``disk_cache``, ``read_ahead``:
    as for :func:`squashd.open`.
    """

    protocol = "squashfs"
    root_marker = ""

    def __init__(
        self,
        fo: Any = "",
        mode: str = "r",
        target_protocol: Optional[str] = None,
        target_options: Optional[Dict[str, Any]] = None,
        offset: Optional[int] = None,
        partition: Optional[int] = None,
        cache: Any = None,
        disk_cache: Optional[str] = None,
        read_ahead: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if mode != "r":
            raise ValueError(f"mode {mode!r}: a SquashFS image is read-only ('r')")
        options = dict(
            offset=offset,
            partition=partition,
            cache=cache,
            disk_cache=disk_cache,
            read_ahead=read_ahead,
        )
        self._outer = None
        self.fo = fo
        if isinstance(fo, squashd.Image):
            self.image = fo
        elif hasattr(fo, "read") and hasattr(fo, "seek"):
            self.image = squashd.open(fo, **options)
        else:
            self.image = self._open_target(os.fspath(fo), target_protocol, target_options, options)
        self.dir_cache = None

    def _open_target(
        self,
        fo: str,
        target_protocol: Optional[str],
        target_options: Optional[Dict[str, Any]],
        options: Dict[str, Any],
    ) -> squashd.Image:
        protocol = target_protocol or infer_storage_options(fo).get("protocol") or "file"
        if isinstance(protocol, (list, tuple)):
            protocol = protocol[0]
        if not target_options:
            if protocol in _LOCAL:
                path = fo.split("://", 1)[1] if fo.startswith(("file://", "local://")) else fo
                return squashd.open(path, **options)
            if protocol in _HTTP:
                url = fo if "://" in fo else f"{protocol}://{fo}"
                return squashd.open(url, **options)
            if protocol in _S3:
                bucket_key = fo.split("://", 1)[1] if "://" in fo else fo
                return squashd.open(f"s3://{bucket_key}", **options)
        # Any other place (or one configured through fsspec): the file fsspec opens for it.
        self._outer = fsspec.open(fo, mode="rb", protocol=target_protocol, **(target_options or {}))
        return squashd.open(self._outer.__enter__(), **options)

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        return super()._strip_protocol(path).lstrip("/")

    def close(self) -> None:
        self.image.close()
        if self._outer is not None:
            self._outer.__exit__(None, None, None)
            self._outer = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _get_dirs(self) -> None:
        """Every entry of the image, for fsspec's generic archive methods (the methods of this
        class read the image as they are asked instead)."""
        if self.dir_cache is not None:
            return
        cache = {}
        for root, dirs, files in self.image.walk("."):
            base = root[2:] if root.startswith("./") else ("" if root == "." else root)
            for name in dirs + files:
                path = f"{base}/{name}" if base else name
                cache[path] = self.info(path)
        self.dir_cache = cache

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        path = self._strip_protocol(path)
        lst = self.image.lstat(path or ".")
        if _stat.S_ISLNK(lst.st_mode):
            try:
                st = self.image.stat(path)
            except OSError:
                st = lst
            out = _info(path, st, lst)
            out["destination"] = self.image.readlink(path)
            return out
        return _info(path, lst)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        path = self._strip_protocol(path)
        if not self.image.is_dir(path or "."):
            info = self.info(path)
            return [info] if detail else [info["name"]]
        out = []
        for entry in self.image.scandir(path or "."):
            name = f"{path}/{entry.name}" if path else entry.name
            if not detail:
                out.append(name)
                continue
            lst = entry.stat(follow_symlinks=False)
            if entry.is_symlink():
                try:
                    info = _info(name, entry.stat(), lst)
                except OSError:
                    info = _info(name, lst, lst)
                info["destination"] = self.image.readlink(name)
            else:
                info = _info(name, lst)
            out.append(info)
        return out

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self.image.exists(self._strip_protocol(path) or ".")

    def isdir(self, path: str) -> bool:
        return self.image.is_dir(self._strip_protocol(path) or ".")

    def isfile(self, path: str) -> bool:
        return self.image.is_file(self._strip_protocol(path) or ".")

    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        if start is None and end is None:
            return self.image.read_bytes(path)
        with self.image.open(path, "rb", buffering=0) as f:
            size = f.size
            start = 0 if start is None else (start if start >= 0 else max(size + start, 0))
            end = size if end is None else (end if end >= 0 else max(size + end, 0))
            f.seek(start)
            return f.read(max(end - start, 0))

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: Optional[int] = None,
        autocommit: bool = True,
        cache_options: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> Any:
        if "r" not in mode or any(c in mode for c in "wax+"):
            raise ValueError(f"mode {mode!r}: a SquashFS image is read-only")
        return self.image.open(self._strip_protocol(path), "rb")

    def ukey(self, path: str) -> str:
        st = self.image.stat(self._strip_protocol(path) or ".")
        return fsspec.utils.tokenize(self.image.name, self.image.offset, st.st_ino, st.st_mtime)
