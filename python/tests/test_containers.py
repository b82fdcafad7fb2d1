"""Images inside other files: at an offset, in an AppImage, in an Apptainer SIF file (the
seeds in fuzz/corpus/locate, made by siftool and from /bin/true, holding the gzip seed image)."""

from __future__ import annotations

import subprocess

import pytest

import squashd
from compare import compare
from conftest import VARIANTS, appimage_of, corpus, image_offset_in


def test_an_offset_must_be_given_for_an_image_in_the_middle_of_a_file(images):
    path = images.image("zstd-offset")
    with pytest.raises(OSError):
        squashd.open(path)
    with pytest.raises(OSError):
        squashd.open(path, offset=VARIANTS["zstd-offset"][2] + 1)
    with squashd.open(path, offset=VARIANTS["zstd-offset"][2]) as image:
        assert image.container is None and image.read_bytes("a.txt") == b"A\n"
    with pytest.raises(ValueError):
        squashd.open(path, offset=0, partition=1)


def test_appimage_is_read_at_its_image(images, work):
    raw = images.image("gzip")
    app = appimage_of(raw, work / "test.AppImage")
    with squashd.open(app) as image:
        assert image.container == "AppImage (type 2)"
        assert image.offset == image_offset_in(app, raw) > 0
        compare(image, images.unsquashed("gzip"), kernel=False)


@pytest.fixture(scope="module")
def seed_tree(tmp_path_factory):
    """The gzip seed image of the fuzz corpus, extracted by unsquashfs."""
    out = tmp_path_factory.mktemp("seed") / "tree"
    subprocess.run(
        ["unsquashfs", "-no-progress", "-d", str(out), str(corpus("open_walk_read/gzip.sqfs"))],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


def test_sif_primary_partition_and_a_chosen_one(seed_tree):
    sif = corpus("locate/two-partitions.sif")
    seed = corpus("open_walk_read/gzip.sqfs")
    with squashd.open(sif) as image:
        assert image.container == "Apptainer SIF"
        primary = image.offset
        compare(image, seed_tree, kernel=False)
    # Descriptor 3 is the data partition holding the same image further on.
    with squashd.open(sif, partition=3) as image:
        assert image.offset > primary
        assert sif.read_bytes()[image.offset :].startswith(seed.read_bytes())
        compare(image, seed_tree, kernel=False)
    with pytest.raises(OSError):
        squashd.open(sif, partition=99)
    with pytest.raises(OSError) as e:
        squashd.open(seed, partition=2)
    assert "not a SIF file" in str(e.value)


def test_appimage_seed_of_the_corpus(seed_tree):
    with squashd.open(corpus("locate/true.AppImage")) as image:
        assert image.container == "AppImage (type 2)"
        compare(image, seed_tree, kernel=False)
