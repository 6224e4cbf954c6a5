"""p4runtime-shell under a controller of one switch among several.

The shell keeps ONE global P4Info context (`p4runtime_sh.shell.context`) and one
global client, but a tree has several switches. So each SwitchController owns its
own client (`ShellClient`) and Context and never calls `shell.setup()`; while the
shell's helpers build a message, `shell_context` takes a process-wide lock, points
`shell.context` at this switch's Context (muting the helpers' echo, forcing
canonical bytestrings), then restores it. Only message building is under the lock
(microseconds), never an RPC, so switches are programmed in parallel, and a
user's own `shell.setup()` session in the same process keeps working.

    with shell_context(ctx):
        te = sh.TableEntry("Forward.l2_forward"); te.match["dst_addr"] = shell_value(mac)
"""
from __future__ import annotations

import contextlib
import threading

from p4.v1 import p4runtime_pb2 as pb
from p4runtime_sh import shell as sh
from p4runtime_sh.context import Context
from p4runtime_sh.global_options import Options, global_options
from p4runtime_sh.p4runtime import P4RuntimeClient
from p4runtime_sh.utils import UserError

from testbed.switch.p4runtime_errors import ControllerError
from testbed.switch.p4runtime_log import RequestLog

_SHELL_LOCK = threading.Lock()


def _quiet(*_args, **_kwargs) -> None:
    pass


@contextlib.contextmanager
def shell_context(ctx: Context):
    """Point p4runtime-shell's global P4Info context at `ctx` while its entity
    helpers build messages (see the module docstring for why), and silence their
    echo to stdout. The echo is muted by swapping the shell's `_print`, not via
    the `verbose` option: in 0.0.6 `Options.verbose` is an enum alias of
    `Options.canonical_bytestrings` (same value), so `setup(verbose=False)` also
    switches the encoding to padded bytestrings. Our messages are always
    canonical (P4Runtime >= 1.3)."""
    with _SHELL_LOCK:
        saved = sh.context, sh._print, global_options.get_option(Options.canonical_bytestrings)
        sh.context, sh._print = ctx, _quiet
        global_options.set_option(Options.canonical_bytestrings, True)   # whatever a session set
        try:
            yield
        except UserError as e:   # the shell's "unknown name / bad value": our error type
            raise ControllerError(f"P4Info: {e}") from None
        finally:
            sh.context, sh._print = saved[0], saved[1]
            global_options.set_option(Options.canonical_bytestrings, saved[2])


class ShellClient(P4RuntimeClient):
    """P4RuntimeClient whose arbitration reports back instead of exiting the process."""

    def __init__(self, *args, arbitration_timeout: float = 5.0, request_log: RequestLog, **kw):
        self.arbitration_timeout = arbitration_timeout
        self.request_log = request_log
        self.arbitration: pb.StreamMessageResponse | None = None
        super().__init__(*args, **kw)

    def handshake(self):
        req = pb.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high = self.election_id[0]
        req.arbitration.election_id.low = self.election_id[1]
        if self.role_name is not None:
            req.arbitration.role.name = self.role_name
        token = self.request_log.request("StreamChannel arbitration", req)
        self.stream_out_q.put(req)
        rep = self.get_stream_packet("arbitration", timeout=self.arbitration_timeout)
        if rep is None:
            why = "the stream closed, or the server is not a P4Runtime server for this device id"
            try:
                if self.stream.done():   # the server ended the stream: say what it said
                    why = f"the switch closed the stream: {self.stream.code().name}: {self.stream.details()}"
            except Exception:  # noqa: BLE001 - best effort, the timeout message stands
                pass
            self.request_log.response("StreamChannel arbitration", token, status=f"NO REPLY ({why})")
            self.tear_down()
            raise ControllerError(f"no arbitration reply within {self.arbitration_timeout:.0f}s: {why}")
        self.request_log.response("StreamChannel arbitration", token, rep)
        self.arbitration = rep


def shell_value(value) -> str:
    """A value for the shell's parsers, which take strings ("1", "0x1f", MACs, IPs)."""
    if isinstance(value, bool):
        raise ControllerError(f"expected a number, got {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return str(int.from_bytes(value, "big"))
    return str(value)
