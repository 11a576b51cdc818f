"""The high-level trainers' checks of their own settings against the launch they run under:
transformers' Trainer and accelerate against the DeepSpeed config, accelerate's and torchrun's
own launch options, Lightning's strategy in a notebook, and Python's spawn start method
(which pickles what each new process runs, and re-imports the main module). Each names
the two settings that disagree (checked against transformers' integrations/deepspeed.py,
accelerate's utils/dataclasses.py and commands/launch.py, torch/distributed/run.py,
Lightning's accelerator_connector.py, CPython's multiprocessing/spawn.py)."""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "trainer.deepspeed_config_differs",
    r"Please correct the following DeepSpeed config values that mismatch(?: TrainingArguments"
    r" values)?"
    r"|`--mixed_precision` arg cannot be set to `(?P<precision>\w+)` when `(?P<ds_precision>\w+)`"
    r" is set in the DeepSpeed config file"
    r"|Do not set `gradient_accumulation_steps` in the DeepSpeed config as this will be set with",
    anchors=(
        "DeepSpeed config values that mismatch",
        "is set in the DeepSpeed config file",
        "Do not set `gradient_accumulation_steps` in the DeepSpeed config",
    ),
    summary="the trainer's own settings (batch size, precision, accumulation) and the DeepSpeed"
    " config file say different things",
)

signature(
    "trainer.interactive_ddp",
    r"(?:`Trainer\(strategy='(?P<strategy>\w+)'\)`|Selected distributed backend (?P<backend>\w+))"
    r" is not compatible with an interactive environment",
    anchors="is not compatible with an interactive environment",
    summary="Lightning refused a strategy that starts new scripts (ddp) inside a notebook",
)

signature(
    "trainer.launch_value",
    r"Unsupported nproc_per_node value: (?P<nproc>\S*)"
    r"|The port number of the rendezvous endpoint '(?P<endpoint>[^']*)' must be an integer",
    anchors=("Unsupported nproc_per_node value", "The port number of the rendezvous endpoint"),
    summary="a launch option's value the launcher cannot use (an empty --nproc_per_node, a port"
    " that is not a number)",
)

# The spawn start method (mp.spawn, Lightning's ddp_spawn, DataLoader workers on macOS and
# Windows) starts each process by re-importing the main module and unpickling what it runs.
signature(
    "spawn.main_guard_missing",
    r"An attempt has been made to start a new process before the",
    anchors="An attempt has been made to start a new process before the",
    summary="a spawned process re-ran the main module's launch code: no"
    " `if __name__ == '__main__':` guard around it",
)

# ... and the processes a job starts that way: frames of the spawn start method in a
# traceback, or Lightning 1.x choosing ddp_spawn for several GPUs (`Setting
# accelerator="ddp_spawn" for you`).
signature(
    "spawn.started",
    r"Setting `(?:accelerator|strategy)=\"ddp_spawn\"` for you",
    anchors='="ddp_spawn"` for you',
    summary="Lightning started its processes with the spawn start method (ddp_spawn)",
)

signature(
    "spawn.unpicklable",
    r"Can't pickle local object '(?P<object>[^']+)'"
    r"|ctypes objects containing pointers cannot be pickled",
    anchors=("Can't pickle local object", "ctypes objects containing pointers cannot be pickled"),
    summary="the spawn start method could not pickle what the new process runs (a local"
    " function or class, an open handle)",
)
