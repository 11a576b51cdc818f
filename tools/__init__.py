"""Evidence tools shipped with triage: one module per source, loaded by triage.registry."""
