"""Every fixture variant read through the package, compared with the kernel's squashfs mount
(as root) and with unsquashfs's extraction: data, stat fields, listings, symlinks, xattrs and
hard links."""

from __future__ import annotations

import pytest

import squashd
from compare import compare, same_hard_links
from conftest import VARIANTS, kernel_mount


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_unsquashfs(images, variant):
    offset = VARIANTS[variant][2]
    with squashd.open(images.image(variant), offset=offset or None) as image:
        assert image.offset == offset
        n = compare(image, images.unsquashed(variant), kernel=False)
        same_hard_links(image, images.unsquashed(variant))
    assert n > 650


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_the_kernel_mount(images, work, variant):
    offset = VARIANTS[variant][2]
    with kernel_mount(images.image(variant), work / f"mnt-{variant}", offset) as mnt:
        with squashd.open(images.image(variant), offset=offset or None) as image:
            n = compare(image, mnt, kernel=True)
            same_hard_links(image, mnt)
    assert n > 650
