"""The script type's pure parts: its input's refusals, its output, progress lines, the line
reader, the script's environment, the output file's reading."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.jobs import MAX_OUTPUT_BYTES, load_registry
from app.jobs.builtin.script import MAX_SCRIPT_S, ScriptOut
from app.scripting.launch import script_environment
from app.scripting.places import OutputError, read_output, sweep_dead
from app.scripting.streams import (
    MAX_BATCH_LINES,
    MAX_LINE_BYTES,
    Streams,
    parse_progress,
    pump,
)

CODE = "ab" * 32
SCRIPT = load_registry(entry_points=False).get("script")


def parsed(**fields: object) -> object:
    assert SCRIPT is not None
    return SCRIPT.parse_input({"code": CODE, "command": ["python", "train.py"], **fields})


def test_the_type_is_registered_with_the_queues_limits_ruling() -> None:
    assert SCRIPT is not None
    assert (SCRIPT.queue, SCRIPT.preemptible) == ("short", False)
    assert SCRIPT.max_duration_s == MAX_SCRIPT_S > 7 * 86400  # above any queue's limit


def test_a_plain_input_is_read() -> None:
    inp = parsed(env={"LR": "0.1", "_X": ""})
    assert inp.env == {"LR": "0.1", "_X": ""}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "name",
    ["FAIRGPU_JOB_ID", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "PYTHONPATH", "PYTHONSTARTUP", "PATH"],
)
def test_names_the_service_sets_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match=name):
        parsed(env={name: "x"})


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "", "A=B", "É"])
def test_names_that_are_no_variable_names_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="not a variable name"):
        parsed(env={name: "x"})


@pytest.mark.parametrize(
    "fields",
    [
        {"command": []},
        {"command": [""]},
        {"command": ["python", "a\0b"]},
        {"command": ["x"] * 257},
        {"command": "python train.py"},
        {"code": "AB" * 32},
        {"code": "ab" * 31},
        {"env": {"A": 1}},
        {"env": {"A": "a\0b"}},
        {"other": 1},
    ],
)
def test_malformed_inputs_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        parsed(**fields)


def test_the_output_is_any_json_null_when_none() -> None:
    assert SCRIPT is not None
    for value, text in [(None, "null"), ({"a": [1, 2.5]}, '{"a":[1,2.5]}'), ("s", '"s"')]:
        dumped = SCRIPT.output_model.model_validate(ScriptOut(value)).model_dump_json()
        assert dumped == text


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("fairgpu:progress 0.42 some words", (0.42, "some words")),
        ("fairgpu:progress 1", (1.0, "")),
        ("  fairgpu:progress 0\tstarting  ", (0.0, "starting")),
        ("fairgpu:progress 1.5 too far", None),
        ("fairgpu:progress -0.1", None),
        ("fairgpu:progress nan", None),
        ("fairgpu:progress half way", None),
        ("fairgpu:progress", None),
        ("epoch 1 fairgpu:progress 0.5", None),
    ],
)
def test_progress_lines(line: str, expected: tuple[float, str] | None) -> None:
    assert parse_progress(line) == expected


def test_lines_are_read_whole_cut_when_too_long_and_redrawn_bars_kept_last() -> None:
    long = b"x" * (MAX_LINE_BYTES * 3) + b"\n"
    source = io.BytesIO(b"one\n" + long + b"10%\r50%\r100%\r\n\xff\xfebad\nlast without newline")
    got: list[str] = []
    pump(source, got.append)
    assert got[0] == "one"
    assert got[1].startswith("x" * MAX_LINE_BYTES) and "bytes of this line cut" in got[1]
    assert got[2:] == ["100%", "\ufffd\ufffdbad", "last without newline"]


def test_the_script_environment_is_the_allowlist() -> None:
    env = script_environment(
        job_id="j1",
        env_dir=Path("/cache/envs/k"),
        work_dir=Path("/w/work"),
        output=Path("/w/work/.fairgpu-output.json"),
        artifacts_dir=Path("/a"),
        checkpoint_dir=Path("/c"),
        gpu_ids=[3],
        preemptible=True,
        extra={"LR": "0.1"},
    )
    assert env == {
        "LR": "0.1",
        "PATH": "/cache/envs/k/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/w/work",
        "USER": "script",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "CUDA_VISIBLE_DEVICES": "3",
        "FAIRGPU_JOB_ID": "j1",
        "FAIRGPU_ARTIFACTS_DIR": "/a",
        "FAIRGPU_CHECKPOINT_DIR": "/c",
        "FAIRGPU_OUTPUT": "/w/work/.fairgpu-output.json",
        "FAIRGPU_PREEMPTIBLE": "1",
    }


def test_a_cpu_run_sees_no_device() -> None:
    env = script_environment(
        job_id="j",
        env_dir=Path("/e"),
        work_dir=Path("/w"),
        output=Path("/w/o"),
        artifacts_dir=Path("/a"),
        checkpoint_dir=Path("/c"),
        gpu_ids=[],
        preemptible=False,
        extra={},
    )
    assert (env["CUDA_VISIBLE_DEVICES"], env["FAIRGPU_PREEMPTIBLE"]) == ("", "0")


def test_a_run_of_several_cards_sees_all_of_them_in_order() -> None:
    env = script_environment(
        job_id="j",
        env_dir=Path("/e"),
        work_dir=Path("/w"),
        output=Path("/w/o"),
        artifacts_dir=Path("/a"),
        checkpoint_dir=Path("/c"),
        gpu_ids=[5, 2],
        preemptible=False,
        extra={},
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "5,2"


def test_the_output_file_is_read_as_json(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    assert read_output(path, MAX_OUTPUT_BYTES) is None
    path.write_text(json.dumps({"loss": 0.1}))
    assert read_output(path, MAX_OUTPUT_BYTES) == {"loss": 0.1}


def test_a_link_as_the_output_file_is_refused_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"key": "hunter2"}')
    (tmp_path / "out.json").symlink_to(secret)
    with pytest.raises(OutputError, match="is a link"):
        read_output(tmp_path / "out.json", MAX_OUTPUT_BYTES)


def test_an_output_file_that_is_no_json_or_too_big_or_no_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_text("not json")
    with pytest.raises(OutputError, match="not JSON"):
        read_output(path, MAX_OUTPUT_BYTES)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(OutputError, match="not JSON"):
        read_output(path, MAX_OUTPUT_BYTES)
    path.write_text(json.dumps("x" * 100))
    with pytest.raises(OutputError, match="MAX_OUTPUT_BYTES"):
        read_output(path, 50)
    path.unlink()
    os.mkfifo(path)  # a fifo is never waited on
    with pytest.raises(OutputError, match="not a regular file"):
        read_output(path, MAX_OUTPUT_BYTES)


def test_the_run_folders_of_dead_processes_are_swept(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])  # a pid that is gone once it is reaped
    dead.wait()
    for pid in (dead.pid, os.getpid()):
        (tmp_path / f"{pid}-job-1-abc" / "work").mkdir(parents=True)
    assert sweep_dead(tmp_path) == [tmp_path / f"{dead.pid}-job-1-abc"]
    assert [p.name for p in tmp_path.iterdir()] == [f"{os.getpid()}-job-1-abc"]


def test_streams_pass_lines_on_in_batches_and_the_latest_progress() -> None:
    stdout = io.BytesIO(b"a\nfairgpu:progress 0.1 x\nb\nfairgpu:progress 0.2 y\n")
    stderr = io.BytesIO(b"oops\n")
    logged: list[str] = []
    progress: list[tuple[float, str]] = []
    streams = Streams(stdout, stderr, logged.append, lambda f, m: progress.append((f, m)))
    assert streams.join(10)
    assert sorted("\n".join(logged).split("\n")) == ["a", "b", "oops"]
    assert progress == [(0.2, "y")]


def test_a_long_burst_is_passed_on_before_the_next_flush() -> None:
    stdout = io.BytesIO(b"".join(b"%d\n" % i for i in range(MAX_BATCH_LINES * 2 + 5)))
    logged: list[str] = []
    streams = Streams(stdout, io.BytesIO(), logged.append, lambda f, m: None)
    assert streams.join(10)
    assert [len(batch.split("\n")) for batch in logged] == [MAX_BATCH_LINES, MAX_BATCH_LINES, 5]
