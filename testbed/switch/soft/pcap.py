"""Minimal classic-pcap writer (LINKTYPE_ETHERNET, microsecond timestamps).

Written by hand rather than with scapy because the switch records every frame
on its hot path: one struct.pack per frame into an in-memory buffer, written
to disk in large chunks. The switch's compiled loop formats the same records
in C (_pktio.c pcap_record) and hands them to write_records.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

PCAP_MAGIC_US = 0xA1B2C3D4
LINKTYPE_ETHERNET = 1
_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
# Whole frames: the largest snaplen tcpdump and Wireshark write (MAXIMUM_SNAPLEN).
MAX_SNAPLEN = 262144


class PcapWriter:
    """Appends frames to a pcap file; call close() (or use as a context manager)."""

    def __init__(self, path: str | Path, snaplen: int = MAX_SNAPLEN, flush_bytes: int = 1 << 20):
        self.path = Path(path)
        self.snaplen = snaplen
        self.flush_bytes = flush_bytes
        self._f = open(self.path, "wb")
        self._f.write(_GLOBAL.pack(PCAP_MAGIC_US, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        self._buf: list[bytes] = []
        self._pending = 0
        self.frames = 0

    def write_batch(self, frames: list[bytes], ts: float) -> None:
        """Record frames that share one timestamp (one receive or send batch)."""
        if not frames:
            return
        sec = int(ts)
        usec = int((ts - sec) * 1e6)
        pack = _RECORD.pack
        snap = self.snaplen
        buf = self._buf
        n = 0
        for f in frames:
            ln = len(f)
            if ln > snap:
                buf.append(pack(sec, usec, snap, ln))
                buf.append(f[:snap])
            else:
                buf.append(pack(sec, usec, ln, ln))
                buf.append(f)
            n += ln
        self.frames += len(frames)
        self._pending += n + 16 * len(frames)
        if self._pending >= self.flush_bytes:
            self.flush()

    def write_records(self, records: bytes, frames: int) -> None:
        """Append records formatted elsewhere in this file's format (the
        compiled loop's, _pktio.Engine.take_pcap): this writer stays the one
        writer of the file, so batches of both paths keep their order."""
        if not frames:
            return
        self._buf.append(records)
        self.frames += frames
        self._pending += len(records)
        if self._pending >= self.flush_bytes:
            self.flush()

    def write(self, frame: bytes, ts: float) -> None:
        self.write_batch([frame], ts)

    def flush(self) -> None:
        if self._buf:
            self._f.write(b"".join(self._buf))
            self._buf.clear()
            self._pending = 0
        self._f.flush()

    def close(self) -> None:
        if self._f.closed:
            return
        try:
            self.flush()
            os.fsync(self._f.fileno())
        except OSError:
            pass
        self._f.close()

    def __enter__(self) -> "PcapWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
