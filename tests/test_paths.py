"""A file's identity (`paths.file_state`): a digest of its content, computed once per size and modification time
and remembered in .cache/file-digests.json, which keeps the digests of files as they are and no others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rerank.paths import DIGESTS_FILE, file_digest, file_sha256, file_state


@pytest.fixture
def digests(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RERANK_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / ".cache" / DIGESTS_FILE


def _remembered(digests: Path) -> set[str]:
    return set(json.loads(digests.read_text()))


def _key(path: Path) -> str:
    now = path.resolve().stat()
    return f"{path.resolve()}:{now.st_size}:{now.st_mtime_ns}"


def test_a_file_edited_again_and_again_leaves_one_digest_and_a_removed_one_none(tmp_path, digests):
    """The digest file gained a key per path, size and time and dropped none: a file edited ten times left ten
    keys, a removed file's stayed for good, and every one was written out again with each new digest."""
    edited, removed, kept = tmp_path / "topics:v2.tsv", tmp_path / "gone.tsv", tmp_path / "kept.tsv"  # ':' in a path
    removed.write_text("gone")
    kept.write_text("kept")
    file_state(removed), file_state(kept)
    for words in range(1, 11):
        edited.write_text("word " * words)
        assert file_digest(edited) == file_sha256(edited)[:16]
    assert _remembered(digests) == {_key(edited), _key(removed), _key(kept)}
    removed.unlink()
    edited.write_text("edited once more")
    file_state(edited)
    assert _remembered(digests) == {_key(edited), _key(kept)}
    assert file_state(kept) == f"{kept.resolve()}:4:{file_sha256(kept)[:16]}"


def test_digests_another_process_wrote_are_kept_and_those_it_dropped_are_not_written_back(tmp_path, digests):
    """Each process merges its digests with the file's as it writes it: what another one remembered meanwhile stays,
    and a digest this process read before the other dropped it (its file edited since) does not come back."""
    one, two, three = (tmp_path / f"{name}.tsv" for name in ("one", "two", "three"))
    for path in (one, two, three):
        path.write_text(path.name)
    file_state(one)  # read and extended here
    one.write_text("one, edited")
    other = ("import sys; from pathlib import Path; from rerank.paths import file_state; "
             "[file_state(Path(p)) for p in sys.argv[1:]]")
    subprocess.run([sys.executable, "-c", other, str(one), str(two)], check=True)
    assert _remembered(digests) == {_key(one), _key(two)}
    file_state(three)
    assert _remembered(digests) == {_key(one), _key(two), _key(three)}


def test_a_damaged_digest_file_is_written_anew(tmp_path, digests):
    """A digest file that was not JSON was read as empty and never written again: every file was hashed anew in
    every process."""
    digests.parent.mkdir(parents=True)
    digests.write_text('{"cut short')
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("d1\tsome text\n")
    file_state(corpus)
    assert _remembered(digests) == {_key(corpus)}
