"""A client whose coordinator's machine does not answer at all (down, partitioned, a firewall that drops) is told
so, not that the coordinator "took the connection but never answered" (multi-host review)."""

import grpc
import pytest


class Late(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self):
        return "Deadline Exceeded"


class Stub:
    def ListJobs(self, request, timeout, metadata):  # noqa: N802 - the RPC's name
        raise Late()


def connection(no_tcp):
    from coordinator.client import Connection

    conn = object.__new__(Connection)
    conn.what, conn.stub, conn.address, conn.tls = "jobs", Stub(), "10.200.0.1:52051", None
    conn._connects = lambda: False
    conn._no_tcp_connection = lambda: no_tcp
    return conn


def test_no_tcp_connection_is_said(capsys) -> None:
    with pytest.raises(SystemExit):
        connection("timed out").rpc("ListJobs", None)
    err = capsys.readouterr().err
    assert "cannot connect to 10.200.0.1:52051 (timed out)" in err and "took the connection" not in err


def test_a_connection_made_and_never_answered_is_still_said(capsys) -> None:
    with pytest.raises(SystemExit):
        connection(None).rpc("ListJobs", None)
    assert "took the connection but never answered" in capsys.readouterr().err
