"""The soft switch: a Python AF_PACKET switch process (the default backend).

- `python -m testbed.switch.soft --config cfg.json` runs one switch.
- `SoftSwitchProcess` (process.py) launches it and collects its stats.
- `SoftSwitchNode` (node.py) is the Mininet node that does both.
"""
