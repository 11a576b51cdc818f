"""A process that crashed or was ended, in the words of whatever saw it: the shell, the
C++ runtime, CUDA, Python's fatal-error handler, Slurm's srun and Open MPI's mpirun.

None of these names a cause; together they say a rank is gone, which is what its peers
then wait for. The scheduler's time limit is here too: a job cancelled at its limit has
either hung or run out of time.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature
from triage.readers.signatures.launcher import signal_name


def _fields(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in found.groupdict().items() if v is not None}
    for key in ("rank", "exitcode"):
        if key in out:
            out[key] = int(out[key])
    if "signo" in out:
        out["signal"] = signal_name(out["signo"])
    return out


signature(
    "process.crashed",
    r"(?P<how>Segmentation fault|core dumped|Bus error|Illegal instruction|"
    # a DataLoader worker's own handler (its bus error is shared memory: shm.dataloader_bus_error)
    r"Unexpected (?:segmentation fault|floating-point exception) encountered in worker|"
    r"Floating point exception|Fatal Python error: [A-Z][\w ]*|"
    r"terminate called after throwing an instance of '?[\w:]*'?|"
    r"caught (?:SIGSEGV|SIGBUS|SIGILL|SIGFPE)|received signal (?:SIGSEGV|SIGBUS|SIGILL|SIGFPE)|"
    # glibc's heap checks abort the process (heap corruption in native code)
    r"(?:free|malloc|realloc|munmap_chunk)\(\): (?:corrupted|invalid)[\w .-]*|"
    r"double free or corruption[\w ()!-]*|corrupted size vs\. prev_size|"
    # Open MPI's handler when a rank dies on a signal: `[host:pid] Signal: Aborted (6)`
    r"\] Signal: (?:Segmentation fault|Aborted|Bus error|Illegal instruction) \(\d+\)|"
    # SGLang's launcher: `Subprocess process_0 (pid=48213) crashed with exit code -6.`
    r"crashed with exit code -(?:6|11|7|4|8)\b)",
    anchors=(
        "Segmentation fault",
        "segmentation fault encountered in worker",
        "floating-point exception encountered in worker",
        "core dumped",
        "Bus error",
        "Illegal instruction",
        "Floating point exception",
        "Fatal Python error: ",
        "terminate called after throwing",
        "caught SIG",
        "received signal SIG",
        "(): corrupted",
        "(): invalid",
        "double free or corruption",
        "corrupted size vs. prev_size",
        "] Signal: ",
        "crashed with exit code -",
    ),
    summary="a process crashed (a segfault, an abort, an uncaught C++ exception, heap corruption)",
    extract=_fields,
)

signature(
    "cuda.kernel_fault",
    r"(?P<how>an illegal memory access was encountered|device-side assert(?:ion)? triggered|"
    r"misaligned address|unspecified launch failure|an illegal instruction was encountered|"
    r"(?P<source>\w+\.cu):\d+: (?P<kernel>[^:\n]+): [^\n]*Assertion `(?P<check>[^\n`]*)`"
    r" failed"
    # ROCm's: `Memory access fault by GPU node-4 (Agent handle: 0x...) on address 0x....
    # Reason: Page not present`, HSA's `HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION`
    r"|Memory access fault by GPU node-\d+|HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"
    r"|HSA_STATUS_ERROR_EXCEPTION)",
    anchors=(
        "illegal memory access",
        "device-side assert",
        "misaligned address",
        "unspecified launch failure",
        "illegal instruction was encountered",
        "Assertion `",
        "Memory access fault by GPU node-",
        "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
        "HSA_STATUS_ERROR_EXCEPTION",
    ),
    summary="a CUDA kernel faulted (an out-of-bounds index, a bad pointer): its process is lost",
    extract=_fields,
)

# Any other failed CUDA (or HIP) call in its library's words: torch's `CUDA error: invalid
# argument`, a kernel library's check `Failed: Cuda error attention.cu:455 'invalid
# argument'`, NCCL's `Cuda failure 'invalid argument'`. The process that gets one is lost.
signature(
    "cuda.call_failed",
    r"(?P<how>(?:CUDA|Cuda|HIP|hip) (?:error|failure)(?::|\s+\S+:\d+|\s+\d+)?\s*'?"
    r"(?P<reason>[A-Za-z][\w ,-]{3,80}?)'?)(?:\s*$|\s+when\b|\.|\s*\()",
    anchors=("CUDA error", "Cuda error", "HIP error", "hip error", "Cuda failure", "CUDA failure"),
    summary="a CUDA call failed (its reason in the line): the process that got it is lost",
)

signature(
    "scheduler.task_exit",
    r"srun: error: (?P<host>[\w.-]+): tasks? (?P<tasks>[\d,\-]+): (?P<how>[A-Z][\w ]+?)"
    r"(?: with exit code (?P<exitcode>\d+))?\s*$|"
    r"mpirun noticed that process rank (?P<rank>\d+) with PID \d+ on node (?P<node>\S+) "
    r"exited on signal (?P<signo>\d+)",
    anchors=("srun: error: ", "mpirun noticed that process rank"),
    summary="the scheduler or MPI launcher saw a task exit with an error or a signal",
    extract=_fields,
)

# A worker the orchestrator or its job controller saw die without a Python error of its own: Ray's `Worker exit
# type: SYSTEM_ERROR` / `UNEXPECTED_SYSTEM_EXIT` (its detail lists the OOM killer, `ray stop`
# and a native crash as the usual causes) and `The actor died unexpectedly`, the kubelet's
# `Back-off restarting failed container` (a container that keeps exiting).
signature(
    "scheduler.worker_died",
    r"Worker exit type: (?P<exit_type>SYSTEM_ERROR|UNEXPECTED_SYSTEM_EXIT)"
    r"|The actor died unexpectedly before finishing this task"
    r"|Back-off restarting failed container (?P<container>\S+)"
    # the job controllers above the pods: Kubeflow's `PyTorchJob pt-1 is failed because 1
    # Worker replica(s) failed.`, a Job's `has reached the specified backoff limit`, JobSet's
    # `jobset failed due to one or more job failures` / `reaching max number of restarts`
    r"|\w+Job \S+ is (?:failed|restarting) because (?P<replicas>\d+) (?P<role>\w+) replica\(s\)"
    r" failed"
    r"|has failed because it has reached the specified backoff limit"
    r"|jobset failed due to (?:one or more job failures|reaching max number of restarts)"
    # vLLM's executor and engine client seeing a worker or engine process go:
    # `Worker proc VllmWorker-1 died unexpectedly, shutting down executor.`, `Worker
    # VllmWorkerProcess pid 3283517 died, exit code: -15`, `Engine core proc EngineCore_DP0 died
    # unexpectedly`, `got fatal signal from worker processes`
    r"|Worker proc \S+ died unexpectedly|Worker VllmWorkerProcess pid \d+ died"
    r"|Engine core proc \S+ died unexpectedly|got fatal signal from worker processes",
    anchors=(
        "Worker exit type: SYSTEM_ERROR",
        "Worker exit type: UNEXPECTED_SYSTEM_EXIT",
        "The actor died unexpectedly",
        "replica(s) failed",
        "reached the specified backoff limit",
        "jobset failed due to",
        "died unexpectedly",
        "Worker VllmWorkerProcess pid",
        "got fatal signal from worker processes",
        "Back-off restarting failed container",
    ),
    summary="the orchestrator (Ray, Kubernetes) saw a worker die without an error of its own",
)

# MPI's own words for a rank that ended the job: Open MPI's `MPI_ABORT was invoked on rank 3
# in communicator MPI_COMM_WORLD`, `mpirun has exited due to process rank 3 with PID 0 on`
# (node ...) `exiting improperly`, its error handler's `*** An error occurred in
# MPI_Allreduce`; MPICH's and Intel MPI's `BAD TERMINATION OF ONE OF YOUR APPLICATION
# PROCESSES` (its exit code on a line of its own: 9 is SIGKILL, memory.exit_sigkill).
# (`Primary job terminated normally, but 1 process returned a non-zero exit code` is
# mpirun's summary after any rank's failure, read by the rules of that failure: not here.)
signature(
    "mpi.rank_ended",
    r"MPI_ABORT was invoked on rank (?P<rank>\d+)"
    r"|mpirun has exited due to process rank (?P<exited>\d+) with PID \d+"
    r"|\*\*\* An error occurred in (?P<call>MPI_\w+)"
    r"|BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
    anchors=(
        "MPI_ABORT was invoked on rank",
        "mpirun has exited due to process rank",
        "*** An error occurred in MPI_",
        "BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
    ),
    summary="MPI reports a rank that aborted or exited with an error, ending the job",
    extract=lambda found: (
        {"rank": int(found["rank"] or found["exited"])} if found["rank"] or found["exited"] else {}
    ),
)

# Open MPI names the first process that exited with a non-zero status ("The first process
# to do so was: Process name: [[jobid,1],vpid]"): the vpid is its MPI rank.
signature(
    "scheduler.first_exit",
    r"Process name:\s*\[\[\d+,\d+\],(?P<rank>\d+)\]",
    anchors="Process name: [[",
    summary="mpirun names the first process that exited with an error: it failed first",
    extract=_fields,
)

# The scheduler or Ray lost a whole node, and every rank on it: Slurm's `CANCELLED AT ...
# DUE TO NODE FAILURE` and `srun: error: Node failure on node7`, Ray's `The actor died
# because its node has died` and its health check's `has been marked dead because the
# detector has missed too many heartbeats from it`.
signature(
    "scheduler.node_failure",
    r"DUE TO NODE FAILURE|[Nn]ode failure on (?P<host>[\w.-]+)|died because its node has died"
    r"|marked dead because the (?:detector|monitor) has missed too many heartbeats"
    # Ray's raylet gone (`Raylet is terminated: ip=10.9.2.41, ... Termination is unexpected`),
    # Kubernetes' node (`Node node3 status is now: NodeNotReady`, the taint manager evicting
    # its pods)
    r"|Raylet is terminated: ip=(?P<raylet>[\w.:-]+)|status is now: NodeNotReady"
    r"|TaintManagerEviction\s+Marking for deletion Pod"
    # Open MPI's runtime, when the daemon on another node stops answering
    r"|ORTE has lost communication with a remote daemon",
    anchors=(
        "DUE TO NODE FAILURE",
        "ode failure on ",
        "died because its node has died",
        "missed too many heartbeats",
        "Raylet is terminated",
        "status is now: NodeNotReady",
        "TaintManagerEviction",
        "has lost communication with a remote daemon",
    ),
    summary="the scheduler or Ray lost a node, and every rank on it",
)

signature(
    "scheduler.time_limit",
    r"CANCELLED AT \S+ DUE TO TIME LIMIT|DUE TO TIME LIMIT"
    # Kubernetes' and its job controllers' activeDeadlineSeconds
    r"|was active (?:on the node )?longer than (?:the )?specified deadline"
    r"|Reason:\s+DeadlineExceeded|has passed the activeDeadlineSeconds"
    r"|TrainJob exceeded its active deadline",
    anchors=(
        "DUE TO TIME LIMIT",
        "longer than specified deadline",
        "longer than the specified deadline",
        "DeadlineExceeded",
        "passed the activeDeadlineSeconds",
        "exceeded its active deadline",
    ),
    summary="the scheduler cancelled the job at its time limit (a hang, or too little time)",
)

# `*** JOB 123 ON node-03 CANCELLED AT 2024-05-01T10:00:00 ***` without a reason: scancel,
# by the user or an administrator (the time limit and a node failure give theirs); a
# preemption (Slurm's, Kueue's, SkyPilot's, a spot instance reclaimed).
signature(
    "scheduler.cancelled",
    r"\*\*\* (?:JOB|STEP) (?P<job>[\w.]+) ON (?P<host>[\w.-]+) CANCELLED AT \S+"
    r"(?P<preempted> DUE TO PREEMPTION)? \*\*\*"
    # Kueue's and SkyPilot's preemption, a cloud reclaiming a spot instance
    r"|(?P<preemption>Preempted to accommodate a (?:higher priority )?[Ww]orkload"
    r"|Cluster is preempted|InstanceTerminating)",
    anchors=(
        "CANCELLED AT",
        "Preempted to accommodate a",
        "Cluster is preempted",
        "InstanceTerminating",
    ),
    summary="the scheduler cancelled the job on request (scancel) or to preempt it",
    extract=lambda found: {"preempted": bool(found["preempted"] or found["preemption"])},
)
