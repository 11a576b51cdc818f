"""Readers: one module per evidence source, from bytes, text or processes to observations.

They know nothing of tools, rules or reports; tools wrap them, rules read what they return.
"""
