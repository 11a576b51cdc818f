"""The whole job across nodes: collection is node-local, analysis is global.

`triage collect` (collector.py) gathers one node's evidence with the hang playbook's own
tools and writes one versioned document (document.py); `triage hang --collections`
reads every node's document back into the same evidence (merging.py, through the
`read_collections` tool), so the rules see the whole job, every rank group with its nodes.
"""
