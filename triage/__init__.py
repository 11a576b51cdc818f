"""triage: root-cause triage for failed or stuck distributed PyTorch jobs."""

__version__ = "0.1.0"
