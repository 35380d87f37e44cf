"""Outputs appear whole or not at all, and never take a user's files with them."""

import pytest

from rerank.atomic import atomic_dir, atomic_output
from rerank.errors import UsageError


def test_folder_output_replaces_only_an_earlier_output_of_its_kind(tmp_path):
    earlier = tmp_path / "ck"
    with atomic_dir(earlier, "checkpoint.json") as tmp:
        (tmp / "checkpoint.json").write_text("{}")
    with atomic_dir(earlier, "checkpoint.json") as tmp:  # re-running into the same folder replaces it
        (tmp / "checkpoint.json").write_text('{"second": 1}')
        (tmp / "weights.pt").write_text("w")
    assert sorted(p.name for p in earlier.iterdir()) == ["checkpoint.json", "weights.pt"]

    user = tmp_path / "thesis"
    user.mkdir()
    (user / "thesis.tex").write_text("precious")
    with pytest.raises(UsageError, match="other files in it.*refusing to replace it"):
        with atomic_dir(user, "checkpoint.json"):
            pass
    assert (user / "thesis.tex").read_text() == "precious" and len(list(tmp_path.iterdir())) == 2

    (tmp_path / "empty").mkdir()
    with atomic_dir(tmp_path / "empty", "checkpoint.json") as tmp:
        (tmp / "checkpoint.json").write_text("{}")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        with atomic_dir(user / "thesis.tex", "checkpoint.json"):
            pass


def test_a_folder_output_interrupted_while_it_replaces_the_old_keeps_the_old(tmp_path, monkeypatch):
    """The old folder was deleted before the new one moved in: an interrupt there left half an old checkpoint."""
    import os

    target = tmp_path / "ck"
    with atomic_dir(target, "checkpoint.json") as tmp:
        (tmp / "checkpoint.json").write_text("old")
        (tmp / "weights").write_text("old weights")
    real_replace, calls = os.replace, []

    def interrupted_second_rename(source, destination):
        calls.append(source)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", interrupted_second_rename)
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(target, "checkpoint.json") as tmp:
            (tmp / "checkpoint.json").write_text("new")
    monkeypatch.undo()
    assert (target / "weights").read_text() == "old weights" and sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    with atomic_dir(target, "checkpoint.json") as tmp:
        (tmp / "checkpoint.json").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["checkpoint.json"] and list(tmp_path.iterdir()) == [target]


def test_failed_output_takes_back_the_folders_it_made(tmp_path):
    for target in (tmp_path / "a" / "b" / "out.run", tmp_path / "c" / "d" / "ck"):
        with pytest.raises(RuntimeError):
            with (atomic_output(target) if target.suffix else atomic_dir(target, "checkpoint.json")):
                raise RuntimeError("the stage failed")
    assert list(tmp_path.iterdir()) == []


def test_an_output_that_cannot_be_a_file_is_named(tmp_path, monkeypatch):
    """Errors named the temporary sibling (`Not a directory: .x.run.nxgavnib.tmp`), and `-o ''` met the current
    folder."""
    (tmp_path / "bm25.run").write_text("kept")
    monkeypatch.chdir(tmp_path)
    for path, words in ((tmp_path / "bm25.run" / "x.run", f"cannot write {tmp_path / 'bm25.run' / 'x.run'}: "
                         "Not a directory"), ("", "output path is empty"), (tmp_path, "is a folder")):
        with pytest.raises(UsageError, match=words):
            with atomic_output(path):
                raise AssertionError("not reached")
    # a folder output likewise (`average A B -o bm25.run/soup` said "Not a directory: .../.soup.xxxx.tmp")
    with pytest.raises(UsageError, match=f"cannot write {tmp_path / 'bm25.run' / 'soup'}: Not a directory"):
        with atomic_dir(tmp_path / "bm25.run" / "soup", "checkpoint.json"):
            raise AssertionError("not reached")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bm25.run"]


def test_an_output_named_as_a_folder_is_not_written_as_a_file(tmp_path, rerank):
    """`-o runs/` (or `--plot plots/`), a folder that does not exist yet, wrote a file named `runs`."""
    run, qrels = tmp_path / "in.run", tmp_path / "qrels"
    run.write_text("1 Q0 d1 1 2.0 t\n")
    qrels.write_text("1 0 d1 1\n")
    for args in (("cat", str(run), "-o"), ("budget", "--zero-untimed", "--qrels", str(qrels), str(run), "--plot")):
        done = rerank(*args, f"{tmp_path / 'out'}/", check=False)
        assert done.returncode == 2 and done.stderr.endswith(
            f"rerank: error: {tmp_path / 'out'}/ names a folder (it ends in /); give the output a file name\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.run", "qrels"]


def test_an_output_named_gz_is_gzip_as_its_readers_take_it(tmp_path, rerank):
    """`cat RUN -o run.gz` wrote plain text under the name, and `eval run.gz` then refused it ("cannot be read as
    gzip"): rerank could not read what it had written."""
    import gzip

    run = tmp_path / "in.run"
    run.write_text("# rerank-run: 2\n1 Q0 d1 1 2.0 t\n1 Q0 d2 2 1.0 t\n# end of run\n")
    rerank("cat", str(run), "-o", str(tmp_path / "out.run.gz"))
    assert gzip.decompress((tmp_path / "out.run.gz").read_bytes()).decode() == run.read_text()
    (tmp_path / "qrels").write_text("1 0 d2 1\n")
    assert rerank("eval", str(tmp_path / "out.run.gz"), "--qrels", str(tmp_path / "qrels"), "-m", "P@1", "--format",
                  "trec").stdout == "P@1                   \tall\t0.0000\n"


def test_outputs_get_the_permissions_a_plain_write_would(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        with atomic_output(tmp_path / "out.run") as handle:
            handle.write("1 Q0 d 1 1.0 x\n")
        with atomic_dir(tmp_path / "ck", "checkpoint.json") as tmp:
            (tmp / "checkpoint.json").write_text("{}")
            (tmp / "model.safetensors").touch(mode=0o600)  # as safetensors leaves its weights
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.run").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "ck").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "ck" / "model.safetensors").stat().st_mode) == 0o644


def test_streams_are_written_to_and_links_kept(tmp_path):
    import os
    import threading

    real, link = tmp_path / "real.run", tmp_path / "link.run"
    real.write_text("old\n")
    link.symlink_to(real)
    with atomic_output(link) as handle:
        handle.write("new\n")
    assert link.is_symlink() and real.read_text() == "new\n"

    with atomic_output(os.devnull) as handle:
        handle.write("nothing\n")
    assert not os.path.isfile(os.devnull)

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    with atomic_output(fifo) as handle:
        handle.write("through the pipe\n")
    reader.join(timeout=10)
    assert received == ["through the pipe\n"] and not fifo.is_file()


def test_a_killed_writer_s_temporary_folder_is_removed_by_the_next_write_a_live_one_s_kept(tmp_path, rerank,
                                                                                           tensor_checkpoints):
    """kill -9 (or the OOM killer) during `rerank average` or a checkpoint's save left its hidden `.soup.xxxx.tmp`
    folder beside the output for good, up to a checkpoint's size each time. The next write of that output removes
    those whose process is gone; a running writer's, and another output's, stay."""
    import signal
    import subprocess
    import sys

    import torch

    tensor_checkpoints(a=1.0, b=3.0)
    writing = """
import sys
from rerank.atomic import atomic_dir
with atomic_dir(sys.argv[1], "checkpoint.json") as tmp:
    (tmp / "weights.pt").write_bytes(bytes(1000))
    print(tmp.name, flush=True)
    sys.stdin.read()  # until the test lets go (the live writer) or kills it (the killed one)
"""

    def writer(output: str) -> tuple[subprocess.Popen, str]:
        process = subprocess.Popen([sys.executable, "-c", writing, str(tmp_path / output)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        return process, process.stdout.readline().strip()

    live, live_tmp = writer("soup")
    try:
        (killed, killed_tmp), (other, other_tmp) = writer("soup"), writer("soupy")
        for process in (killed, other):
            process.send_signal(signal.SIGKILL)
            process.wait()
        assert {killed_tmp, other_tmp, live_tmp} <= {p.name for p in tmp_path.iterdir()}  # what kill -9 leaves
        rerank("average", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "soup"))
        assert torch.load(tmp_path / "soup" / "weights.pt")["w"].tolist() == [2.0, 2.0]
        left = {p.name for p in tmp_path.iterdir()}
        assert killed_tmp not in left and {other_tmp, live_tmp} <= left
    finally:
        live.communicate("")
    assert live.returncode == 0 and sorted(p.name for p in tmp_path.iterdir()) == [other_tmp, "a", "b", "soup"]
