"""Bundle `tools/`, `playbooks/` and SKILL.md into the `triage` package of a wheel.

Only the standard wheel gets them: an editable install must not carry copies, which
would make site-packages/triage a namespace package shadowing the checkout's.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUNDLED = {"tools": "triage/tools", "playbooks": "triage/playbooks", "SKILL.md": "triage/SKILL.md"}


class BundleHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "standard":
            build_data["force_include"].update(BUNDLED)
