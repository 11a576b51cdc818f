"""`triage run`: launch a job under debug settings, watch it, collect its dumps on a hang."""
