"""SquashFS images read from Python without a mount: local files, AppImage and SIF
containers, and images on HTTP(S) servers or in S3, read by squashd's Rust engine.

>>> import squashd
>>> with squashd.open("env.sqfs") as image:
...     for root, dirs, files in image.walk("/"):
...         for name in files:
...             data = image.read_bytes(f"{root}/{name}")

Calls follow ``os``, ``io`` and ``pathlib``: ``listdir``, ``scandir``, ``walk``, ``stat``,
``lstat``, ``readlink``, ``listxattr``, ``getxattr``, ``exists``, ``open``, ``read_bytes``,
``extract``. Names are ``str`` (undecodable bytes as surrogates, as ``os`` gives them) or, where
a path was given as ``bytes``, ``bytes``. Every read and walk releases the GIL, and one
:class:`Image` may be used by any number of threads at once.
"""

from __future__ import annotations

import io
import os
import errno as _errno
import stat as _stat
from typing import Any, AnyStr, Callable, Iterator, Optional, Tuple, List, Union

from ._native import DirEntry, File as _NativeFile, Image as _NativeImage, __version__

__all__ = ["open", "Image", "DirEntry", "__version__"]

StrOrBytesPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def open(  # noqa: A001 - the package's entry point, as tarfile.open and zipfile's
    path_or_url: Any,
    *,
    offset: Optional[int] = None,
    partition: Optional[int] = None,
    cache: Any = None,
    disk_cache: Optional[Union[str, "os.PathLike[str]"]] = None,
    disk_cache_size: int = 4 << 30,
    read_ahead: Optional[int] = None,
) -> "Image":
    """Opens a SquashFS image.

    ``path_or_url`` is a path, an ``http://``, ``https://`` or ``s3://BUCKET/KEY`` address (S3
    credentials, region and endpoint come from the ``AWS_*`` environment variables and
    ``~/.aws``, as for the ``squashd`` command), or a binary file object with ``seek`` and
    ``read``. An AppImage or Apptainer SIF file is read at the image it holds (its primary
    system partition, or ``partition``, a descriptor id); ``offset`` gives the image's byte
    offset in the file instead.

    ``cache`` is the decompressed data cache's budget in bytes, or a dict of ``metadata``,
    ``data`` and ``compressed`` budgets (defaults: 64 MiB, 64 MiB, 0). ``disk_cache`` is a
    directory that keeps a remote image's fetched bytes for later runs (``disk_cache_size``
    bytes at most). ``read_ahead`` is the number of threads that decompress ahead of sequential
    readers and share large reads (default: one per core; 0 turns both off).
    """
    return Image(
        path_or_url,
        offset=offset,
        partition=partition,
        cache=cache,
        disk_cache=disk_cache,
        disk_cache_size=disk_cache_size,
        read_ahead=read_ahead,
    )


class _ScandirIterator:
    """What :meth:`Image.scandir` returns: an iterator of :class:`DirEntry`, and a context
    manager, as ``os.scandir``'s."""

    def __init__(self, entries: List[DirEntry]) -> None:
        self._entries = iter(entries)

    def __iter__(self) -> "_ScandirIterator":
        return self

    def __next__(self) -> DirEntry:
        return next(self._entries)

    def close(self) -> None:
        self._entries = iter(())

    def __enter__(self) -> "_ScandirIterator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RawFile(io.RawIOBase):
    """A regular file of an image as an unbuffered binary stream with a position."""

    def __init__(self, native: _NativeFile, name: Any) -> None:
        super().__init__()
        self._native = native
        self._position = 0
        self.name = name
        self.mode = "rb"

    @property
    def size(self) -> int:
        return self._native.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def readinto(self, buffer: Any) -> int:
        self._check_open()
        view = memoryview(buffer).cast("B")
        data = self._native.pread(self._position, len(view))
        n = len(data)
        view[:n] = data
        self._position += n
        return n

    def read(self, size: Optional[int] = -1) -> bytes:
        self._check_open()
        if size is None or size < 0:
            return self.readall()
        data = self._native.pread(self._position, size)
        self._position += len(data)
        return data

    def readall(self) -> bytes:
        self._check_open()
        data = self._native.pread(self._position, max(self._native.size - self._position, 0))
        self._position += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        if whence == io.SEEK_SET:
            position = offset
        elif whence == io.SEEK_CUR:
            position = self._position + offset
        elif whence == io.SEEK_END:
            position = self._native.size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if position < 0:
            raise OSError(_errno.EINVAL, "Invalid argument: negative seek position")
        self._position = position
        return position

    def tell(self) -> int:
        self._check_open()
        return self._position


class ImageFile(io.BufferedReader):
    """A file of an image opened for reading: an ``io.BufferedReader`` with the file's
    ``size``."""

    @property
    def size(self) -> int:
        return self.raw.size  # type: ignore[attr-defined]


class Image(_NativeImage):
    """An opened SquashFS image (see :func:`open`). A context manager; ``close()`` drops the
    image once the files opened from it are closed too."""

    def scandir(self, path: StrOrBytesPath = ".") -> _ScandirIterator:
        """The entries of directory ``path``, as ``os.scandir``: each a :class:`DirEntry` with
        ``name``, ``path``, ``is_dir()``, ``is_file()``, ``is_symlink()``, ``stat()`` and
        ``inode()``, read with the listing."""
        return _ScandirIterator(self._scandir(path))

    def walk(
        self,
        top: StrOrBytesPath = ".",
        topdown: bool = True,
        onerror: Optional[Callable[[OSError], Any]] = None,
        followlinks: bool = False,
    ) -> Iterator[Tuple[Any, List[Any], List[Any]]]:
        """The tree below ``top`` as ``os.walk`` gives it: ``(dirpath, dirnames, filenames)``
        for each directory, parents first unless ``topdown`` is false (then ``dirnames`` may be
        pruned in place). Errors go to ``onerror`` (ignored without it), as ``os.walk``'s do; a
        directory inside itself (a corrupt image's cycle, or a symlink followed back up) is
        reported there as ``OSError`` and not entered again, where ``os.walk`` would go on
        forever."""
        top = os.fspath(top)
        try:
            top_ino = self.stat(top).st_ino
        except OSError:
            top_ino = None
        # Each directory to visit with the inode numbers of the directories above it: one
        # that is its own ancestor is a cycle (symlinks followed or not).
        stack: List[Any] = [(top, frozenset([top_ino]))]
        while stack:
            item = stack.pop()
            if len(item) == 3:
                yield item
                continue
            path, ancestors = item
            try:
                entries = self._scandir(path)
            except OSError as error:
                if onerror is not None:
                    onerror(error)
                continue
            dirs: List[Any] = []
            nondirs: List[Any] = []
            into: List[Any] = []
            for entry in entries:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if not is_dir:
                    nondirs.append(entry.name)
                    continue
                dirs.append(entry.name)
                if entry.is_symlink() and not followlinks:
                    continue
                try:
                    number = entry.stat().st_ino
                except OSError as error:
                    if onerror is not None:
                        onerror(error)
                    continue
                if number in ancestors:
                    if onerror is not None:
                        onerror(
                            OSError(
                                _errno.ELOOP if entry.is_symlink() else _errno.EIO,
                                f"{self.name}: directory inode {number} is inside itself"
                                + ("" if entry.is_symlink() else " (a corrupt image)"),
                                entry.path,
                            )
                        )
                    continue
                into.append((entry.name, entry.path, ancestors | {number}))
            if topdown:
                yield path, dirs, nondirs
                # The caller may have pruned `dirs`.
                kept = set(dirs)
                stack.extend((p, a) for name, p, a in reversed(into) if name in kept)
            else:
                stack.append((path, dirs, nondirs))
                stack.extend((p, a) for _, p, a in reversed(into))

    def open(  # noqa: A003 - as pathlib.Path.open and zipfile.ZipFile.open
        self,
        path: StrOrBytesPath,
        mode: str = "rb",
        buffering: int = -1,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        newline: Optional[str] = None,
    ) -> Any:
        """Opens file ``path`` for reading: ``"rb"`` gives a seekable binary file (an
        ``io.BufferedReader``, or with ``buffering=0`` the raw ``io.RawIOBase``), ``"r"``
        a text file (``io.TextIOWrapper``)."""
        if mode not in ("r", "rb", "rt", "br", "tr"):
            raise ValueError(f"invalid mode: {mode!r} (an image is read-only: 'rb' or 'r')")
        binary = "b" in mode
        if binary and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
        raw = _RawFile(self._open_file(path), os.fspath(path))
        if buffering == 0:
            if not binary:
                raise ValueError("can't have unbuffered text I/O")
            return raw
        size = buffering if buffering > 1 else max(io.DEFAULT_BUFFER_SIZE, self.block_size)
        buffered = ImageFile(raw, size)
        if binary:
            return buffered
        return io.TextIOWrapper(buffered, encoding, errors, newline)

    def is_dir(self, path: StrOrBytesPath) -> bool:
        """Whether ``path`` is a directory (symlinks followed), as ``os.path.isdir``."""
        return self._is(path, _stat.S_ISDIR)

    def is_file(self, path: StrOrBytesPath) -> bool:
        """Whether ``path`` is a regular file (symlinks followed), as ``os.path.isfile``."""
        return self._is(path, _stat.S_ISREG)

    def is_symlink(self, path: StrOrBytesPath) -> bool:
        """Whether ``path`` is a symbolic link, as ``os.path.islink``."""
        try:
            return _stat.S_ISLNK(self.lstat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _is(self, path: StrOrBytesPath, test: Callable[[int], bool]) -> bool:
        try:
            return test(self.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as error:
            if error.errno == _errno.ELOOP:
                return False
            raise
