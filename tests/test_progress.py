"""Progress bars: drawn on a terminal, quiet otherwise (a fake terminal stands in for one)."""

import io

from dgvm.client.progress import Progress, batches, track


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_not_on_a_terminal_prints_only_the_summary():
    out = io.StringIO()
    with Progress(10, "fill", stream=out) as bar:
        for _ in range(10):
            bar.update()
    assert out.getvalue().startswith("fill: done in ") and out.getvalue().count("\n") == 1
    assert "\r" not in out.getvalue() and "#" not in out.getvalue()


def test_not_on_a_terminal_and_no_summary_prints_nothing():
    out = io.StringIO()
    with Progress(10, "copy", stream=out, summary=False) as bar:
        bar.update(10)
    assert out.getvalue() == ""
    assert list(track(range(5), "reps", stream=out)) == [0, 1, 2, 3, 4]
    assert out.getvalue() == ""


def test_on_a_terminal_draws_a_bar_then_the_summary():
    out = FakeTerminal()
    with Progress(4, "fill", stream=out, width=8) as bar:
        for _ in range(4):
            bar.update()
    text = out.getvalue()
    assert text.startswith("\rfill ")
    assert "[########] 100.0%" in text  # the last update is always drawn
    assert text.splitlines()[-1].startswith("fill: done in ")


def test_redraws_at_most_once_an_interval():
    out = FakeTerminal()
    with Progress(1000, "many", stream=out, summary=False, interval=60) as bar:
        for _ in range(1000):
            bar.update()
    assert out.getvalue().count("\r") == 2  # the first update and the last


def test_transient_bar_erases_itself():
    out = FakeTerminal()
    for _ in track(range(3), "reps", stream=out, transient=True):
        pass
    text = out.getvalue()
    assert "reps" in text and "\n" not in text
    assert text.endswith("\r") and text.split("\r")[-2].strip() == ""


def test_an_error_ends_the_bar_line_without_a_summary():
    out = FakeTerminal()
    try:
        with Progress(3, "check", stream=out) as bar:
            bar.update()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue().endswith("\n") and "done in" not in out.getvalue()


def test_batches_split_large_transfers_on_a_terminal_only():
    items = list(range(100))
    big = 2**30
    assert list(batches(items, "write", nbytes=big, stream=io.StringIO())) == [items]
    out = FakeTerminal()
    assert list(batches(items, "write", nbytes=2**20, stream=out)) == [items]  # small: at once
    assert out.getvalue() == ""
    got = list(batches(items, "write", nbytes=big, n=10, stream=out))
    assert len(got) == 10 and [i for b in got for i in b] == items
    assert "write" in out.getvalue() and "\n" not in out.getvalue()
    assert list(batches([], "write", nbytes=big, stream=out)) == []


def test_large_buffer_write_and_read_show_a_bar_on_a_terminal(case, monkeypatch):
    import sys

    import numpy as np

    import dgvm
    from dgvm.client import progress

    monkeypatch.setattr(progress, "BATCH_MIN_BYTES", 2**20)
    data = np.random.default_rng(0).integers(0, 256, 6 * 2**20, dtype=np.uint8)
    with dgvm.malloc(data.size, chunk_bytes=2**19) as buf:
        monkeypatch.setattr(sys, "stdout", FakeTerminal())
        buf.write(0, data)
        got = buf.read(0, data.size)
        shown = sys.stdout.getvalue()
        monkeypatch.undo()
    assert np.array_equal(got, data)
    assert "write" in shown and "read" in shown and "100.0%" in shown
