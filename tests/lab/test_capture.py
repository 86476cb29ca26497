"""lab/capture.py: the pcap reader on captures built here, and tcpdump itself on loopback."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess

import pytest

from lab import capture


def pcap(records: list[bytes], link_type: int = capture.LINKTYPE_ETHERNET,
         order: str = "<") -> bytes:
    header = struct.pack(order + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, link_type)
    return header + b"".join(struct.pack(order + "IIII", 0, 0, len(r), len(r)) + r
                             for r in records)


def tcp(src_port: int, dst_port: int, seq: int, payload: bytes) -> bytes:
    return struct.pack("!HHIIBBHHH", src_port, dst_port, seq, 0, 5 << 4, 0x18, 65535, 0,
                       0) + payload


def ipv4_packet(src: str, dst: str, segment: bytes) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(segment), 0, 0, 64, 6, 0,
                       socket.inet_aton(src), socket.inet_aton(dst)) + segment


def ipv4(src: str, dst: str, segment: bytes) -> bytes:
    return b"\x00" * 12 + b"\x08\x00" + ipv4_packet(src, dst, segment)


def ipv6(src: str, dst: str, segment: bytes) -> bytes:
    header = struct.pack("!IHBB16s16s", 6 << 28, len(segment), 6, 64,
                         socket.inet_pton(socket.AF_INET6, src),
                         socket.inet_pton(socket.AF_INET6, dst))
    return b"\x00" * 12 + b"\x86\xdd" + header + segment


A, B = "10.89.20.42", "10.89.20.40"


def test_each_direction_is_joined_in_sequence_order_and_a_retransmission_counts_once() -> None:
    records = [
        ipv4(A, B, tcp(50000, 8000, 1006, b"world")),  # seen first, sent second
        ipv4(A, B, tcp(50000, 8000, 1000, b"hello ")),
        ipv4(A, B, tcp(50000, 8000, 1000, b"hello ")),  # retransmitted
        ipv4(B, A, tcp(8000, 50000, 7, b"answer")),
        ipv4(A, B, tcp(50000, 8000, 1011, b"")),  # a bare ACK
    ]
    streams = capture.parse_pcap(pcap(records))
    assert {(s.src, s.src_port, s.dst, s.dst_port, s.payload) for s in streams} == {
        (A, 50000, B, 8000, b"hello world"), (B, 8000, A, 50000, b"answer")}
    assert streams.total_bytes() == len(b"hello world") + len(b"answer")


@pytest.mark.parametrize(("segments", "joined"), [
    # sent out of order, and one retransmitted
    ([(1000, b"hello "), (1011, b"!"), (1006, b"world"), (1006, b"world")], b"hello world!"),
    # one overlapping the one before: only its new bytes count
    ([(1000, b"hello "), (1003, b"lo world")], b"hello world"),
    # the sequence number wraps
    ([(2**32 - 3, b"abc"), (0, b"def")], b"abcdef"),
    # a retransmission that differs: the first copy seen counts
    ([(1000, b"first"), (1000, b"later")], b"first"),
], ids=["out of order", "overlap", "wrap", "first copy"])
def test_one_direction_is_reassembled(segments: list[tuple[int, bytes]], joined: bytes) -> None:
    records = [ipv4(A, B, tcp(50000, 8000, seq, payload)) for seq, payload in segments]
    [stream] = capture.parse_pcap(pcap(records))
    assert stream.payload == joined


def test_containing_and_the_port_filters() -> None:
    records = [ipv4(A, B, tcp(50000, 5432, 1, b"secret-token")),
               ipv4(B, A, tcp(5432, 50000, 1, b"reply")),
               ipv6("fd00::2", "fd00::1", tcp(40000, 6379, 1, "プロンプト".encode()))]
    streams = capture.parse_pcap(pcap(records, order=">"))
    assert [str(s) for s in streams.containing("secret-token")] == [f"{A}:50000 -> {B}:5432"]
    assert [s.src for s in streams.containing(b"reply")] == [B]
    assert [s.dst for s in streams.containing("プロンプト")] == ["fd00::1"]
    assert streams.containing("absent") == []
    assert len(streams.to_port(5432)) == 1 and len(streams.from_port(5432)) == 1
    assert len(streams.to_port(6379)) == 1 and len(streams.to_port(8000)) == 0
    assert streams[1].payload == b"reply"  # in the order the capture saw them
    assert isinstance(streams[1:], capture.Streams) and streams[1:].total_bytes() == len(
        b"reply") + len("プロンプト".encode())


# Frames as each link type carries the same IPv4 packet: Ethernet, Linux cooked v1 (protocol
# at 14 of a 16-byte header) and v2 (protocol first in a 20-byte header).
FRAMES = {
    capture.LINKTYPE_ETHERNET: lambda packet: b"\x00" * 12 + b"\x08\x00" + packet,
    capture.LINKTYPE_LINUX_SLL: lambda packet: b"\x00" * 14 + b"\x08\x00" + packet,
    capture.LINKTYPE_LINUX_SLL2: lambda packet: b"\x08\x00" + b"\x00" * 18 + packet,
}


@pytest.mark.parametrize("order", ["<", ">"], ids=["little-endian", "big-endian"])
@pytest.mark.parametrize("link_type", list(FRAMES), ids=["ethernet", "sll", "sll2"])
def test_each_byte_order_and_link_type_is_read(link_type: int, order: str) -> None:
    frame = FRAMES[link_type](ipv4_packet(A, B, tcp(50000, 8000, 1, b"payload")))
    data = pcap([frame], link_type=link_type, order=order)
    assert data[:4] == (b"\xd4\xc3\xb2\xa1" if order == "<" else b"\xa1\xb2\xc3\xd4")
    [stream] = capture.parse_pcap(data)
    assert (stream.src, stream.src_port, stream.dst, stream.dst_port, stream.payload) == (
        A, 50000, B, 8000, b"payload")


def test_an_unknown_link_type_or_file_is_refused_with_what_is_read() -> None:
    with pytest.raises(ValueError, match="pcap link type 101 is not read here"):
        capture.parse_pcap(pcap([b"\x45" * 40], link_type=101))
    with pytest.raises(ValueError, match="not a classic pcap file"):
        capture.parse_pcap(b"\x0a\x0d\x0d\x0a" + b"\x00" * 28)


def test_a_network_without_a_bridge_interface_is_named(monkeypatch) -> None:
    def run(args, **kwargs):
        assert args[:4] == ["podman", "network", "inspect", "lab-net"] and kwargs["check"]
        return subprocess.CompletedProcess(args, 0, stdout="\n", stderr="")
    monkeypatch.setattr(capture.subprocess, "run", run)
    with pytest.raises(RuntimeError, match="podman network lab-net has no bridge interface"):
        capture.bridge_interface("lab-net")


needs_tcpdump = pytest.mark.skipif(shutil.which("tcpdump") is None,
                                   reason="tcpdump is not installed (./dev installs it)")


@needs_tcpdump
def test_tcpdump_that_cannot_start_says_why() -> None:
    with pytest.raises(RuntimeError, match=r"tcpdump on no-such-if0 exited: .*no-such-if0"), \
            capture.Capture("no-such-if0"):
        pass


@needs_tcpdump
def test_tcpdump_on_loopback_sees_what_is_sent_but_not_an_excluded_port() -> None:
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    seen_port, excluded_port = (server.getsockname()[1] for server in servers)
    with capture.Capture("lo", exclude_ports=(excluded_port,)) as captured:
        for server, payload in zip(servers, (b"seen-canary", b"excluded-canary"), strict=True):
            with socket.create_connection(server.getsockname()) as client:
                client.sendall(payload)
                accepted, _ = server.accept()
                assert accepted.recv(64) == payload
                accepted.close()
    for server in servers:
        server.close()
    assert [s.dst_port for s in captured.streams.containing("seen-canary")] == [seen_port]
    assert captured.streams.containing("excluded-canary") == []
