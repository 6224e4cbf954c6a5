"""hosts.common.tcp.accept_until on loopback: the accept-and-handshake loop PHub's
server cores and its rack servers share (one connection per expected key, the
answer sent only to a welcome peer, everything closed on a bad one)."""
from __future__ import annotations

import threading

import pytest

from hosts.common.tcp import (PeerTimeout, ProtocolError, accept_until, connect_with_retry, listen, recv_json,
                              send_json)

IP = "127.0.0.1"


def _handshake(conn, timeout_s):
    theirs = recv_json(conn, timeout_s=timeout_s)
    conn.peer = f"peer {theirs['key']}"
    return theirs["key"], {"welcome": theirs["key"]}


def _dial(port, keys, answers):
    for k in keys:
        c = connect_with_retry(IP, port, peer="server", connect_timeout_s=5, io_timeout_s=5)
        send_json(c, {"key": k})
        try:
            answers.append(recv_json(c, timeout_s=5))
        except Exception as e:          # a refused peer is closed without an answer
            answers.append(type(e).__name__)
        c.close()


def _serve(keys, expected, timeout_s=10.0):
    srv = listen(IP, 0)
    port = srv.getsockname()[1]
    answers: list = []
    t = threading.Thread(target=_dial, args=(port, keys, answers))
    t.start()
    try:
        return accept_until(srv, expected, _handshake, what="peers", connect_timeout_s=timeout_s,
                            io_timeout_s=5), answers, t
    finally:
        srv.close()


def test_accepts_every_expected_key_and_answers_each():
    conns, answers, t = _serve([2, 0, 1], {0, 1, 2})
    t.join()
    assert sorted(conns) == [0, 1, 2] and [conns[k].peer for k in (0, 1, 2)] == ["peer 0", "peer 1", "peer 2"]
    assert answers == [{"welcome": 2}, {"welcome": 0}, {"welcome": 1}]
    for c in conns.values():
        c.close()


def test_a_duplicate_key_is_refused_unanswered():
    with pytest.raises(ProtocolError, match="unexpected or duplicate peer 1"):
        _serve([1, 1], {0, 1})
    with pytest.raises(ProtocolError, match="unexpected or duplicate peer 7"):
        _serve([7], {0})


def test_a_missing_peer_times_out_naming_it():
    with pytest.raises(PeerTimeout, match=r"peers \[1\]"):
        _serve([0], {0, 1}, timeout_s=1.0)
