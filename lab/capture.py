"""Read what crosses the lab network: tcpdump on the podman bridge, and the TCP payloads of
the capture, each direction of each connection reassembled.

For the lab test that routes a web task while capturing and asserts that no secret, prompt
or answer is in any payload (docs/tls.md, "What crosses the LAN"). Only the classic pcap
format tcpdump writes, Ethernet or Linux cooked frames, IPv4 and IPv6, TCP.
"""

from __future__ import annotations

import ipaddress
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import overload

LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLAN = 0x8100
PROTO_TCP = 6


@dataclass(frozen=True)
class Stream:
    """One direction of one TCP connection: its payload bytes in sequence order."""

    src: str
    src_port: int
    dst: str
    dst_port: int
    payload: bytes

    def __str__(self) -> str:
        return f"{self.src}:{self.src_port} -> {self.dst}:{self.dst_port}"


class Streams(Sequence[Stream]):
    def __init__(self, streams: list[Stream]) -> None:
        self._streams = streams

    @overload
    def __getitem__(self, index: int) -> Stream: ...
    @overload
    def __getitem__(self, index: slice) -> Streams: ...
    def __getitem__(self, index: int | slice) -> Stream | Streams:
        if isinstance(index, slice):
            return Streams(self._streams[index])
        return self._streams[index]

    def __iter__(self) -> Iterator[Stream]:
        return iter(self._streams)

    def __len__(self) -> int:
        return len(self._streams)

    def __repr__(self) -> str:
        return f"Streams([{', '.join(map(str, self._streams))}])"

    def containing(self, needle: bytes | str) -> list[Stream]:
        wanted = needle.encode() if isinstance(needle, str) else needle
        return [stream for stream in self._streams if wanted in stream.payload]

    def to_port(self, port: int) -> Streams:
        return Streams([stream for stream in self._streams if stream.dst_port == port])

    def from_port(self, port: int) -> Streams:
        return Streams([stream for stream in self._streams if stream.src_port == port])

    def total_bytes(self) -> int:
        return sum(len(stream.payload) for stream in self._streams)


def _network_layer(link_type: int, frame: bytes) -> tuple[int, bytes] | None:
    """(ethertype, packet) of a captured frame, or None when it carries no IP."""
    if link_type == LINKTYPE_ETHERNET:
        if len(frame) < 14:
            return None
        ethertype, offset = struct.unpack_from("!H", frame, 12)[0], 14
        if ethertype == ETHERTYPE_VLAN and len(frame) >= 18:
            ethertype, offset = struct.unpack_from("!H", frame, 16)[0], 18
        return ethertype, frame[offset:]
    if link_type == LINKTYPE_LINUX_SLL:
        return (struct.unpack_from("!H", frame, 14)[0], frame[16:]) if len(frame) >= 16 else None
    if link_type == LINKTYPE_LINUX_SLL2:
        return (struct.unpack_from("!H", frame, 0)[0], frame[20:]) if len(frame) >= 20 else None
    raise ValueError(f"pcap link type {link_type} is not read here (Ethernet, Linux cooked "
                     "v1 and v2 are): capture on the bridge interface")


def _tcp_segment(ethertype: int, packet: bytes) -> tuple[str, str, bytes] | None:
    """(source, destination, TCP segment) of an IP packet, or None for anything else."""
    if ethertype == ETHERTYPE_IPV4 and len(packet) >= 20:
        header = (packet[0] & 0x0F) * 4
        total = struct.unpack_from("!H", packet, 2)[0]
        if packet[9] != PROTO_TCP:
            return None
        # A segmentation-offloaded packet can be captured with a total length of 0.
        end = total if total >= header else len(packet)
        return (".".join(map(str, packet[12:16])), ".".join(map(str, packet[16:20])),
                packet[header:end])
    if ethertype == ETHERTYPE_IPV6 and len(packet) >= 40:
        if packet[6] != PROTO_TCP:  # extension headers: not on the lab's TCP traffic
            return None
        length = struct.unpack_from("!H", packet, 4)[0]
        return (_ipv6(packet[8:24]), _ipv6(packet[24:40]), packet[40:40 + length])
    return None


def _ipv6(raw: bytes) -> str:
    return str(ipaddress.IPv6Address(raw))


def parse_pcap(data: bytes) -> Streams:
    """The TCP streams of a classic pcap file; a retransmitted segment counts once."""
    if len(data) < 24:
        raise ValueError("not a pcap file: shorter than its header")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        order = ">"
    else:
        raise ValueError(f"not a classic pcap file (magic {magic.hex()}); pcapng is not read")
    link_type = struct.unpack_from(order + "I", data, 20)[0] & 0x0FFFFFFF
    segments: dict[tuple[str, int, str, int], dict[int, bytes]] = {}
    first_seq: dict[tuple[str, int, str, int], int] = {}
    offset = 24
    while offset + 16 <= len(data):
        captured = struct.unpack_from(order + "I", data, offset + 8)[0]
        frame = data[offset + 16:offset + 16 + captured]
        offset += 16 + captured
        network = _network_layer(link_type, frame)
        if network is None:
            continue
        found = _tcp_segment(*network)
        if found is None or len(found[2]) < 20:
            continue
        src, dst, tcp = found
        src_port, dst_port, seq = struct.unpack_from("!HHI", tcp, 0)
        payload = tcp[(tcp[12] >> 4) * 4:]
        key = (src, src_port, dst, dst_port)
        start = first_seq.setdefault(key, seq)
        if payload:
            # Signed distance from the first segment seen: a segment sent before it (seen
            # later) sorts before it, and a sequence number that wraps sorts after.
            relative = (seq - start + 2**31) % 2**32 - 2**31
            segments.setdefault(key, {}).setdefault(relative, payload)
    streams = []
    for key, by_seq in segments.items():
        joined, end = bytearray(), None
        for relative in sorted(by_seq):
            chunk = by_seq[relative]
            if end is not None and relative < end:  # overlaps what is there: keep the first
                chunk = chunk[end - relative:]
            joined += chunk
            end = relative + len(by_seq[relative]) if end is None else max(
                end, relative + len(by_seq[relative]))
        streams.append(Stream(key[0], key[1], key[2], key[3], bytes(joined)))
    return Streams(streams)


def bridge_interface(network: str) -> str:
    """The host's bridge interface of a podman network (where its containers talk)."""
    shown = subprocess.run(["podman", "network", "inspect", network, "--format",
                            "{{.NetworkInterface}}"], capture_output=True, text=True,
                           check=True).stdout.strip()
    if not shown:
        raise RuntimeError(f"podman network {network} has no bridge interface: is it up?")
    return shown


class Capture:
    """``with Capture(interface) as capture: ...``; then ``capture.streams`` has what TCP
    carried on it meanwhile (ports in ``exclude_ports`` left out)."""

    def __init__(self, interface: str, *, exclude_ports: tuple[int, ...] = ()) -> None:
        self.interface = interface
        self.exclude_ports = exclude_ports
        self.streams = Streams([])
        self._dir = tempfile.TemporaryDirectory(prefix="lab-capture-")
        self._file = Path(self._dir.name) / "capture.pcap"
        # stderr to a file, not a pipe: polled for the start with a real timeout, and never
        # a full pipe that blocks tcpdump.
        self._stderr = Path(self._dir.name) / "tcpdump.stderr"
        self._process: subprocess.Popen[bytes] | None = None

    def _said(self) -> str:
        return self._stderr.read_text(errors="replace").strip() if self._stderr.exists() else ""

    def __enter__(self) -> Capture:
        expression = ["tcp", *[part for port in self.exclude_ports
                               for part in ("and", "not", "port", str(port))]]
        with self._stderr.open("wb") as stderr:
            self._process = subprocess.Popen(
                # --immediate-mode: each packet as it comes, not in blocks a timeout releases
                # (which SIGINT may cut short); -U: written to the file as it comes.
                ["tcpdump", "-i", self.interface, "--immediate-mode", "-U", "-s", "0",
                 "-Z", "root", "-w", str(self._file), *expression],
                stdout=subprocess.DEVNULL, stderr=stderr)
        # tcpdump says "listening on <interface>" once it captures.
        deadline = time.monotonic() + 10
        while "listening on" not in self._said():
            exited = self._process.poll() is not None
            if exited or time.monotonic() > deadline:
                self._process.kill()
                self._process.wait()
                why = "exited" if exited else "was not listening after 10 s"
                said = self._said()
                self._dir.cleanup()
                raise RuntimeError(f"tcpdump on {self.interface} {why}: {said!r}")
            time.sleep(0.05)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        assert self._process is not None
        time.sleep(0.5)  # the last segments' copies reach the capture
        self._process.send_signal(signal.SIGINT)  # tcpdump writes what it holds and exits
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        try:
            if self._file.exists():
                self.streams = parse_pcap(self._file.read_bytes())
            elif error is None:  # else an empty capture would pass for one without secrets
                raise RuntimeError(f"tcpdump on {self.interface} wrote no capture: "
                                   f"{self._said()!r}")
        finally:
            self._dir.cleanup()
