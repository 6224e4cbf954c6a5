"""Host side of in-network aggregation: the one client library every worker uses.

- `fixed_point`: float <-> int32 with a shared, overflow-safe scale.
- `transport`: `InaClient` (window, retransmission, exactly-once results) over
  an `io`; it composes `window` (seq counter, per-slot FIFOs of chunks),
  `chunks` (a tensor's packets built at once), `timers` (RTT estimate,
  retransmission timers and the resend rule) and `receive` (result intake);
  `hostpath`/`hostloop`: the compiled packet loops and steady-state
  receive/send loop (hosts/ina/_hostpath.c), the numpy/Python code their reference.
- `udp_io`: `UdpIo`, the real socket; `in_process`: `InProcessSwitch`
  endpoints and `drive` for tests and simulations.
"""
