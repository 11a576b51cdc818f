"""Bundled rules, one module per rule; `triage.plugins.load_rules` imports them all."""
