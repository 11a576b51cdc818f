"""torchrun / torchelastic: which worker failed, how, and which failure came first."""

from __future__ import annotations

import re
import signal
from typing import Any

from triage.readers.signatures import first_of, signature


def signal_name(number: int | str) -> str:
    """`SIGSEGV` for 11 (Linux's numbering, as the launchers print it); `signal N` else."""
    try:
        return signal.Signals(int(number)).name
    except ValueError:
        return f"signal {number}"


def _exit(found: re.Match[str]) -> dict[str, Any]:
    code = int(found["exitcode"])
    out: dict[str, Any] = {"exitcode": code}
    if code < 0:
        out["signal"] = signal_name(-code)
    for key in ("local_rank", "pid", "rank"):
        if found.groupdict().get(key):
            out[key] = int(found[key])
    if "first" in found.groupdict():
        out["first"] = found["first"] is not None
    host = re.search(r"\bhost\s*:\s*(\S+)", found.string)
    if host:
        out["host"] = host.group(1)
    return out


signature(
    "elastic.worker_failed",
    # the rank and pid after the exit code are lost in some pastes (`local_rankroot/...`)
    r"failed \(exitcode: (?P<exitcode>-?\d+)\)"
    r"(?: local_rank: (?P<local_rank>\d+) \(pid: (?P<pid>\d+)\)(?: of binary: (?P<binary>\S+))?)?",
    anchors="failed (exitcode:",
    summary="torchelastic saw a worker exit with an error",
    extract=_exit,
)

signature(
    "elastic.child_failed",
    r"(?:^|\s)rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)"
    r".*?exitcode\s*:\s*(?P<exitcode>-?\d+) \(pid: (?P<pid>\d+)\)"
    r"(?:.*?Signal (?P<signo>\d+) \((?P<signal>SIG\w+)\))?(?:.*(?P<first>first observed failure))?",
    anchors="local_rank:",
    summary="torchelastic's failure report names a failed rank, its exit code and signal",
    extract=_exit,
)

signature(
    "elastic.signal_received",
    r"Received (?:Signals\.)?(?P<signal>SIG[A-Z]+|\d+) death signal, shutting down workers"
    # torchrun's SignalException (torch 1.10-1.13): `Process 724727 got signal: 1`
    r"|SignalException: Process \d+ got signal: (?P<signo>\d+)",
    anchors=("death signal", "got signal: "),
    summary="the launcher itself was signalled and shut its workers down (scheduler kill, preemption, timeout)",
    extract=lambda found: {
        "signal": signal_name(found["signo"])
        if found["signo"]
        else signal_name(found["signal"])
        if found["signal"].isdigit()
        else found["signal"]
    },
)

signature(
    "elastic.process_signal",
    r"Signal (?P<signo>\d+) \((?P<signal>SIG[A-Z]+)\) received by PID (?P<pid>\d+)",
    anchors=") received by PID",
    summary="a worker process was killed by a signal",
)

signature(
    "spawn.process_signal",
    r"process (?P<spawn_index>\d+) terminated with signal (?:Signals\.)?(?P<signal>SIG[A-Z]+)"
    # text-generation-inference's launcher: `Shard process was signaled to shutdown with
    # signal 7` (its shards and its weight download)
    r"|(?P<role>Shard|Download) process was signaled to shutdown with signal (?P<number>\d+)",
    anchors=("terminated with signal", "process was signaled to shutdown with signal"),
    summary="torch.multiprocessing.spawn: a worker process was killed by a signal",
    extract=lambda found: {"signal": signal_name(found["number"])} if found["number"] else {},
)


def _child_exit(found: re.Match[str]) -> dict[str, Any]:
    code = found["exitcode"] or found["status"] or found["code"] or found["mpirun"]
    out: dict[str, Any] = {"report": True} if found["report"] else {}
    if code is not None:
        out["exitcode"] = int(code)
        if int(code) < 0:
            out["signal"] = signal_name(-int(code))
    if found["signal"]:
        out["signal"] = found["signal"]
    return out


# A launcher's word that a worker exited with an error, without the worker's reason:
# mp.spawn's `process 1 terminated with exit code 1`, subprocess's `Command '['/usr/bin/python',
# 'train.py', '--local_rank=1']' returned non-zero exit status 1` (torch.distributed.launch,
# accelerate), its `died with <Signals.SIGSEGV: 11>`, DeepSpeed's `exits with return code = 1`,
# horovodrun's `mpirun failed with exit code 1` and torchrun's `ChildFailedError` (its per-rank
# lines may be lost: elastic.child_failed).
signature(
    "launcher.child_exit",
    r"process (?P<spawn_index>\d+) terminated with exit code (?P<exitcode>\d+)"
    r"|Command '\['[^']*python[\w.]*'[^\]]*\]' (?:returned non-zero exit status (?P<status>\d+)"
    r"|died with <Signals\.(?P<signal>SIG[A-Z]+): \d+>)"
    r"|exits with return code = (?P<code>-?\d+)|mpirun failed with exit code (?P<mpirun>\d+)"
    r"|(?P<report>ChildFailedError)",
    anchors=(
        "terminated with exit code",
        "returned non-zero exit status",
        "died with <Signals.",
        "exits with return code = ",
        "mpirun failed with exit code",
        "ChildFailedError",
    ),
    summary="a launcher reports a worker that exited with an error or a signal",
    extract=_child_exit,
)

# The launcher stopping the remaining workers after one of them exited: torchrun's agent
# (`Sending process N closing signal SIGTERM`) and DeepSpeed's launcher (`Killing
# subprocess N`). A teardown with no rank's traceback in the text is a worker that died
# without one: a signal (the kernel's OOM killer) or a native crash.
signature(
    "elastic.teardown",
    r"Sending process (?P<pid>\d+) closing signal (?P<signal>SIG[A-Z]+)"
    r"|(?:sigkill_handler\] |^)Killing subprocess (?P<subprocess>\d+)",
    anchors=("closing signal SIG", "Killing subprocess"),
    summary="the launcher stops the remaining workers after one exited",
)

# The script's local rank against the launcher's: DeepSpeed's `Mismatch in local rank setting,
# args.local_rank=0 but env['LOCAL_RANK']=3` and `LOCAL_RANK (1) != OMPI_COMM_WORLD_LOCAL_RANK
# (0)` (a --local_rank argument that the launcher did not pass, or mpirun's rank under
# another launcher's variables).
signature(
    "launcher.local_rank_disagrees",
    r"Mismatch in local rank setting, args\.local_rank=(?P<arg>-?\d+) but env\['LOCAL_RANK'\]="
    r"(?P<env>\d+)|LOCAL_RANK \((?P<env2>\d+)\) != OMPI_COMM_WORLD_LOCAL_RANK \((?P<mpi>\d+)\)",
    anchors=("Mismatch in local rank setting", "!= OMPI_COMM_WORLD_LOCAL_RANK"),
    summary="the script's local rank disagrees with the launcher's",
)

# The DeepSpeed runner's --include/--exclude (or the CUDA_VISIBLE_DEVICES it turns into
# --include) names a GPU the host's slots do not have: Slurm's physical GPU ids 4-7 where
# the runner counts 0-3, a hostfile's slots=2 with GPUs 2,3 asked for. Older releases spelt
# it `specificied`.
signature(
    "launcher.slot_missing",
    r"No slot '?(?P<slot>\d+)'? specif(?:ic)?ied on host '?(?P<host>[\w.-]+)'?",
    anchors=("No slot ",),
    summary="the DeepSpeed runner was asked for a GPU slot the host does not have",
)

# A launcher that kills its own process tree once a child failed: SGLang's `Received sigquit
# from a child proces. It usually means the child failed.` (its misspelling) and `Triggering
# SIGQUIT for cleanup`, then SIGKILL to every process: the shell's `Killed` after it is that
# teardown, not the kernel's OOM killer.
signature(
    "launcher.kills_own_tree",
    r"Received sigquit from a child proces|Triggering SIGQUIT for cleanup",
    anchors=("Received sigquit from a child proces", "Triggering SIGQUIT for cleanup"),
    summary="the launcher kills its own processes after a child failed (a teardown, not an OOM)",
)

# A multi-node launcher that reaches the other hosts over ssh and could not: pdsh's `ssh exited
# with exit code 255` (ssh's own failure; other codes are the remote command's), DeepSpeed's
# `host=node-02 was not reachable via ssh` and `launcher 'pdsh' not installed`, horovodrun's
# `ssh not successful for host node-02`.
signature(
    "launcher.ssh_failed",
    r"pdsh@[\w.-]+: (?P<host>[\w.-]+): ssh exited with exit code 255"
    r"|host=(?P<host2>[\w.-]+) was not reachable via ssh"
    r"|ssh not successful for host (?P<host3>[\w.-]+)"
    r"|launcher '(?P<tool>pdsh|mpirun|mpiexec|srun)' not installed",
    anchors=(
        "ssh exited with exit code 255",
        "was not reachable via ssh",
        "ssh not successful for host",
        "' not installed",
    ),
    summary="the launcher could not start the job on another host over ssh",
    extract=first_of(host=("host", "host2", "host3")),
)

# --- the scheduler's and MPI's own refusals of a launch ---------------------------------

# srun cannot start the job step inside its allocation: it asks for more tasks, CPUs, GPUs
# or memory than the job holds (`Unable to create step for job 4123: More processors
# requested than permitted`), or the resources are held by another step of the job, and it
# waits for them (`Job 4123 step creation temporarily disabled, retrying (Requested nodes
# are busy)`, then `still disabled`): a second srun inside a script srun started. Busy
# clusters print the wait too, then `Step created for StepId=4123.1`.
signature(
    "slurm.step_refused",
    r"Unable to create step for job (?P<job>\d+): (?P<reason>.+)",
    anchors="Unable to create step for job",
    summary="srun could not start the job step within the job's allocation",
)

signature(
    "slurm.step_waiting",
    r"[Ss]tep creation (?:temporarily|still) disabled, retrying(?: \((?P<reason>[^)]*)\))?",
    anchors=("tep creation temporarily disabled", "tep creation still disabled"),
    summary="srun waits for resources another step of the job holds",
)

# ... and srun got its step after all (it says so only after waiting).
signature(
    "slurm.step_created",
    r"Step created for StepId=(?P<step>\S+)",
    anchors="Step created for StepId=",
    summary="srun created its job step after waiting for resources",
)

# The scheduler cannot give the job what it asks for at all: Slurm's `Requested node
# configuration is not available` (more GPUs, CPUs or memory per node than any node has, a
# partition or constraint without them), Kubernetes' `0/4 nodes are available: 4 Insufficient
# nvidia.com/gpu` (a pod that stays Pending).
signature(
    "scheduler.unsatisfiable",
    r"Requested node configuration is not available"
    r"|(?P<free>\d+)/(?P<nodes>\d+) nodes are available:[^.\n]*?Insufficient (?P<resource>[\w./-]+)"
    # Ray's: a placement group or a task no node can hold (`Placement group creation timed
    # out. Make sure your cluster either has enough resources`, the autoscaler's `could not
    # find a node type to satisfy the request`, `is infeasible and cannot currently be
    # executed`)
    r"|Placement group creation timed out|could not find a node type to satisfy the request"
    r"|is infeasible and cannot currently be executed",
    anchors=(
        "Requested node configuration is not available",
        "nodes are available:",
        "Placement group creation timed out",
        "could not find a node type to satisfy",
        "is infeasible and cannot currently be executed",
    ),
    summary="the scheduler has no node that offers what the job requests",
)

# Slurm refuses the request as written, before anything runs: sbatch's or salloc's errors
# (`Batch job submission failed: Requested GRES option unsupported by configured SelectType
# plugin`, `You must always specify a type when requesting gpu GRES`, `Parameter --gres=gpu:1
# no longer acceptable, please switch to --gpus=1`, `unrecognized option '--gpus=1'`), and
# srun's about its options (`Invalid generic resource (gres) specification`, `Couldn't find
# the specified plugin name for mpi/pmix`). A cluster's own rules for GPUs, partitions and
# MPI plugins: the options are the fault, not the code.
signature(
    "slurm.request_refused",
    r"\b(?:sbatch|salloc): (?:error: (?P<reason>(?!Batch job submission failed: Requested node"
    r" configuration)[^\n]+)|unrecognized option (?P<option>\S+))"
    r"|\bsrun: error: (?P<srun>Invalid generic resource[^\n]*|Couldn't find the specified plugin"
    r" name for mpi[^\n]*|cannot find mpi plugin[^\n]*)",
    anchors=(
        "sbatch: ",
        "salloc: ",
        "srun: error: Invalid generic",
        "srun: error: Couldn't find",
        "srun: error: cannot find mpi",
    ),
    summary="Slurm refused the job's request or options as written",
    extract=first_of(detail=("reason", "option", "srun")),
)

# Open MPI's runtime could not connect its daemons across hosts: `A process or daemon was
# unable to complete a TCP connection to another process` (its text names a firewall).
signature(
    "mpi.tcp_unreachable",
    r"A process or daemon was unable to complete a TCP connection",
    anchors="unable to complete a TCP connection",
    summary="Open MPI's daemons could not open TCP connections between the hosts",
)

# Open MPI's mpirun asked for more processes than its hosts offer slots.
signature(
    "mpi.not_enough_slots",
    r"There are not enough slots available in the system to satisfy the (?P<slots>\d+)",
    anchors="not enough slots available in the system",
    summary="mpirun: more processes requested than the hosts offer slots",
)
