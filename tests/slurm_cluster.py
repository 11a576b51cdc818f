"""A real two-node Slurm cluster on this one host, for tests of `triage hang --slurm-job`.

Both node names (trnode-a, trnode-b) are slurmd processes on this host with their own
ports, so a job really spans two Slurm nodes without a second machine. The recipe and its
traps are in shared/design/facts.md, "Slurm on one host". Load the fixture with
`pytest_plugins = ["tests.slurm_cluster"]`. It needs root: slurmd runs jobs as root and
munged must run as the munge user. Missing packages are installed with apt-get.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from tests.polling import poll_until
from triage.scenarios.harness import die_with_parent_process

NODES = ("trnode-a", "trnode-b")
CPUS_PER_NODE = 2
START_DEADLINE_S = 30.0
STOP_GRACE_S = 10.0
_SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
_MUNGE_KEY = Path("/etc/munge/munge.key")
T = TypeVar("T")


@dataclass
class _Daemons:
    """What the fixture started, kept apart from SlurmCluster so that the finalizer that
    stops them does not keep the cluster object alive."""

    root: Path
    env: dict[str, str]
    slurm: list[subprocess.Popen[bytes]] = field(default_factory=list)
    munged: subprocess.Popen[bytes] | None = None
    munged_before: set[int] = field(default_factory=set)


@dataclass
class SlurmCluster:
    """The running cluster: its slurm.conf, the client environment that points at it, and
    the few job operations tests need."""

    root: Path
    conf: Path
    env: dict[str, str]
    nodes: tuple[str, str] = NODES

    def run(self, *args: str, timeout: float = 30.0) -> str:
        """A Slurm client command's stdout; its stderr in the error when it fails."""
        done = subprocess.run(
            args, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def sbatch(self, script_text: str, nodes: int = 2, ntasks_per_node: int = 2) -> int:
        """Submit a batch script; its output goes to `job_output(job_id)`."""
        script = self.root / f"job-{time.monotonic_ns()}.sh"
        script.write_text(script_text)
        out = self.run(
            "sbatch",
            "--parsable",
            f"--nodes={nodes}",
            f"--ntasks-per-node={ntasks_per_node}",
            f"--chdir={self.root}",
            f"--output={self.root}/job-%j.out",
            str(script),
        )
        return int(out.strip().split(";")[0])

    def wait_for(self, check: Callable[[], T | None], timeout: float, what: str) -> T:
        """`poll_until`, for test modules that load this one only through `pytest_plugins`
        (importing it themselves would keep pytest from rewriting it, with a warning)."""
        return poll_until(check, timeout, what)

    def job_output(self, job_id: int) -> Path:
        return self.root / f"job-{job_id}.out"

    def job_state(self, job_id: int) -> str:
        """The job's state as squeue names it, or "" once it has left the queue."""
        return self.run("squeue", "-h", "-j", str(job_id), "-o", "%T").strip()

    def wait_running(self, job_id: int, timeout: float = 30.0) -> None:
        """Block until the job runs; fail early, with its output, if it ends first."""

        def running() -> bool | None:
            state = self.job_state(job_id)
            if state == "RUNNING":
                return True
            if state in ("PENDING", "CONFIGURING"):
                return None
            output = self.job_output(job_id)
            tail = output.read_text()[-2000:] if output.exists() else ""
            raise RuntimeError(f"job {job_id} is {state or 'gone'} instead of running: {tail}")

        poll_until(running, timeout, f"running job {job_id}")

    def cancel(self, job_id: int, timeout: float = 30.0) -> None:
        """scancel, then wait until the job has left the queue."""
        self.run("scancel", str(job_id))
        poll_until(lambda: True if not self.job_state(job_id) else None, timeout, "job exit")


def _which(name: str) -> str | None:
    return shutil.which(name, path=_SBIN_PATH)


def _install() -> None:
    """Install Debian's slurm-wlm and munge when a daemon is missing, or skip the tests."""
    if all(_which(d) for d in ("slurmctld", "slurmd", "munged")):
        return
    if not shutil.which("apt-get"):
        pytest.skip("Slurm and munge are not installed, and there is no apt-get to install them")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "slurm-wlm", "munge"]
    done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # stale or missing package lists: refresh once
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"apt-get install slurm-wlm munge failed: {done.stderr[-2000:]}")


def _free_ports(count: int) -> list[int]:
    """Ports free now; bound together so that they are distinct."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _write_conf(root: Path, host: str) -> Path:
    ctld_port, *node_ports = _free_ports(1 + len(NODES))
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir()
    lines = [
        "ClusterName=triage",
        f"SlurmctldHost={host}",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "MpiDefault=none",
        "MailProg=/bin/true",  # Debian ships no /bin/mail: slurmctld logs an error without it
        "ReturnToService=2",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        f"StateSaveLocation={root}/state",
        # %n: each slurmd keeps its own spool, pid file and log
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
        *(
            f"NodeName={node} NodeHostname={host} Port={port} CPUs={CPUS_PER_NODE} State=UNKNOWN"
            for node, port in zip(NODES, node_ports, strict=True)
        ),
        f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
    ]
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _munged_pids() -> set[int]:
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "munged"}


def _start_munged(daemons: _Daemons, log_dir: Path) -> None:
    """Start munged as the munge user unless one runs, making its key and run dir if absent."""
    if _munged_pids():
        return
    munge = pwd.getpwnam("munge")
    for directory in (_MUNGE_KEY.parent, Path("/run/munge"), Path("/var/lib/munge")):
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, munge.pw_uid, munge.pw_gid)
    if not _MUNGE_KEY.exists():
        _MUNGE_KEY.write_bytes(os.urandom(1024))
        os.chown(_MUNGE_KEY, munge.pw_uid, munge.pw_gid)
        _MUNGE_KEY.chmod(0o400)
    with (log_dir / "munged.out").open("wb") as out:
        daemons.munged = subprocess.Popen(
            [str(_which("munged")), "--foreground"],
            user=munge.pw_uid,
            group=munge.pw_gid,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent_process,
        )

    def answers() -> bool | None:
        if daemons.munged is not None and daemons.munged.poll() is not None:
            raise RuntimeError(f"munged exited: {_tail(log_dir / 'munged.out')}")
        ok = subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode == 0
        return True if ok else None

    poll_until(answers, START_DEADLINE_S, "munged answering")


def _start_slurm(daemons: _Daemons, conf: Path, log_dir: Path) -> None:
    commands = {
        "slurmctld": [str(_which("slurmctld")), "-D", "-f", str(conf)],
        **{f"slurmd-{n}": [str(_which("slurmd")), "-D", "-f", str(conf), "-N", n] for n in NODES},
    }
    for name, command in commands.items():
        with (log_dir / f"{name}.out").open("wb") as out:
            daemons.slurm.append(
                subprocess.Popen(
                    command,
                    env=daemons.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent_process,
                )
            )


def _tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no file)"
    return "\n".join(text.splitlines()[-lines:])


def _wait_idle(cluster: SlurmCluster, daemons: _Daemons) -> None:
    """Wait until sinfo calls both nodes idle; on failure, say which daemon said why."""

    def idle() -> bool | None:
        if any(p.poll() is not None for p in daemons.slurm):
            raise RuntimeError("a daemon exited")
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            rows = cluster.run("sinfo", "-h", "-N", "-o", "%N %T", timeout=5).splitlines()
            if sorted(rows) == [f"{node} idle" for node in NODES]:
                return True
        return None

    try:
        poll_until(idle, START_DEADLINE_S, "idle nodes")
    except (RuntimeError, TimeoutError) as failed:
        exits = [p.poll() for p in daemons.slurm]
        logs = sorted((cluster.root / "log").iterdir())
        detail = "\n".join(f"--- {log.name}\n{_tail(log)}" for log in logs)
        raise RuntimeError(
            f"the Slurm nodes did not come up: {failed} (exit codes {exits})\n{detail}"
        ) from None


def _stray_processes(daemons: _Daemons) -> list[psutil.Process]:
    """This cluster's job steps and ranks, left when a daemon died first. slurmd re-parents
    its slurmstepds to init and they wipe their environment, so they are found by the log
    they hold open in the cluster's dir; ranks by the SLURM_CONF their job passed down."""
    conf = daemons.env["SLURM_CONF"]
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid == os.getpid():
                continue
            if proc.environ().get("SLURM_CONF") == conf or any(
                Path(f.path).is_relative_to(daemons.root) for f in proc.open_files()
            ):
                found.append(proc)
    return found


def _processes(pids: Iterable[int]) -> list[psutil.Process]:
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found.append(psutil.Process(pid))
    return found


def _terminate(procs: list[psutil.Process]) -> None:
    """SIGTERM, then SIGKILL whatever is left at the deadline."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=STOP_GRACE_S)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=STOP_GRACE_S)


def _stop(daemons: _Daemons) -> None:
    """Cancel the jobs and wait for them to go, stop every daemon this fixture started and
    whatever they left, and reap them. Runs once: from the fixture or, failing that, at exit."""
    if daemons.slurm and daemons.slurm[0].poll() is None:
        with contextlib.suppress(subprocess.SubprocessError, OSError, RuntimeError, TimeoutError):
            client = SlurmCluster(daemons.root, Path(daemons.env["SLURM_CONF"]), daemons.env)
            client.run("scancel", "--user=root")
            poll_until(
                lambda: True if not client.run("squeue", "-h").strip() else None,
                STOP_GRACE_S,
                "empty queue",
            )
    _terminate(_processes(p.pid for p in daemons.slurm if p.poll() is None))
    _terminate(_stray_processes(daemons))
    _terminate(_processes(_munged_pids() - daemons.munged_before))
    for popen in [*daemons.slurm, *([daemons.munged] if daemons.munged else [])]:
        popen.wait()  # reap: the processes are dead by now


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """Start munged (unless running), slurmctld and one slurmd per node name; stop them after
    the session, leaving munged running only if it ran before."""
    if os.geteuid() != 0:
        pytest.skip("a Slurm cluster on this host needs root (SlurmUser=root, munge user)")
    munged_before = _munged_pids()
    _install()
    root = tmp_path_factory.mktemp("slurm")
    conf = _write_conf(root, socket.gethostname().split(".")[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf)  # also marks the daemons' and jobs' processes as ours
    cluster = SlurmCluster(root=root, conf=conf, env=env)
    daemons = _Daemons(root=root, env=env, munged_before=munged_before)
    stop = weakref.finalize(cluster, _stop, daemons)
    try:
        _start_munged(daemons, root / "log")
        _start_slurm(daemons, conf, root / "log")
        _wait_idle(cluster, daemons)
        yield cluster
    finally:
        stop()
