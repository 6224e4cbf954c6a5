"""ShadowSync (Facebook): recommendation trainers whose dense parameters
synchronize in a background process, embedding parameter servers, and the
foreground baselines. See docs/shadowsync.md."""
