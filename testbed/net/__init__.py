"""The emulated network: Mininet (default) or local processes, isolation in a
private network namespace, impairment planning, and a registry of what each
run started so a crash can be cleaned up precisely.

Submodules are imported on use (mininet is only needed for the Mininet mode).
"""
