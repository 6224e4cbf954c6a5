"""Mininet's own cluster mode (`net.mode: cluster`): the same network as
``MininetNetwork``, built by ``mininet.examples.cluster.MininetCluster`` with
hosts placed on several servers (RemoteHost over SSH, links between servers
as GRE or SSH tunnels: RemoteGRELink / RemoteSSHLink). No multi-machine logic
of our own: placement is the scenario's `net.cluster.placement` (or Mininet's
round robin), everything else is Mininet's.

Limits (docs/real-rack.md): every server needs passwordless SSH as root from
the first one and the same Mininet version; the soft switch and the runner run
on the first server (`servers[0]`), so every host on another server reaches it
through a tunnel; netem/nftables impairments apply per host namespace as on
one machine. Only the dry run is tested here (one machine).
"""
from __future__ import annotations

from itertools import cycle
from typing import Any

from testbed.net.mininet_net import MininetNetwork


def place_hosts(cluster: Any, hosts: list[str]) -> dict[str, str]:
    """host -> server: the scenario's placement, the rest round-robin over the servers."""
    rr = cycle(cluster.servers)
    return {h: cluster.placement.get(h) or next(rr) for h in hosts}


class ClusterNetwork(MininetNetwork):
    def __init__(self, cluster: Any, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.cluster = cluster
        self.placement = place_hosts(cluster, list(self.hosts))

    def _cluster_kw(self) -> dict[str, Any]:
        from mininet.examples.cluster import RemoteGRELink, RemoteSSHLink  # noqa: PLC0415
        kw: dict[str, Any] = {"servers": list(self.cluster.servers),
                              "link": RemoteGRELink if self.cluster.link == "gre" else RemoteSSHLink}
        if self.cluster.user:
            kw["user"] = self.cluster.user
        return kw

    def _make_mininet(self, **kw: Any) -> Any:
        from mininet.examples.cluster import MininetCluster  # noqa: PLC0415
        kw.pop("link", None)   # the cluster's link class carries links between servers
        return MininetCluster(**kw, **self._cluster_kw())

    def _host_params(self, host: str) -> dict[str, Any]:
        return {"server": self.placement[host]}

    def _record_build(self, rec: Any) -> None:
        kw = self._cluster_kw()
        rec.note(f"MininetCluster(servers={kw['servers']}, link={kw['link'].__name__}"
                 + (f", user={kw['user']}" if "user" in kw else "") + "): mininet.examples.cluster")
        for host, server in self.placement.items():
            rec.note(f"placement: {host} on {server}")
        rec.note(f"switches {', '.join(self.switch_names)} and the runner on {self.cluster.servers[0]}")
        super()._record_build(rec)
