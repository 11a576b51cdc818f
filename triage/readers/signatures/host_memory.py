"""Host memory running out, in the words of whatever saw it: the kernel's OOM killer, a
scheduler's or the kubelet's memory limit, Ray's memory monitor, a shell or a launcher
reporting SIGKILL, Python's or C++'s failed allocations (oom.host)."""

from __future__ import annotations

from triage.readers.signatures import signature
from triage.readers.signatures.memory import bytes_field, kb_field

signature(
    "memory.oom_killer",
    r"(?:(?P<scope>Memory cgroup out of memory|Out of memory|out of memory): )?"
    r"Kill(?:ed)? process (?P<victim_pid>\d+) \((?P<comm>[^)]*)\)(?:.*?anon-rss:(?P<anon_rss>\d+)kB)?",
    anchors=("Kill process", "Killed process"),
    summary="the kernel's OOM killer killed a process (host RAM or the container's memory limit)",
    extract=kb_field,
)

# The kernel's own record of the kill, one line before `Killed process`:
# `oom-kill:constraint=CONSTRAINT_MEMCG,...,task=python,pid=12345,uid=1000`.
signature(
    "memory.oom_kill_record",
    r"oom-kill:constraint=(?P<constraint>CONSTRAINT_\w+),.*?\btask=(?P<comm>[^,]+),"
    r"pid=(?P<victim_pid>\d+)",
    anchors="oom-kill:constraint=",
    summary="the kernel's OOM killer killed a process (host RAM or the container's memory limit)",
    extract=lambda found: {"victim_pid": int(found["victim_pid"])},
)

signature(
    "memory.slurm_oom_kill",
    r"Detected (?P<count>\d+) oom[-_]kill event",
    anchors=("oom-kill event", "oom_kill event"),
    summary="Slurm saw the cgroup OOM killer kill processes of the job step",
)

# A memory limit the scheduler or the kernel enforces, in its own words: Slurm's
# `Job 4123 exceeded memory limit (52428800 > 51200000), being killed` and `Exceeded job
# memory limit` (jobacct polling) or `killed by the cgroup out-of-memory handler` (cgroup
# enforcement), the kernel's `oom_reaper: reaped process`, the kubelet evicting a pod
# (`The node was low on resource: memory`), Ray's memory monitor (`which exceeds the memory
# usage threshold`).
signature(
    "memory.limit_kill",
    r"exceeded (?:job |step )?memory limit|Exceeded (?:job|step) memory limit(?! at some point)|"
    # LSF: `TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.`
    r"TERM_MEMLIMIT|"
    r"killed by the cgroup out-of-memory handler|oom_reaper: reaped process|"
    r"low on resource: memory|exceeds the memory usage threshold|"
    # the kubelet's node event: `SystemOOM  node/node3  System OOM encountered, victim process`
    r"System OOM encountered, victim process",
    anchors=(
        "xceeded memory limit",
        "xceeded job memory limit",
        "xceeded step memory limit",
        "cgroup out-of-memory handler",
        "oom_reaper: reaped process",
        "low on resource: memory",
        "memory usage threshold",
        "System OOM encountered",
        "TERM_MEMLIMIT",
    ),
    summary="a scheduler, the kernel or the kubelet killed processes over a memory limit",
)

# Slurm's accounting after a step whose memory (page cache included) passed its limit at
# some point: printed by jobs that went on and succeeded too, so a hint, not a kill.
signature(
    "memory.limit_touched",
    r"Exceeded (?:job|step) memory limit at some point",
    anchors=("xceeded step memory limit at some point", "xceeded job memory limit at some point"),
    summary="Slurm saw the step's memory pass its limit at some point (it may have swapped)",
)

# The kernel's OOM report begins with the allocation that invoked the killer: `python
# invoked oom-killer: gfp_mask=0x6200ca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0`.
signature(
    "memory.oom_killer_invoked",
    r"(?P<comm>\S+) invoked oom-killer: gfp_mask=",
    anchors="invoked oom-killer",
    summary="the kernel's OOM killer ran (host RAM or the container's memory limit)",
)

# Pinned (page-locked) host memory for NCCL's proxy buffers or a pin_memory() copy:
# `include/alloc.h:125 NCCL WARN Failed to CUDA host alloc 4923392 bytes`.
signature(
    "memory.pinned_alloc_failed",
    r"Failed to CUDA host alloc (?P<requested>\d+) bytes",
    anchors="Failed to CUDA host alloc",
    summary="pinned host memory could not be allocated (host RAM, a memlock or WSL limit)",
    extract=bytes_field("requested"),
)

signature(
    "memory.container_oom",
    r"\bOOMKilled\b",
    anchors="OOMKilled",
    summary="the container was killed for exceeding its memory limit",
)

signature(
    "memory.exit_137",
    r"\b(?i:exit(?:ed)?(?: with)?[ _](?:code|status))[:=]?\s*137\b|\bExited \(137\)",
    anchors=(
        "code 137",
        "code: 137",
        "code=137",
        "status 137",
        "status: 137",
        "status=137",
        "Exited (137)",
        # kubectl describe pod pads its columns: `Exit Code:    137`
        "Exit Code:",
    ),
    summary="a process exited with 137 (128 + SIGKILL): usually a memory limit",
)

signature(
    "memory.exit_sigkill",
    r"(?i:return code|exit code|exit status|exitcode|"
    r"(?:exited|terminated|failed|died) with (?:exit )?(?:code|status)|"
    # SGLang's launcher: `Scheduler or DataParallelController 48213 terminated with -9`
    r"\bterminated with)\s*[=:]?\s*-9\b"
    r"|died with <Signals\.SIGKILL: 9>|killed by signal 9\b"
    # MPICH's and Intel MPI's termination box: `=   EXIT CODE: 9`
    r"|^=\s+EXIT CODE: 9\s*$",
    anchors=(
        "return code = -9",
        "return code -9",
        "exit code -9",
        "exit status -9",
        "with code -9",
        "with status -9",
        "terminated with -9",
        "died with <Signals.SIGKILL: 9>",
        "killed by signal 9",
        "EXIT CODE: 9",
    ),
    summary="a launcher reports a process killed by SIGKILL (-9): usually the OOM killer",
)

signature(
    "memory.shell_killed",
    r"^\s*Killed\s*$|line \d+: +(?P<killed_pid>\d+) Killed\b",
    anchors="Killed",
    summary="the shell reports its child was SIGKILLed (a lone 'Killed' ends the output)",
)

signature(
    "memory.slurm_task_oom",
    r"task (?P<rank>\d+): Out Of Memory",
    anchors=": Out Of Memory",
    summary="srun reports a task killed for exceeding the job's memory",
)

signature(
    "memory.ray_oom",
    r"ray\.exceptions\.OutOfMemoryError|killed due to the node running low on memory"
    # the raylet's own count: `2 Workers (tasks / actors) killed due to memory pressure (OOM)`
    r"|Workers \(tasks / actors\) killed due to memory pressure",
    anchors=(
        "ray.exceptions.OutOfMemoryError",
        "running low on memory",
        "killed due to memory pressure",
    ),
    summary="Ray's memory monitor killed a worker: the node's host memory ran low",
)

signature(
    "memory.dataloader_killed",
    r"DataLoader worker \(pid (?P<worker_pid>\d+)\) is killed by signal: (?P<signal>[^.]+)",
    anchors="is killed by signal:",
    summary="a DataLoader worker died from a signal ('Killed' is SIGKILL, usually the OOM killer)",
)

signature(
    "memory.dataloader_exited",
    r"DataLoader worker \(pid\(s\) (?P<worker_pids>[\d, ]+)\) exited unexpectedly",
    anchors="exited unexpectedly",
    summary="DataLoader workers died without a Python error (killed, crashed, or out of shared memory)",
)

signature(
    "memory.bad_alloc",
    r"std::bad_alloc",
    anchors="std::bad_alloc",
    summary="C++ code could not allocate host memory",
)

signature(
    "memory.host_memory_error",
    r"^(?:[\w.]*\.)?_?(?:Array)?MemoryError(?::\s*(?P<detail>.*))?\s*$",
    anchors="MemoryError",
    summary="Python ran out of host memory (MemoryError)",
)

signature(
    "memory.cpu_allocator",
    r"DefaultCPUAllocator: (?:not enough memory|can't allocate memory): "
    r"you tried to allocate (?P<requested>\d+) bytes",
    anchors="DefaultCPUAllocator:",
    summary="torch's CPU allocator could not allocate host memory",
    extract=bytes_field("requested"),
)

signature(
    "memory.enomem",
    # RDMA's registrations (ibverbs, libfabric, EFA, the OFI plugin) run out of locked memory,
    # not host RAM
    r"^(?!.*(?:ibv_|mlx5dv_|NET/IB|NET/OFI|[Ll]ibfabric|\befa|memlock|MEMLOCK|locked memory"
    r"|register MR|RC: -12))"
    r".*?[Cc]annot allocate memory",
    anchors=("Cannot allocate memory", "cannot allocate memory"),
    summary="a system call failed with ENOMEM (host memory or a memory limit exhausted); "
    "InfiniBand memory registration (ibv_reg_mr, a memlock limit) is not host OOM",
)

HOST_OOM_SIGNALS = (
    "memory.oom_killer",
    "memory.oom_kill_record",
    "memory.slurm_oom_kill",
    "memory.limit_kill",
    "memory.limit_touched",
    "memory.oom_killer_invoked",
    "memory.pinned_alloc_failed",
    "memory.container_oom",
    "memory.exit_137",
    "memory.exit_sigkill",
    "memory.shell_killed",
    "memory.slurm_task_oom",
    "memory.ray_oom",
    "memory.dataloader_killed",
    "memory.dataloader_exited",
    "memory.bad_alloc",
    "memory.host_memory_error",
    "memory.cpu_allocator",
    "memory.enomem",
)
