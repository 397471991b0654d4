"""tvm.contrib.download: a local cache filled from file:// URLs (never the network), and the
offline error that says where to place the file."""

import urllib.error
import urllib.request

import pytest

from kiln import TVMError
from kiln.contrib import download


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_TEST_DATA", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "weights.bin"
    src.write_bytes(b"abc")
    return src


def test_download_testdata_fills_the_cache(cache, source):
    path = download.download_testdata(source.as_uri(), "w.bin", module=["net", "v1"])
    assert path == str(cache / "net" / "v1" / "w.bin")
    assert (cache / "net" / "v1" / "w.bin").read_bytes() == b"abc"
    source.write_bytes(b"changed")
    download.download_testdata(source.as_uri(), "w.bin", module=["net", "v1"])
    assert (cache / "net" / "v1" / "w.bin").read_bytes() == b"abc"  # the cached copy
    download.download_testdata(source.as_uri(), "w.bin", module=["net", "v1"], overwrite=True)
    assert (cache / "net" / "v1" / "w.bin").read_bytes() == b"changed"


def test_size_compare_refetches_a_different_file(tmp_path, source):
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"x")
    download.download(source.as_uri(), dest, size_compare=True)
    assert dest.read_bytes() == b"abc"


def test_offline_error_says_where_to_place_the_file(cache, monkeypatch):
    calls = []

    def offline(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(TVMError) as e:
        download.download_testdata("https://example.org/cat.png", "cat.png", module="data")
    assert "https://example.org/cat.png" in str(e.value)
    assert str(cache / "data" / "cat.png") in str(e.value)
    assert len(calls) == 3  # retries
    assert not (cache / "data" / "cat.png").exists()
    assert list((cache / "data").iterdir()) == []  # no partial file left behind


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("KILN_TEST_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert download.testdata_dir() == tmp_path / "kiln" / "test_data"
