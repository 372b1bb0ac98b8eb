"""Starting a script, signalling its whole tree, and learning how it ended.

The script's environment is an allowlist (`script_environment`): nothing of the worker's own
variables reaches it. In the sandbox the script is started by a small shim run with the
environment's own interpreter: bubblewrap reports a death by signal N as the exit code 128 + N,
as a shell does, so the shim waits for the script and writes its status, as Python's subprocess
reports it (negative: the signal), to a pipe only it holds. A stop's SIGTERM reaches the shim
too, which ignores it and goes on waiting.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from app.scripting import sandbox
from app.scripting.sandbox import Sandbox

#: The shim: started as `python -I -S -c SHIM STATUS_FD COMMAND...`, the pipe's fd inherited
#: through setpriv, prlimit and bubblewrap, which close no descriptor they were given. Its SIGTERM
#: handler does nothing (a handler, not SIG_IGN: the script must get SIGTERM's default action,
#: and exec resets handlers).
SHIM = """import os, signal, subprocess, sys
signal.signal(signal.SIGTERM, lambda *_: None)
status, command = int(sys.argv[1]), sys.argv[2:]
try:
    child = subprocess.Popen(command, close_fds=True)
except OSError as error:
    print(f"{command[0]}: {error.strerror}", file=sys.stderr)
    code = 126 if isinstance(error, PermissionError) else 127
else:
    code = child.wait()
os.write(status, str(code).encode())
"""
#: Processes of the sandbox's own in its PID namespace: bubblewrap's init and the shim.
SANDBOX_OWN_PROCESSES = 2
#: The user name a script is told (its uid has none inside the sandbox).
SCRIPT_USER = "script"
#: The last resort of PATH, after the environment's own bin.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def script_environment(
    *,
    job_id: str,
    env_dir: Path,
    work_dir: Path,
    output: Path,
    artifacts_dir: Path,
    checkpoint_dir: Path,
    gpu_ids: Sequence[int],
    preemptible: bool,
    extra: Mapping[str, str],
) -> dict[str, str]:
    """The script's whole environment: the input's variables (their names already checked), then
    the service's, which win."""
    return {
        **extra,
        "PATH": f"{env_dir / 'bin'}:{SYSTEM_PATH}",
        "HOME": str(work_dir),
        # The sandbox has no /etc/passwd: getpass.getuser() (torch's caches ask it) reads USER.
        "USER": SCRIPT_USER,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",  # noqa: S108 (the sandbox's own /tmp)
        # every card of its run, in order (a job of several cards: torchrun's ranks find them)
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_ids),
        "FAIRGPU_JOB_ID": job_id,
        "FAIRGPU_ARTIFACTS_DIR": str(artifacts_dir),
        "FAIRGPU_CHECKPOINT_DIR": str(checkpoint_dir),
        "FAIRGPU_OUTPUT": str(output),
        "FAIRGPU_PREEMPTIBLE": "1" if preemptible else "0",
    }


@dataclass
class Launched:
    """A started script: its process (bubblewrap, or the script itself when unconfined)."""

    process: subprocess.Popen[bytes]
    sandboxed: bool
    status: int | None = None  # the read end of the shim's status pipe

    def terminate(self) -> bool:
        """SIGTERM to every process of the script; False when the script could not be found
        yet (the sandbox is still starting: ask again)."""
        if not self.sandboxed:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                return True  # ended meanwhile
            return True
        # Until the script itself is there (beside bubblewrap's init and the shim), ask again.
        return sandbox.signal_all(self.process.pid, signal.SIGTERM) > SANDBOX_OWN_PROCESSES

    def exit_code(self, returncode: int) -> int | None:
        """The script's exit code, as Python's subprocess reports it (negative: the signal that
        ended it); None when the shim said nothing (the sandbox failed to start it, or the
        script killed the shim): bubblewrap's own code then tells nothing of the script."""
        if not self.sandboxed:
            return returncode
        if self.status is None:
            return None
        try:
            said = os.read(self.status, 64).decode(errors="replace").strip()
        except OSError:  # nothing there, and (impossibly) a writer left: never wait
            said = ""
        finally:
            os.close(self.status)
            self.status = None
        try:
            return int(said)
        except ValueError:
            return None

    def close(self) -> None:
        """Release the pipes, and end what an unconfined script left in its group."""
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        if self.status is not None:
            os.close(self.status)
            self.status = None
        if not self.sandboxed:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)


def start_sandboxed(box: Sandbox, python: Path) -> Launched:
    """Start `box`'s command through the shim, with the shim's status pipe."""
    read_end, write_end = os.pipe()
    try:
        shimmed = [str(python), "-I", "-S", "-c", SHIM, str(write_end), *box.command]
        argv = _with_command(box, shimmed).argv()
        process = _popen(argv, box.environment, "/", write_end)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    os.set_blocking(read_end, False)
    return Launched(process, sandboxed=True, status=read_end)


def start_unconfined(
    command: Sequence[str], environment: Mapping[str, str], work_dir: Path
) -> Launched:
    """Start the command as the worker's own user, in its working folder (SCRIPT_SANDBOX=none)."""
    return Launched(_popen(list(command), environment, str(work_dir), None), sandboxed=False)


def _popen(
    argv: list[str], environment: Mapping[str, str], cwd: str, status_fd: int | None
) -> subprocess.Popen[bytes]:
    """A session of its own (its group is signalled as one), stdin empty, the status pipe
    passed on when given."""
    return subprocess.Popen(
        argv,
        env=dict(environment),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        pass_fds=() if status_fd is None else (status_fd,),
    )


def _with_command(box: Sandbox, command: list[str]) -> Sandbox:
    return replace(box, command=command)
