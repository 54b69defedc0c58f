"""``python -m fa_hetdp.server.certs`` loses nothing: it never replaces what is there (review).

The command wrote a new CA and new keys over an existing ``certs/`` folder: a deployment's
CA key (and every SuperNode key it had handed out) was gone after a second run. Now a target
folder that holds anything is refused before anything is written, with what is there and how
to go on; the functions refuse any file they would replace; every file is written atomically
(no temporary file left behind, a key readable by its owner only).
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from fa_hetdp.server.certs import generate_node_keys, generate_tls_files, main

TLS = ["ca.crt", "ca.key", "server.key", "server.pem"]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_second_run_into_the_same_folder_is_refused_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "certs"
    assert main([str(out), "--node-keys", "owner-0"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == sorted([*TLS, "owner-0", "owner-0.pub"])
    capsys.readouterr()
    assert main([str(out), "--node-keys", "owner-0", "owner-1"]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "ca.key" in err  # what exists
    assert "another folder" in err and "move" in err  # how to go on
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing lost, nothing new


def test_a_folder_with_any_other_file_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "certs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main([str(out)]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_a_file_where_the_folder_should_be_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "certs"
    out.write_text("not a folder")
    assert main([str(out)]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert out.read_text() == "not a folder"


def test_an_empty_or_new_folder_is_written_atomically_with_private_keys(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 0
    assert sorted(p.name for p in empty.iterdir()) == TLS  # no temporary file left
    new = tmp_path / "a" / "b"
    assert main([str(new), "--node-keys", "owner-0"]) == 0
    assert sorted(p.name for p in new.iterdir()) == sorted([*TLS, "owner-0", "owner-0.pub"])
    for key in ("ca.key", "server.key", "owner-0"):
        assert _mode(new / key) == 0o600, key
    for public in ("ca.crt", "server.pem", "owner-0.pub"):
        assert _mode(public_path := new / public) & 0o044 == 0o044, public_path  # readable


def test_bad_node_key_names_are_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for names in (["a/b"], ["owner-0", "owner-0"], ["ca.key"], ["server.pem"], [".."]):
        out = tmp_path / "certs"
        assert main([str(out), "--node-keys", *names]) == 2, names
        assert "--node-keys" in capsys.readouterr().err, names
        assert not out.exists(), names


def test_the_functions_refuse_any_file_they_would_replace(tmp_path: Path) -> None:
    files = generate_tls_files(tmp_path)
    ca_key = files.ca_key.read_bytes()
    with pytest.raises(FileExistsError, match=r"ca\.crt"):
        generate_tls_files(tmp_path)
    assert files.ca_key.read_bytes() == ca_key
    keys = generate_node_keys(tmp_path / "keys", "owner-0")
    private = keys.private_key.read_bytes()
    with pytest.raises(FileExistsError, match="owner-0"):
        generate_node_keys(tmp_path / "keys", "owner-0")
    assert keys.private_key.read_bytes() == private
    generate_node_keys(tmp_path / "keys", "owner-1")  # another name in the same folder: fine
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == [
        "owner-0",
        "owner-0.pub",
        "owner-1",
        "owner-1.pub",
    ]
