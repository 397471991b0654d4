"""The kiln command."""

from __future__ import annotations

from kiln import cli


def test_version(capsys):
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.strip()


def test_bench_lists_suites(capsys):
    assert cli.main(["bench", "--list"]) == 0
    assert "foundation" in capsys.readouterr().out
