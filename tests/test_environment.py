"""check_environment on real processes, and the env_* rules on the facts it gathers.

Live tests start small Python processes with a planted environment (the variables a
launcher would set, plus the misconfiguration under test), wait until each has started
(it prints a line), run the tool on their pids and check the findings; every process is
killed and reaped afterwards. Rule tests build the facts directly.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from triage.engine import follow
from triage.models import Evidence, Finding
from triage.observations import (
    EnvironmentFacts,
    Gpu,
    IbPort,
    Interface,
    MasterCheck,
    RankActivity,
    RankState,
)
from triage.playbooks import get_playbook
from triage.readers.environment import select_interfaces
from triage.registry import REGISTRY, RULES, EvidenceSet
from triage.scenarios.harness import free_port

CHILD = "import sys, time\nprint('ready', flush=True)\ntime.sleep(120)\n"
LAUNCHER_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def clean_env() -> dict[str, str]:
    """This shell's environment without anything a launcher or NCCL would read."""
    drop = ("NCCL_", "GLOO_", "TORCH", "CUDA_", "SLURM_", "OMPI_", "PMI_")
    return {
        k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in LAUNCHER_VARS
    }


Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start a sleeping Python process with extra variables; returns once it runs."""
    started: list[subprocess.Popen[str]] = []

    def start(extra: dict[str, str], prefix: list[str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [*(prefix or []), sys.executable, "-c", CHILD],
            env=clean_env() | extra,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def rank_env(rank: int, world: int = 2, port: int = 29500, **extra: str) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    } | extra


def run_rules(evidence: list[Evidence], rule_id: str) -> list[Finding]:
    return list(RULES[rule_id].detect(EvidenceSet(evidence)))


# --- the NCCL/gloo interface syntax ------------------------------------------------------

NICS = ["docker0", "eth0", "eth1", "ib0", "lo"]


@pytest.mark.parametrize(
    ("spec", "exact", "selected"),
    [
        ("eth", False, ["eth0", "eth1"]),
        ("=eth0", False, ["eth0"]),
        ("=eth", False, []),
        ("^docker,lo", False, ["eth0", "eth1", "ib0"]),
        ("^=docker0", False, ["eth0", "eth1", "ib0", "lo"]),
        ("ib,eth1", False, ["eth1", "ib0"]),
        ("eth", True, []),
        ("eth0,ib0", True, ["eth0", "ib0"]),
    ],
)
def test_interface_selection_follows_nccl_and_gloo_syntax(
    spec: str, exact: bool, selected: list[str]
) -> None:
    assert select_interfaces(spec, NICS, exact_only=exact) == selected


# --- the tool on live processes ----------------------------------------------------------


def test_reads_a_rank_flags_its_missing_interface_and_hides_secrets(spawn: Spawn) -> None:
    port = free_port()
    child = spawn(
        rank_env(
            0,
            port=port,
            NCCL_SOCKET_IFNAME="doesnotexist0",
            NCCL_DEBUG="INFO",
            TORCH_HUB_TOKEN="hf_secret_value",
        )
    )
    run = REGISTRY.run("check_environment", {"pids": [child.pid]})
    assert run.result.status.value == "ok"
    by_id = {e.id: e for e in run.evidence}
    rank = EnvironmentFacts.model_validate(by_id[f"env:pid{child.pid}"].data)
    assert (rank.rank, rank.world_size, rank.local_rank) == (0, 2, 0)
    assert rank.variables["NCCL_SOCKET_IFNAME"] == "doesnotexist0"
    assert rank.variables["TORCH_HUB_TOKEN"] == "<redacted>"
    assert "hf_secret_value" not in run.result.model_dump_json()
    assert "hf_secret_value" not in "".join(e.model_dump_json() for e in run.evidence)
    host = EnvironmentFacts.model_validate(by_id["env:host"].data)
    assert any(i.loopback for i in host.interfaces)
    assert host.masters == [MasterCheck(address="127.0.0.1", port=port, status="refused")]
    assert "NCCL_SOCKET_IFNAME=doesnotexist0 selects nothing" in by_id["env:host"].summary
    assert child.poll() is None and psutil.Process(child.pid).status() != psutil.STATUS_STOPPED

    findings = run_rules(run.evidence, "env.wrong_interface")
    assert [(f.cause_id, f.ranks) for f in findings] == [("comm.wrong_interface", [0])]
    assert findings[0].confidence >= 0.85 and "doesnotexist0" in findings[0].title


def test_limits_come_from_the_rank_not_from_triage(spawn: Spawn) -> None:
    child = spawn(rank_env(0))
    run = REGISTRY.run("check_environment", {"pids": [child.pid]})
    rank = EnvironmentFacts.model_validate(run.evidence[0].data)
    limits = Path(f"/proc/{child.pid}/limits").read_text()
    soft = next(line for line in limits.splitlines() if line.startswith("Max locked memory"))
    value = soft.split()[3]
    if value == "unlimited":
        assert rank.memlock_unlimited is True
    else:
        assert rank.memlock_bytes == int(value)


def test_ranks_of_one_launch_read_their_libraries_once(
    spawn: Spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers of one launcher with the same library variables load the same torch and
    libnccl: one rank's maps are read for them all; a rank with its own LD_LIBRARY_PATH
    is read on its own."""
    from triage.readers import host_facts

    maps_read: list[str] = []
    read = host_facts._read

    def counting(path: str, parse: Callable[[str], object], default: object) -> object:
        if path.endswith("/maps"):
            maps_read.append(path)
        return read(path, parse, default)

    monkeypatch.setattr(host_facts, "_read", counting)
    same = [spawn(rank_env(rank)) for rank in (0, 1)]
    other = spawn(rank_env(2) | {"LD_LIBRARY_PATH": "/opt/elsewhere/lib"})
    run = REGISTRY.run("check_environment", {"pids": [p.pid for p in [*same, other]]})
    ranks = [e for e in run.evidence if e.kind == "environment" and e.rank is not None]
    assert sorted(e.rank for e in ranks if e.rank is not None) == [0, 1, 2]
    assert sorted(maps_read) == sorted(f"/proc/{p.pid}/maps" for p in (same[0], other))


def test_reachable_master_and_unresolvable_name(spawn: Spawn) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        alive = spawn(rank_env(0, port=port))
        lost = spawn(rank_env(1, port=port) | {"MASTER_ADDR": "master-node.invalid"})
        run = REGISTRY.run("check_environment", {"pids": [alive.pid, lost.pid]})
    host = EnvironmentFacts.model_validate(next(e for e in run.evidence if e.id == "env:host").data)
    status = {m.address: m.status for m in host.masters}
    assert status == {"127.0.0.1": "reachable", "master-node.invalid": "unresolvable"}
    findings = run_rules(run.evidence, "env.rendezvous")
    assert [f.title for f in findings] == [
        f"the master master-node.invalid:{port} does not resolve to an address"
    ]


def test_misconfigured_job_through_the_config_playbook(spawn: Spawn) -> None:
    """One pid given: discover_ranks finds its peers, check_environment compares them."""
    port = free_port()
    common = {"TORCHELASTIC_RUN_ID": f"job{port}", "CUDA_VISIBLE_DEVICES": "0"}
    first = spawn(rank_env(0, world=3, port=port, NCCL_PROTO="Simple") | common)
    spawn(rank_env(1, world=3, port=port, NCCL_PROTO="Simple") | common)
    odd = rank_env(2, world=4, port=port) | common
    odd["LOCAL_WORLD_SIZE"] = "3"
    del odd["MASTER_PORT"]
    spawn(odd)
    report = follow(get_playbook("config"), {"pids": [first.pid]})
    assert [r.tool for r in report.tool_runs] == ["discover_ranks", "check_environment"]
    by_cause = {h.cause_id: h for h in report.hypotheses}
    assert by_cause["config.world_size_mismatch"].ranks == [2]
    assert "WORLD_SIZE" in by_cause["config.world_size_mismatch"].title
    assert by_cause["config.device_assignment"].ranks == [0, 1, 2]
    assert "only GPU 0" in by_cause["config.device_assignment"].title
    assert by_cause["config.env_missing"].ranks == [2]
    assert "MASTER_PORT" in by_cause["config.env_missing"].title
    override = by_cause["comm.nccl_env_override"]
    assert override.ranks == [2] and override.confidence == 0.6
    assert "NCCL_PROTO: Simple on ranks 0-1; <unset> on rank 2." in override.summary
    assert report.hypotheses[0].cause_id in (
        "config.world_size_mismatch",
        "config.device_assignment",
    )


CONTAINER = (
    "mount -t tmpfs -o size=64m tmpfs /dev/shm && "
    'exec "$0" "$@"'  # the rank runs in its own mount and network namespace, like docker's
)


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"
)
def test_ranks_in_a_container_are_judged_by_its_shm_and_network(spawn: Spawn) -> None:
    """Two ranks share a container-like namespace: 64 MB /dev/shm, only `lo`. The host has
    a large /dev/shm and an eth0; the rules must judge what the ranks see."""
    prefix = ["unshare", "--mount", "--net", "sh", "-c", CONTAINER]
    try:
        ranks = [spawn(rank_env(r, NCCL_SOCKET_IFNAME="eth0"), prefix) for r in range(2)]
    except AssertionError:
        pytest.skip("namespaces are not available here (unshare or mount refused)")
    run = REGISTRY.run("check_environment", {"pids": [p.pid for p in ranks]})
    facts = [EnvironmentFacts.model_validate(e.data) for e in run.evidence]
    assert [f.shm_total_bytes for f in facts if f.scope == "rank"] == [64 << 20] * 2
    assert [[i.name for i in f.interfaces] for f in facts if f.scope == "rank"] == [["lo"]] * 2
    shm = run_rules(run.evidence, "env.shm_exhausted")
    assert [(f.cause_id, f.ranks) for f in shm] == [("comm.shm_exhausted", [0, 1])]
    assert "64 MiB" in shm[0].title
    nic = run_rules(run.evidence, "env.wrong_interface")
    assert [(f.title, f.ranks) for f in nic] == [
        ("NCCL_SOCKET_IFNAME=eth0 matches no interface", [0, 1])
    ]
    assert "container's network" in nic[0].summary


def test_gone_pids_are_gaps_or_an_error(spawn: Spawn) -> None:
    child = spawn(rank_env(0))
    gone = 2**22 + 4242
    run = REGISTRY.run("check_environment", {"pids": [child.pid, gone]})
    assert run.result.status.value == "ok"
    assert any(f"pid {gone} does not exist" in g.reason for g in run.gaps)
    only_gone = REGISTRY.run("check_environment", {"pids": [gone]})
    assert only_gone.result.status.value == "error"
    assert "does not exist" in (only_gone.result.error or "")


def test_without_nvidia_smi_gpus_are_a_gap_only_where_there_are_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_facts = sys.modules["triage.readers.host_facts"]
    monkeypatch.setattr(host_facts.shutil, "which", lambda name: None)
    monkeypatch.setattr(host_facts, "DEVICE_DIR", tmp_path)
    (tmp_path / "nvidiactl").touch()  # the driver's control file is no GPU
    cpu_only = REGISTRY.run("check_environment", {})
    host = EnvironmentFacts.model_validate(cpu_only.evidence[0].data)
    assert host.gpus is None and host.nvidia_devices == 0
    assert not cpu_only.gaps and "no NVIDIA GPU" in cpu_only.evidence[0].summary
    (tmp_path / "nvidia0").touch()
    run = REGISTRY.run("check_environment", {})
    assert [g.source for g in run.gaps] == ["nvidia-smi"]
    assert "1 GPU here" in run.gaps[0].reason
    assert run.result.status.value == "ok"


NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) printf '0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 3, 81559\\n';;
  --query-compute-apps=*) printf '12345, 00000000:18:00.0, 1024, /usr/bin/python3\\n';;
  topo) printf '\\tGPU0\\tCPU Affinity\\nGPU0\\t X \\t0-63\\n';;
esac
"""


def test_nvidia_smi_facts_are_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "nvidia-smi"
    binary.write_text(NVIDIA_SMI)
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    run = REGISTRY.run("check_environment", {})
    host = EnvironmentFacts.model_validate(run.evidence[0].data)
    assert host.gpus == [
        Gpu(
            index=0,
            name="NVIDIA H100 80GB HBM3",
            bus_id="00000000:18:00.0",
            memory_used_mib=3,
            memory_total_mib=81559,
        )
    ]
    assert host.gpu_processes[0].pid == 12345 and host.gpu_processes[0].used_mib == 1024
    assert host.topology is not None and "GPU0" in host.topology
    assert not [g for g in run.gaps if g.source == "nvidia-smi"]


# --- env rules on facts ------------------------------------------------------------------


def host(**fields: object) -> Evidence:
    facts = EnvironmentFacts.model_validate(
        {
            "scope": "host",
            "host": "node1",
            "interfaces": [
                Interface(name="lo", addresses=["127.0.0.1"], up=True, loopback=True),
                Interface(name="eth0", addresses=["10.0.0.5"], up=True, mtu=1500),
                Interface(name="docker0", addresses=["172.17.0.1"], up=True, virtual=True),
                Interface(name="ib0", addresses=["192.168.1.5"], up=False, mtu=2044),
            ],
            "shm_total_bytes": 32 << 30,
            "shm_free_bytes": 32 << 30,
        }
        | fields
    )
    return Evidence(
        id="env:host", kind="environment", source="node1", summary="host", data=facts.model_dump()
    )


def rank(
    r: int,
    world: int = 8,
    local_world: int = 8,
    variables: dict[str, str] | None = None,
    **fields: object,
) -> Evidence:
    launcher = {
        "RANK": str(r),
        "LOCAL_RANK": str(r % local_world),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }
    facts = EnvironmentFacts.model_validate(
        {
            "scope": "rank",
            "host": "node1",
            "pid": 1000 + r,
            "rank": r,
            "local_rank": r % local_world,
            "world_size": world,
            "local_world_size": local_world,
            "variables": launcher | (variables or {}),
        }
        | fields
    )
    return Evidence(
        id=f"env:pid{1000 + r}",
        kind="environment",
        source=f"pid:{1000 + r}",
        rank=r,
        summary=f"rank {r}",
        data=facts.model_dump(),
    )


@pytest.mark.parametrize(
    ("variable", "value", "world", "confidence"),
    [
        ("GLOO_SOCKET_IFNAME", "ib1", 8, 0.88),
        ("GLOO_SOCKET_IFNAME", "eth0,ens5", 8, 0.88),
        ("NCCL_SOCKET_IFNAME", "ens", 8, 0.88),
        ("NCCL_SOCKET_IFNAME", "ib", 8, 0.8),
        ("NCCL_SOCKET_IFNAME", "=docker0", 16, 0.72),
        ("NCCL_SOCKET_IFNAME", "=docker0", 8, None),
        ("NCCL_SOCKET_IFNAME", "eth", 16, None),
        ("NCCL_SOCKET_IFNAME", "^docker,lo", 16, None),
    ],
)
def test_socket_interface_settings(
    variable: str, value: str, world: int, confidence: float | None
) -> None:
    evidence = [host()] + [rank(r, world=world, variables={variable: value}) for r in range(8)]
    findings = run_rules(evidence, "env.wrong_interface")
    assert [f.confidence for f in findings] == ([] if confidence is None else [confidence])


def test_small_shm_with_several_local_ranks() -> None:
    evidence = [host(shm_total_bytes=64 << 20, shm_free_bytes=60 << 20)] + [
        rank(r) for r in range(4)
    ]
    findings = run_rules(evidence, "env.shm_exhausted")
    assert len(findings) == 1 and findings[0].confidence == 0.6
    assert "64 MiB" in findings[0].title and "8 local ranks" in findings[0].title
    assert run_rules([host()] + [rank(r) for r in range(4)], "env.shm_exhausted") == []
    alone = run_rules(
        [host(shm_total_bytes=64 << 20, shm_free_bytes=60 << 20)], "env.shm_exhausted"
    )
    assert alone[0].confidence < 0.5


IB = [IbPort(device="mlx5_0", port=1, state="ACTIVE", link_layer="InfiniBand")]


def test_memlock_too_low_for_infiniband() -> None:
    evidence = [host(ib_ports=IB)] + [
        rank(r, memlock_bytes=65536, memlock_unlimited=False) for r in range(2)
    ]
    findings = run_rules(evidence, "env.infiniband")
    assert [(f.cause_id, f.ranks) for f in findings] == [("comm.infiniband", [0, 1])]
    assert "64 KiB" in findings[0].title and "unlimited" in findings[0].fix
    unlimited = [host(ib_ports=IB)] + [rank(0, memlock_unlimited=True)]
    assert run_rules(unlimited, "env.infiniband") == []
    disabled = [host(ib_ports=IB)] + [
        rank(0, memlock_bytes=65536, memlock_unlimited=False, variables={"NCCL_IB_DISABLE": "1"})
    ]
    assert run_rules(disabled, "env.infiniband") == []


def test_ib_hca_naming_no_device_of_this_host() -> None:
    evidence = [
        host(ib_ports=IB),
        rank(0, memlock_unlimited=True, variables={"NCCL_IB_HCA": "mlx5_4:1"}),
    ]
    findings = run_rules(evidence, "env.infiniband")
    assert [f.confidence for f in findings] == [0.65]
    ok = [
        host(ib_ports=IB),
        rank(0, memlock_unlimited=True, variables={"NCCL_IB_HCA": "=mlx5_0:1"}),
    ]
    assert run_rules(ok, "env.infiniband") == []


@pytest.mark.parametrize(
    ("variables", "confidence"),
    [
        ({"NCCL_ALGO": "Tree"}, 0.45),
        ({"NCCL_P2P_DISABLE": "1"}, 0.3),
        ({"NCCL_DEBUG": "INFO"}, None),
    ],
)
def test_nccl_overrides(variables: dict[str, str], confidence: float | None) -> None:
    findings = run_rules(
        [rank(0, variables=variables), rank(1, variables=variables)], "env.nccl_env_override"
    )
    assert [f.confidence for f in findings] == ([] if confidence is None else [confidence])


def test_ranks_with_different_torch_versions() -> None:
    evidence = [rank(r, torch_version="2.5.1+cu124") for r in range(3)] + [
        rank(3, torch_version="2.4.0")
    ]
    findings = run_rules(evidence, "env.version_mismatch")
    assert [(f.cause_id, f.ranks) for f in findings] == [("comm.version_mismatch", [3])]


def test_more_local_ranks_than_gpus() -> None:
    gpus = [Gpu(index=i) for i in range(4)]
    evidence = [host(gpus=gpus)] + [rank(r) for r in range(8)]
    findings = run_rules(evidence, "env.device_assignment")
    assert [(f.confidence, f.ranks) for f in findings] == [(0.78, [4, 5, 6, 7])]
    assert "exceeds the 4 GPUs" in findings[0].title


def test_local_rank_0_on_each_node_is_each_nodes_own_gpu() -> None:
    """A job gathered from two nodes (merged collections): local rank 0 of node1 and of node2
    are two GPUs; two ranks of one node with local rank 0 are one."""
    nodes = [rank(r, world=16, host="node1" if r < 8 else "node2") for r in range(16)]
    assert (
        run_rules([host(gpus=[Gpu(index=i) for i in range(8)])] + nodes, "env.device_assignment")
        == []
    )
    twice = nodes + [rank(16, world=16, host="node2", local_rank=0)]
    findings = run_rules(twice, "env.device_assignment")
    assert [(f.confidence, f.ranks) for f in findings] == [(0.75, [8, 16])]


def test_spawned_ranks_in_a_collective_are_not_missing_their_env_variables() -> None:
    """mp.spawn's workers pass rank and world_size to init_process_group: MASTER_* without
    RANK is their normal environment, and a rank standing in a collective proves the group
    was initialised (live `triage hang` on the fault matrix's spawn jobs read it as
    config.env_missing 0.6 above the hang)."""
    spawned = [rank(r, variables={"RANK": "", "WORLD_SIZE": ""}) for r in range(4)]
    assert [f.cause_id for f in run_rules(spawned, "env.env_missing")] == ["config.env_missing"]
    waiting = RankState(pid=1000, rank=None, activity=RankActivity.collective, op="all_reduce")
    stack = Evidence(
        id="stack:1000", kind="stack", source="pid:1000", summary="all_reduce",
        data=waiting.model_dump(),
    )  # fmt: skip
    assert run_rules([*spawned, stack], "env.env_missing") == []


def test_one_gpu_per_rank_with_local_rank_indexing_is_a_weak_hint() -> None:
    evidence = [rank(r, variables={"CUDA_VISIBLE_DEVICES": str(r)}) for r in range(4)]
    findings = run_rules(evidence, "env.device_assignment")
    assert [(f.confidence, f.ranks) for f in findings] == [(0.4, [1, 2, 3])]


def test_healthy_job_has_no_environment_findings() -> None:
    evidence = [host(gpus=[Gpu(index=i) for i in range(8)])] + [
        rank(
            r,
            memlock_unlimited=True,
            torch_version="2.5.1",
            variables={"NCCL_SOCKET_IFNAME": "eth0"},
        )
        for r in range(8)
    ]
    env_rules = [rule_id for rule_id in RULES if rule_id.startswith("env.")]
    assert len(env_rules) >= 9
    assert [f for rule_id in env_rules for f in run_rules(evidence, rule_id)] == []


def test_nccl_version_of_pips_wheel_is_the_version_alone() -> None:
    from triage.readers.host_facts import wheel_version

    assert wheel_version("nvidia_nccl_cu13-2.30.7.dist-info") == "2.30.7"
    assert wheel_version("nvidia_nccl_cu12-2.21.5.dist-info") == "2.21.5"
