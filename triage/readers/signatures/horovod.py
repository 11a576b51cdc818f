"""Horovod's own words around the collectives (horovod/runner and horovod/common): its
launcher's network discovery and rendezvous, a build without the framework or backend in
use, a worker that exited, a dtype its backend cannot reduce.

horovodrun starts a task service on every host and checks which interfaces reach each
other before it launches anything; a host without a routable interface of the same name,
a firewall or NAT between the hosts stop it there. Its gloo workers then meet in an HTTP
key-value store on the launching host. (Its coordinator's checks of the tensors the ranks
submit are in `hang.py`; its NCCL errors are NCCL's, in `nccl.py`.)
"""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "horovod.no_common_interface",
    r"Horovod was unable to connect to (?P<service>[\w #]+?) on any of the following addresses"
    r"|Unable to find a set of common task-to-task communication interfaces"
    r"|Timed out waiting for (?:tasks to update task-to-task addresses|Task to task address"
    r" check)"
    r"|No available network interface found matching user provided interface"
    r"|Cannot find an IPv4 address of the common interface"
    r"|declared addresses .{0,200}?, but has connected from a different address",
    anchors=(
        "on any of the following addresses",
        "common task-to-task communication interfaces",
        "task-to-task addresses",
        "Task to task address check",
        "matching user provided interface",
        "IPv4 address of the common interface",
        "but has connected from a different address",
    ),
    summary="horovodrun found no network interface its hosts reach each other on",
)

signature(
    "horovod.tasks_not_started",
    r"Timed out waiting for tasks to start\. Please check connectivity between servers"
    r"|(?P<store>http_store\.cc:\d+\])?[^\n]{0,200}?(?:Wait timeout (?:after (?P<seconds>\d+)"
    r" seconds )?for key\(s\)|HTTP GET request failed too many times)",
    anchors=(
        "Timed out waiting for tasks to start",
        "Wait timeout after",
        "Wait timeout for key(s)",
        "HTTP GET request failed too many times",
    ),
    summary="Horovod's workers did not all reach its launcher's rendezvous in time",
)


signature(
    "horovod.not_built",
    r"Neither MPI nor Gloo support has been built"
    r"|(?P<part>Gloo|MPI|NCCL) support (?:has not been built|is required to use \w+ training,"
    r" but has not been built)|Horovod has not been built with (?P<with>MPI|Gloo|NCCL) support"
    r"|Extension horovod\.(?P<framework>torch|tensorflow|mxnet|keras) has not been built",
    anchors=(
        "Neither MPI nor Gloo support has been built",
        "support has not been built",
        "but has not been built",
        "Horovod has not been built with",
        "has not been built",
    ),
    summary="Horovod was built without the framework or the backend the job uses",
    extract=lambda found: {
        "part": found["part"] or found["with"] or found["framework"] or "MPI nor Gloo"
    },
)

signature(
    "horovod.framework_version",
    r"Framework (?P<framework>\w+) installed with version (?P<built>\S+) but found version"
    r" (?P<found>[^\s.]+(?:\.[^\s.]+)*)",
    anchors="installed with version",
    summary="Horovod was built against another version of the framework than the one installed",
)

signature(
    "horovod.dtype_unsupported",
    r"Type (?P<dtype>\w+) is not supported in (?P<backend>Gloo|NCCL|MPI|MLSL|CCL) mode",
    anchors=(
        "is not supported in Gloo mode",
        "is not supported in NCCL mode",
        "is not supported in MPI mode",
    ),  # fmt: skip
    summary="Horovod's backend cannot reduce tensors of this dtype",
)

# horovodrun's gloo launcher (gloo_run.py): each worker that exited (`Process 2 exit with
# status code 1.`) and, in its RuntimeError, the first one by its rank (`Process name: 1`;
# `Exit code: 137` follows on a line of its own, read as any exit status 137 is).
signature(
    "horovod.process_exit",
    r"Process (?P<rank>\d+) exit with status code (?P<exitcode>-?\d+)|^Process name: (?P<first>\d+)\s*$",
    anchors=("exit with status code", "Process name: "),
    summary="Horovod's launcher reports a worker that exited with an error",
    extract=lambda found: {
        key: int(value)
        for key, value in (
            ("rank", found["rank"] or found["first"]),
            ("exitcode", found["exitcode"]),
        )
        if value is not None
    },
)
