"""How the worker reads a job's output files as lines (app/worker/live.py): partial lines wait
for their end, \\r\\n split across reads is one break, a long line is cut, and the last lines are
kept for a crash's error."""

from __future__ import annotations

from pathlib import Path

from app.worker.live import MAX_LINE_BYTES, RECENT_LINES, LogLine, OutputTail, clip, lines_of


def texts(lines: list[LogLine]) -> list[str]:
    return [line.text for line in lines]


def test_lines_wait_for_their_end_and_the_last_comes_at_the_drain(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_bytes(b"")
    tail = OutputTail([("stdout", out, 0)])
    with out.open("ab") as file:
        file.write(b"one\ntw")
        file.flush()
        assert tail.read(1.0) == [LogLine(1.0, "stdout", "one")]
        file.write(b"o\r")
        file.flush()
        assert tail.read(2.0) == []  # the \r may be half of a \r\n
        file.write(b"\nthree\rfour")
        file.flush()
        assert texts(tail.read(3.0)) == ["two", "three"]
    assert [texts(batch) for batch in tail.drain(4.0)] == [["four"]]
    tail.close()


def test_reading_starts_at_the_offset_and_keeps_the_streams_apart(tmp_path: Path) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    out.write_bytes(b"an earlier job's\nmine\n")
    err.write_bytes(b"oops\n")
    tail = OutputTail([("stdout", out, len(b"an earlier job's\n")), ("stderr", err, 0)])
    assert tail.read(1.0) == [LogLine(1.0, "stdout", "mine"), LogLine(1.0, "stderr", "oops")]
    tail.close()


def test_a_long_line_is_cut_and_the_rest_skipped(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_bytes(b"")
    tail = OutputTail([("stdout", out, 0)])
    with out.open("ab") as file:
        file.write(b"x" * (MAX_LINE_BYTES + 10))  # no end yet: cut now, the rest is skipped
        file.flush()
        assert texts(tail.read(1.0)) == ["x" * MAX_LINE_BYTES]
        file.write(b"y" * 100 + b"\nnext\n")
        file.flush()
        assert texts(tail.read(2.0)) == ["next"]
        file.write(b"z" * (MAX_LINE_BYTES + 1) + b"\n")  # a whole long line at once
        file.flush()
        assert texts(tail.read(3.0)) == ["z" * MAX_LINE_BYTES]
    tail.close()


def test_the_last_lines_of_both_streams_are_kept(tmp_path: Path) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    out.write_text("".join(f"out {n}\n" for n in range(30)))
    err.write_text("Fatal Python error: Segmentation fault")
    tail = OutputTail([("stdout", out, 0), ("stderr", err, 0)])
    for _ in tail.drain(1.0):
        pass
    expected = [f"out {n}" for n in range(30 - RECENT_LINES + 1, 30)]
    assert list(tail.recent) == [*expected, "Fatal Python error: Segmentation fault"]
    tail.close()


def test_a_missing_file_has_no_lines(tmp_path: Path) -> None:
    tail = OutputTail([("stderr", tmp_path / "none", 0)])
    assert tail.read(1.0) == []
    assert [batch for batch in tail.drain(1.0) if batch] == []
    tail.close()


def test_logged_text_is_one_line_per_line_cut_to_4_kib() -> None:
    assert texts(lines_of("log", "a\nb\r\nc\n", 1.0)) == ["a", "b", "c"]
    assert texts(lines_of("log", "", 1.0)) == [""]
    assert clip("é" * 3000) == "é" * (MAX_LINE_BYTES // 2)  # two bytes each, never half of one
    assert clip("short") == "short"
