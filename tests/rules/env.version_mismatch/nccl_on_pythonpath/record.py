"""Record this case's environment evidence from real processes (tests/rules/env_recording.py).

    .venv/bin/python tests/rules/env.version_mismatch/nccl_on_pythonpath/record.py [OUTPUT]

A three-rank gloo job in which rank 2 runs with PYTHONPATH pointing at another
environment's site-packages that holds a second NCCL build (the nvidia-nccl-cu13 2.32.3
wheel, downloaded with pip into a temporary folder), so its torch loads that libnccl, while
ranks 0 and 1 load the NCCL their torch ships (2.30.7 here); each process's /proc/PID/maps
shows which libnccl it has mapped.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tests.rules.env_recording import GLOO_JOB, main  # noqa: E402

#: The second NCCL: its pip wheel, unpacked the way another environment (a second venv, a
#: container image's site-packages) holds it. rank 2 has that site-packages on PYTHONPATH, as a
#: node's launch script may leave it, so its torch loads that libnccl instead of its own.
OTHER_NCCL = "nvidia-nccl-cu13==2.32.3"
DOWNLOADS = Path(tempfile.gettempdir()) / "triage-other-nccl"


def other_nccl() -> str:
    """Download and unpack OTHER_NCCL once; the site-packages folder that holds it."""
    site = DOWNLOADS / "site-packages"
    lib = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    if not lib.exists():
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(DOWNLOADS)]
        subprocess.run([*command, OTHER_NCCL], check=True)
        with zipfile.ZipFile(next(DOWNLOADS.glob("nvidia_nccl_cu13-*.whl"))) as wheel:
            wheel.extractall(site)
    return str(site)


if __name__ == "__main__":
    main(HERE, GLOO_JOB, 3, on_rank={2: {"PYTHONPATH": other_nccl()}})
