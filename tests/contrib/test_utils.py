"""tvm.contrib.utils.tempdir, and the contrib modules under the ``tvm`` alias."""

import importlib
import os

import pytest

from kiln import alias
from kiln.contrib import utils


def test_tempdir_paths_listing_and_removal():
    with utils.tempdir() as tmp:
        with open(tmp.relpath("a.txt"), "w") as f:
            f.write("x")
        assert tmp.listdir() == ["a.txt"]
        path = tmp.temp_dir
    assert not os.path.exists(path)


def test_keep_for_debug():
    with utils.TempDirectory.set_keep_for_debug():
        tmp = utils.tempdir()
    path = tmp.temp_dir
    tmp.remove()
    assert os.path.isdir(path)
    os.rmdir(path)
    assert utils.TempDirectory._KEEP_FOR_DEBUG is False


def test_custom_path_is_kept(tmp_path):
    tmp = utils.tempdir(str(tmp_path / "mine"))
    tmp.remove()
    assert (tmp_path / "mine").is_dir()


@pytest.fixture
def tvm_alias():
    alias.install_as_tvm()
    yield
    alias.uninstall_as_tvm()


@pytest.mark.parametrize("name", ["cc", "clang", "nvcc", "download", "utils", "cblas", "mkl",
                                  "cublas", "cudnn"])
def test_importable_under_the_alias(tvm_alias, name):
    mod = importlib.import_module(f"tvm.contrib.{name}")
    assert mod is importlib.import_module(f"kiln.contrib.{name}")
