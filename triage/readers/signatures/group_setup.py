"""A process group being set up, in the words of torch and of the frameworks that announce
it: torch's store-based barrier counting the workers that joined (torch 1.x-2.1), the
announcements of Lightning, DeepSpeed and torchelastic's agent, and the word that every rank
joined. A log whose last word is an announcement stalled there."""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import signature


def _barrier(found: re.Match[str]) -> dict[str, Any]:
    world, joined = int(found["world_size"]), int(found["joined"])
    out = {"world_size": world, "joined": joined, "excess": joined > world}
    return out | ({"group": int(found["group"])} if found["group"] else {})


# The key counts the process groups made so far: store_based_barrier_key:1 is the world's,
# 2 and up a later new_group's (which every rank must call).
signature(
    "setup.store_barrier",
    r"store based barrier (?:on|to initialize process group for) rank:? (?P<rank>\d+),? (?:for )?key: "
    r"(?:store_based_barrier_key:(?P<group>\d+)|\S+) \(world_size=(?P<world_size>\d+),"
    r" (?:worker_count|num_workers_joined)=(?P<joined>\d+)",
    anchors="store based barrier",
    summary="init_process_group's barrier counts a different number of workers than the world size",
    extract=_barrier,
)


def _announced(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rank := found["rank"] or found["store_rank"]:
        out["rank"] = int(rank)
    if found["world_size"]:
        out["world_size"] = int(found["world_size"])
    if found["backend"]:
        out["backend"] = found["backend"]
    return out


# A process group being set up, in the words of the frameworks that announce it, and its
# completion: a log whose last word is the announcement stalled there (the other ranks
# never joined).
signature(
    "setup.init_announced",
    r"(?:Initializing distributed|initializing ddp): GLOBAL_RANK: (?P<rank>\d+), "
    r"MEMBER: \d+/(?P<world_size>\d+)|"
    r"Initializing TorchBackend in DeepSpeed with backend (?P<backend>\w+)|"
    r"Added key: store_based_barrier_key:\d+ to store for rank: (?P<store_rank>\d+)|"
    # torchelastic's agent joining its rendezvous
    r"attempts to join the next round of the rendezvous|Rendezvous'ing worker group|"
    # torch_xla's XRT workers waiting for the mesh master
    r"Waiting to connect to client mesh master",
    anchors=(
        "Initializing distributed: GLOBAL_RANK",
        "initializing ddp: GLOBAL_RANK",
        "Initializing TorchBackend in DeepSpeed",
        "Added key: store_based_barrier_key",
        "attempts to join the next round of the rendezvous",
        "Rendezvous'ing worker group",
        "Waiting to connect to client mesh master",
    ),
    summary="a framework announces that it sets the process group up (Lightning, DeepSpeed, torch)",
    extract=lambda found: _announced(found),
)

signature(
    "setup.init_completed",
    r"All distributed processes registered\. Starting with \d+ processes|"
    r"Completed store-based barrier for key|Rendezvous complete for workers",
    anchors=(
        "All distributed processes registered",
        "Completed store-based barrier",
        "Rendezvous complete for workers",
    ),
    summary="every rank joined the process group (Lightning's and torch's own words)",
)
