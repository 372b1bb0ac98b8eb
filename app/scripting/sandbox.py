"""The sandbox of one script run: bubblewrap's command line, built from plain arguments.

What it promises and what it does not is written down in docs/security.md ("Script jobs'
sandbox"). In short: a read-only minimal system (/usr, the few /etc entries an interpreter and TLS
need, the environment and the interpreter's own folder), the run's working, artifacts and
checkpoint folders its only writable places, a bounded /tmp and /dev/shm, every namespace of its
own (no network unless asked, and then a filtered one: app/scripting/network.py), the GPU's
device files only, an unprivileged host uid, and rlimits on processes, memory and file size.

The environment is handed to bubblewrap itself as its whole environment (never `--setenv`): the
sandbox's PID 1 is bubblewrap, whose /proc/1/environ a script can read, and arguments would show
the values to everyone on the host in `ps`.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from app.scripting import network as net

#: Paths the sandbox never binds, nor anything inside them; `/` itself is never bound whole.
FORBIDDEN = (Path("/home"), Path("/root"), Path("/run"))
#: The /etc entries every run gets (those missing on the host are skipped): the dynamic linker's
#: cache, TLS roots (Debian's and Red Hat's layouts), the time zone, Debian's alternatives (many
#: /usr/bin commands link through them). No passwd or group: the caller passes USER and HOME.
ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/localtime",
    "/etc/alternatives",
)
#: Added when the run has network: name resolution.
ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf")
#: An NVIDIA card's shared device files, beside its own /dev/nvidia<N>.
NVIDIA_SHARED = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
#: The run's own memory-backed folders, bounded by Limits.tmp_bytes (the host's are never bound).
OWN_TMP = ("/tmp", "/dev/shm")  # noqa: S108 (paths inside the sandbox, each a fresh tmpfs)
#: How long the check of `available` may take: bubblewrap starts in milliseconds.
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class User:
    """The host uid and gid a run has; never root."""

    uid: int
    gid: int


#: Debian's unprivileged user, the default. Runs under one uid share its RLIMIT_NPROC count.
NOBODY = User(65534, 65534)


@dataclass(frozen=True)
class Limits:
    """Bounds of one run; None leaves that one unbounded."""

    #: RLIMIT_NPROC: counted per host uid, so over every run under the same User.
    processes: int | None = 512
    #: RLIMIT_DATA (not RLIMIT_AS: CUDA reserves far more address space than it uses).
    memory_bytes: int | None = None
    #: RLIMIT_FSIZE: the largest file the run may write, not its total on disk.
    file_bytes: int | None = 50 * 2**30
    #: Each of /tmp and /dev/shm: memory-backed, counted outside RLIMIT_DATA.
    tmp_bytes: int = 2**30


@dataclass(frozen=True)
class Sandbox:
    """One run: its command, its environment (the whole of it) and its folders.

    Every folder is bound at its own path (a virtual environment holds absolute paths). Each must
    be reachable by `user` on the host: bubblewrap opens them as that user.
    """

    command: Sequence[str]
    environment: Mapping[str, str]
    env_dir: Path
    work_dir: Path
    artifacts_dir: Path
    checkpoint_dir: Path
    #: Further read-only folders: the interpreter's installation, a base environment.
    readonly: Sequence[Path] = ()
    #: Paths inside a bound folder that the run must not see (the service's own files under
    #: /usr, say): an empty read-only folder, or an empty file, is laid over each.
    hidden: Sequence[Path] = ()
    #: The GPU indices whose device files the run gets.
    gpus: Sequence[int] = ()
    #: A network, filtered (app/scripting/network.py): never the host's loopback nor `blocked`.
    network: bool = False
    #: The networks a networked run may never reach (a blackhole route each).
    blocked: Sequence[net.Network] = ()
    #: Where the host's resolver is on its loopback: pasta's DNS forward address, and the
    #: resolv.conf naming it that the run gets in place of the host's.
    dns_forward: tuple[str, Path] | None = None
    #: A build's allowlist: only its addresses routed, its names pinned, no resolver.
    build: net.BuildNetwork | None = None
    limits: Limits = field(default_factory=Limits)
    user: User = NOBODY

    def writable(self) -> tuple[Path, ...]:
        """The run's only writable folders."""
        return (self.work_dir, self.artifacts_dir, self.checkpoint_dir)

    def argv(self) -> list[str]:
        """The whole command line: the drop to `user` when root, the limits, then bubblewrap
        (only the drop's `setpriv` runs as root with the run's environment)."""
        for path in (self.env_dir, *self.readonly, *self.writable()):
            _check_bindable(path)
        if self.user.uid == 0:
            raise ValueError("a script never runs as root")
        if any(name.startswith("LD_") for name in self.environment):
            # The environment is that of the tools that start the sandbox too, root's included.
            raise ValueError("LD_ names are refused in a sandbox's environment")
        forward = self.dns_forward[0] if self.dns_forward and not self.build else None
        filtered = net.pasta_prefix(self.blocked, forward, self.build) if self.network else []
        return [*self._drop(), *self._limits(), *filtered, _tool("bwrap"), *self._bwrap_options()]

    def _limits(self) -> list[str]:
        limits = self.limits
        options = [
            f"--{name}={value}"
            for name, value in (
                ("nproc", limits.processes),
                ("data", limits.memory_bytes),
                ("fsize", limits.file_bytes),
            )
            if value is not None
        ]
        return [_tool("prlimit"), *options, "--"] if options else []

    def _drop(self) -> list[str]:
        return drop(self.user)

    def _bwrap_options(self) -> list[str]:
        options = ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        options += ["--share-net"] if self.network else []
        options += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        options += _system(self.network)
        if self.network and self.build:  # names resolve from the pinned hosts file only
            options += ["--ro-bind", str(self.build.hosts_file), "/etc/hosts"]
            resolv = self.build.hosts_file.with_name("resolv.conf")
            options += ["--ro-bind", str(resolv), "/etc/resolv.conf"]
        elif self.network and self.dns_forward:
            options += ["--ro-bind", str(self.dns_forward[1]), "/etc/resolv.conf"]
        options += ["--proc", "/proc", "--dev", "/dev", *_gpu_binds(self.gpus)]
        size = ["--size", str(self.limits.tmp_bytes)] if _supports_size() else []
        options += [*size, "--tmpfs", OWN_TMP[0], *size, "--tmpfs", OWN_TMP[1]]
        for path in (self.env_dir, *self.readonly):
            options += ["--ro-bind", str(path), str(path)]
        for path in self.writable():
            options += ["--bind", str(path), str(path)]
        for path in self.hidden:
            options += _hide(path)
        options += ["--remount-ro", "/", "--chdir", str(self.work_dir), "--", *self.command]
        return options

    def start(self, stdout: IO[bytes] | int, stderr: IO[bytes] | int) -> subprocess.Popen[bytes]:
        """Start the run, in a session of its own on the host (its process group is signalled
        as one)."""
        return subprocess.Popen(
            self.argv(),
            env=dict(self.environment),
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )

    def hand_over(self) -> None:
        """Give the writable folders to `user` (when the worker is root), so that the run may
        write there and nowhere else; links are changed, never followed."""
        if os.geteuid() != 0:
            return
        for top in self.writable():
            os.lchown(top, self.user.uid, self.user.gid)
            os.chmod(top, 0o700)
            for root, dirs, files in os.walk(top):
                for name in (*dirs, *files):
                    os.lchown(os.path.join(root, name), self.user.uid, self.user.gid)


def drop(user: User) -> list[str]:
    """setpriv to `user` when root (nothing otherwise: the run gets the worker's own uid). It
    also asks for SIGKILL when the worker dies: bubblewrap's --die-with-parent watches pasta,
    when a filtered network puts it between the worker and bubblewrap."""
    death = ["--pdeathsig", "KILL"]
    if os.geteuid() != 0:
        return [_tool("setpriv"), *death, "--"]
    uid, gid = str(user.uid), str(user.gid)
    return [_tool("setpriv"), "--reuid", uid, "--regid", gid, "--clear-groups", *death, "--"]


def _check_bindable(path: Path) -> None:
    if not path.is_absolute():
        raise ValueError(f"{path}: the sandbox binds absolute paths only")
    if path == Path("/") or any(path == f or f in path.parents for f in FORBIDDEN):
        raise ValueError(f"{path}: never bound into the sandbox (/, /home, /root, /run)")


def _system(network: bool) -> list[str]:
    """/usr read-only, the merged-/usr links (or the folders where /usr is not merged), /etc's
    few entries."""
    options = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64"):
        top = Path("/", name)
        if top.is_symlink():
            options += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            options += ["--ro-bind", str(top), str(top)]
    for entry in ETC + (ETC_NETWORK if network else ()):
        options += ["--ro-bind-try", entry, entry]
    return options


def gpu_devices(gpus: Sequence[int]) -> list[str]:
    """The device files of these NVIDIA cards that exist on this host, with the shared ones."""
    if not gpus:
        return []
    paths = [f"/dev/nvidia{index}" for index in gpus] + list(NVIDIA_SHARED)
    return [path for path in paths if os.path.exists(path)]


def _gpu_binds(gpus: Sequence[int]) -> list[str]:
    return [option for path in gpu_devices(gpus) for option in ("--dev-bind", path, path)]


def _hide(path: Path) -> list[str]:
    if path.is_dir():
        return ["--tmpfs", str(path), "--remount-ro", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


def _tool(name: str) -> str:
    """The absolute path of a tool the sandbox runs through (the run's PATH is the script's)."""
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed: script jobs need it")
    return found


@functools.cache
def _supports_size() -> bool:
    """Whether this bubblewrap bounds a tmpfs (`--size`, bubblewrap 0.5 and later)."""
    try:
        help_text = subprocess.run(
            [_tool("bwrap"), "--help"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in help_text


def available(user: User = NOBODY) -> str | None:
    """None when a sandbox can run here as `user`; otherwise why not, in words."""
    for name in ("bwrap", "prlimit", "setpriv"):
        if shutil.which(name) is None:
            return f"{name} is not installed"
    if not _supports_size():
        return "this bubblewrap cannot bound the sandbox's /tmp (--size needs bubblewrap 0.5+)"
    probe = Sandbox(
        command=["/bin/sh", "-c", "exit 0"],
        environment={},
        # Folders any user may reach: the probe writes nothing, and /usr is read-only to it.
        env_dir=Path("/usr"),
        work_dir=Path("/usr"),
        artifacts_dir=Path("/usr"),
        checkpoint_dir=Path("/usr"),
        user=user,
    )
    try:
        done = subprocess.run(
            probe.argv(), env={}, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"bubblewrap did not start: {error}"
    if done.returncode != 0:
        reason = done.stderr.strip() or f"exit code {done.returncode}"
        return f"bubblewrap cannot make its namespaces here (user namespaces refused?): {reason}"
    return None


def network_available(user: User = NOBODY) -> str | None:
    """None when a filtered network (app/scripting/network.py) can be made here for `user`;
    otherwise why not, in words. Builds need one, whatever SCRIPT_NETWORK says."""
    try:
        return net.available(drop(user))
    except FileNotFoundError as error:
        return str(error)


def members(pid: int) -> list[int]:
    """Host pids of every process in the PID namespace of the sandbox started as `pid` (its
    bubblewrap): the script's whole tree, whatever sessions it made, to signal on a stop."""
    namespace = _child_namespace(pid)
    if namespace is None:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _namespace(int(entry.name)) == namespace:
            found.append(int(entry.name))
    return found


def signal_all(pid: int, signum: int) -> int:
    """Send `signum` to every process in the sandbox started as `pid`: a stop's SIGTERM reaches
    the script's whole tree (bubblewrap passes no signal on). How many it was sent to. A
    process forked meanwhile may miss it; a stop's SIGKILL goes to bubblewrap itself, whose
    death ends the whole namespace."""
    sent = 0
    for member in members(pid):
        try:
            os.kill(member, signum)
        except ProcessLookupError:  # ended meanwhile
            continue
        sent += 1
    return sent


def _child_namespace(pid: int) -> str | None:
    """The sandbox's PID namespace: that of the first child of a bubblewrap below `pid` (`pid`
    itself, or pasta's child when networked) in a namespace other than its parent's. pasta puts
    its child in a PID namespace of its own, never the one to signal."""
    below = [pid]
    while below:
        parent = below.pop(0)
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
            bwrap = Path(f"/proc/{parent}/comm").read_text().strip() == "bwrap"
        except OSError:
            continue
        own = _namespace(parent)
        for child in children:
            namespace = _namespace(int(child))
            if bwrap and namespace is not None and namespace != own:
                return namespace
            below.append(int(child))
    return None


def _namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
