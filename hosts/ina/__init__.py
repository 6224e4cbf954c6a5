"""Host side of in-network aggregation: the one client library every worker uses.

- `fixed_point`: float <-> int32 with a shared, overflow-safe scale.
- `transport`: `InaClient` (window, retransmission, exactly-once results) over
  an `io` (`UdpIo` for real sockets, `InProcessSwitch` endpoints for tests).
"""
