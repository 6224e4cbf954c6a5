"""recvmmsg/sendmmsg through ctypes: the one binding of these Linux syscalls,
shared by the soft switch's ports and the INA worker's UDP socket.

`recvmmsg`/`sendmmsg` are libc's functions (None where libc lacks them, and
`HAVE_MMSG` is then False). The structures are laid out as `struct mmsghdr`;
`HDR_SIZE`, `LEN_IDX` and `FLAGS_IDX` let numpy read `msg_len` and `msg_flags`
of a whole array of them as uint32 columns.
"""
from __future__ import annotations

import ctypes

from testbed.libc import libc as c_library

MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", MsgHdr), ("msg_len", ctypes.c_uint)]


HDR_SIZE = ctypes.sizeof(MMsgHdr)
LEN_IDX = MMsgHdr.msg_len.offset // 4
FLAGS_IDX = (MMsgHdr.msg_hdr.offset + MsgHdr.msg_flags.offset) // 4


def _load():
    try:
        libc = c_library()
        rf, sf = libc.recvmmsg, libc.sendmmsg
    except (OSError, AttributeError):
        return None, None
    rf.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
    rf.restype = ctypes.c_int
    sf.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    sf.restype = ctypes.c_int
    return rf, sf


recvmmsg, sendmmsg = _load()
# The numpy column views need 4-byte-aligned headers and the 64-bit iovec layout.
HAVE_MMSG = recvmmsg is not None and HDR_SIZE % 4 == 0 and ctypes.sizeof(IoVec) == 16
