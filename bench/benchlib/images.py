"""Builds the benchmark images of ../shared/anchors.md from this machine's own files.

Each image gets a sidecar `<image>.json` saying what it was built from and how; an image whose
sidecar matches the recipe is reused, so only the first run on a machine pays for mksquashfs.
"""

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

from .common import WORK_DIR, log, run

GIB = 1 << 30

# What each mode builds. Quick mode keeps the shapes but shrinks the trees so that a
# development run (images included) stays within a few minutes on 2 cores.
RECIPES = {
    "full": {
        "usr": {"sources": ["/usr"], "name": "usr.sqfs"},
        "data": {"bytes": GIB, "name": "data.sqfs"},
    },
    "quick": {
        "usr": {"sources": ["/usr/include"], "name": "usr-quick.sqfs"},
        "data": {"bytes": 256 << 20, "name": "data-quick.sqfs"},
    },
}

SERVICE_COUNT = 69
# Binaries and libraries concatenated into the data file: real, mixed-compressibility bytes.
DATA_SOURCE_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/bin", "/usr/libexec"]


def _tree_stats(paths):
    """Entries and apparent bytes of the trees (symlinks not followed)."""
    entries = size = 0
    for top in paths:
        entries += 1
        for dirpath, dirnames, filenames in os.walk(top):
            entries += len(dirnames) + len(filenames)
            for f in filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, f))
                    size += st.st_size
                except OSError:
                    pass
    return entries, size


def _sidecar(image):
    return image + ".json"


def _reusable(image, recipe):
    try:
        with open(_sidecar(image)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    if not os.path.exists(image) or meta.get("recipe") != recipe:
        return None
    return meta


def _mksquashfs(sources, image, extra):
    cmd = ["mksquashfs", *sources, image, "-comp", "zstd", *extra, "-noappend", "-no-progress", "-quiet"]
    run(cmd, capture=True)
    return cmd


def build_usr(mode):
    """`mksquashfs /usr -comp zstd` (quick: a subset)."""
    spec = RECIPES[mode]["usr"]
    image = os.path.join(WORK_DIR, spec["name"])
    recipe = {"kind": "usr", "sources": spec["sources"], "options": ["-comp", "zstd"]}
    meta = _reusable(image, recipe)
    if meta:
        return meta
    log(f"building {image} from {', '.join(spec['sources'])} (mksquashfs -comp zstd)")
    cmd = _mksquashfs(spec["sources"], image, [])
    entries, size = _tree_stats(spec["sources"])
    meta = {
        "recipe": recipe,
        "path": image,
        "command": " ".join(cmd),
        "built_from": f"{', '.join(spec['sources'])}: {entries} entries, {size / 1e9:.2f} GB of data",
        "entries": entries,
        "source_bytes": size,
        "image_bytes": os.path.getsize(image),
    }
    with open(_sidecar(image), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def _data_inputs(total):
    """Regular files (no symlinks) from DATA_SOURCE_DIRS, sorted, until `total` bytes."""
    seen, picked, size = set(), [], 0
    for top in DATA_SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for f in sorted(filenames):
                p = os.path.join(dirpath, f)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if not os.path.isfile(p) or os.path.islink(p) or st.st_size < 4096:
                    continue
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                picked.append(p)
                size += st.st_size
                if size >= total:
                    return picked
    return picked


def build_data(mode):
    """One file of exactly N bytes (1 GiB in full mode) made by concatenating real binaries and
    libraries; `mksquashfs -comp zstd -b 128K`. Repeats the inputs if the machine has fewer."""
    spec = RECIPES[mode]["data"]
    total = spec["bytes"]
    image = os.path.join(WORK_DIR, spec["name"])
    recipe = {"kind": "data", "bytes": total, "options": ["-comp", "zstd", "-b", "128K"]}
    meta = _reusable(image, recipe)
    if meta:
        return meta
    inputs = _data_inputs(total)
    if not inputs:
        raise RuntimeError("no binaries or libraries found to build the data file from")
    src = os.path.join(WORK_DIR, "data-src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    blob = os.path.join(src, "blob")
    log(f"building {image}: a {total >> 20} MiB file from {len(inputs)} binaries and libraries")
    written = 0
    with open(blob, "wb") as out:
        while written < total:
            for p in inputs:
                with open(p, "rb") as f:
                    chunk = f.read(total - written)
                out.write(chunk)
                written += len(chunk)
                if written >= total:
                    break
    try:
        cmd = _mksquashfs([src], image, ["-b", "128K"])
    finally:
        shutil.rmtree(src, ignore_errors=True)
    meta = {
        "recipe": recipe,
        "path": image,
        "file": "blob",
        "file_bytes": total,
        "command": " ".join(cmd),
        "built_from": f"{len(inputs)} files of {', '.join(DATA_SOURCE_DIRS)} concatenated "
        f"(first {inputs[0]}, last {inputs[-1]}), cut at {total} bytes",
        "image_bytes": os.path.getsize(image),
    }
    with open(_sidecar(image), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def _service_sources():
    """69 subdirectories of /usr/share spread evenly over the size range (smallest non-empty to
    the largest under ~64 MiB), like the portable-service images of seeds/loop-per-device-lock."""
    dirs = []
    for name in sorted(os.listdir("/usr/share")):
        p = os.path.join("/usr/share", name)
        if os.path.isdir(p) and not os.path.islink(p):
            entries, size = _tree_stats([p])
            if entries > 1 and size <= 64 << 20:
                dirs.append((size, p))
    dirs.sort()
    if len(dirs) <= SERVICE_COUNT:
        return [p for _, p in dirs]
    step = (len(dirs) - 1) / (SERVICE_COUNT - 1)
    return sorted({dirs[round(i * step)][1] for i in range(SERVICE_COUNT)})


def build_services():
    """69 images, one per subdirectory of /usr/share (the same in both modes)."""
    out_dir = os.path.join(WORK_DIR, "services")
    index = os.path.join(out_dir, "index.json")
    sources = _service_sources()
    recipe = {"kind": "services", "sources": sources, "options": ["-comp", "zstd"]}
    try:
        with open(index) as f:
            meta = json.load(f)
        if meta.get("recipe") == recipe and all(os.path.exists(i) for i in meta["images"]):
            return meta
    except (OSError, ValueError):
        pass
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    log(f"building {len(sources)} service images from /usr/share subdirectories")
    images = [os.path.join(out_dir, f"{i:02d}-{os.path.basename(s)}.sqfs") for i, s in enumerate(sources)]

    def one(pair):
        src, img = pair
        _mksquashfs([src], img, ["-processors", "1"])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(one, zip(sources, images)))
    sizes = [os.path.getsize(i) for i in images]
    meta = {
        "recipe": recipe,
        "images": images,
        "command": "mksquashfs /usr/share/<dir> <dir>.sqfs -comp zstd -processors 1, for each dir",
        "built_from": f"{len(sources)} subdirectories of /usr/share, spread over sizes: "
        + ", ".join(os.path.basename(s) for s in sources),
        "count": len(images),
        "image_bytes": sum(sizes),
        "smallest_bytes": min(sizes),
        "largest_bytes": max(sizes),
    }
    with open(index, "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def build_all(mode, needed=("usr", "data", "services")):
    """The images of `needed` (the full usr takes minutes to build: E2 alone does not need it)."""
    os.makedirs(WORK_DIR, exist_ok=True)
    builders = {"usr": lambda: build_usr(mode), "data": lambda: build_data(mode), "services": build_services}
    return {name: build() for name, build in builders.items() if name in needed}


# The kernel's EROFS on a metadata image + a blob of file data, as composefs and nydus lay it
# out and as squashd's kernel path does (the reference of issue 15). Built from the same tree as
# the squashfs image: /usr (or its quick subset) for usr; for data, the squashfs image's own
# tree extracted with unsquashfs (the concatenated source file is deleted after mksquashfs; this
# gives the very same bytes back).
EROFS_OPTIONS = ["--chunksize=1048576"]


def erofs_unavailable():
    """Why the mkfs.erofs reference cannot be built here, or None."""
    if not shutil.which("mkfs.erofs"):
        return "mkfs.erofs not found (Debian package erofs-utils)"
    return None


def build_erofs(sqfs_meta):
    """`mkfs.erofs --chunksize=1048576 --blobdev=BLOB META SRC` of the tree `sqfs_meta` (a usr
    or data sidecar) was built from. META and BLOB lie in bench/work/erofs (a disk file system:
    EROFS refuses a metadata image on tmpfs). Returns the sidecar dict (meta, blob, command)."""
    kind = sqfs_meta["recipe"]["kind"]
    stem = os.path.basename(sqfs_meta["path"]).removesuffix(".sqfs")
    out_dir = os.path.join(WORK_DIR, "erofs")
    os.makedirs(out_dir, exist_ok=True)
    meta_img = os.path.join(out_dir, f"{stem}-meta.erofs")
    blob = os.path.join(out_dir, f"{stem}.blob")
    recipe = {"kind": "erofs", "of": sqfs_meta["recipe"], "of_image_bytes": sqfs_meta["image_bytes"],
              "options": EROFS_OPTIONS}
    sidecar = meta_img + ".json"
    try:
        with open(sidecar) as f:
            meta = json.load(f)
        if meta.get("recipe") == recipe and os.path.exists(meta_img) and os.path.exists(blob):
            return meta
    except (OSError, ValueError):
        pass
    for p in (meta_img, blob, sidecar):
        if os.path.exists(p):
            os.remove(p)
    extracted = None
    if kind == "usr":
        src = sqfs_meta["recipe"]["sources"][0]
        built_from = f"{src} (the source of {os.path.basename(sqfs_meta['path'])})"
    else:
        extracted = os.path.join(WORK_DIR, f"{stem}-extracted")
        shutil.rmtree(extracted, ignore_errors=True)
        log(f"extracting {sqfs_meta['path']} for mkfs.erofs (the same bytes as the squashfs image)")
        run(["unsquashfs", "-no-progress", "-d", extracted, sqfs_meta["path"]])
        src = extracted
        built_from = f"the tree of {os.path.basename(sqfs_meta['path'])} (unsquashfs -d)"
    cmd = ["mkfs.erofs", *EROFS_OPTIONS, f"--blobdev={blob}", meta_img, src]
    log(f"building the EROFS reference: {' '.join(cmd)}")
    try:
        run(cmd)
    finally:
        if extracted:
            shutil.rmtree(extracted, ignore_errors=True)
    meta = {
        "recipe": recipe,
        "meta": meta_img,
        "blob": blob,
        "command": " ".join(cmd).replace(extracted or "\0", "<unsquashfs -d of the image>"),
        "built_from": built_from,
        "meta_bytes": os.path.getsize(meta_img),
        "blob_bytes": os.path.getsize(blob),
    }
    with open(sidecar, "w") as f:
        json.dump(meta, f, indent=1)
    return meta
