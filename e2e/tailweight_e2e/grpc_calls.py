"""Calling the emulator's gRPC methods from Python without generated code: grpcio's generic
calls (bytes in, bytes out) and the few protobuf fields involved encoded and decoded by hand
(emulator/proto/fgrpc/ping.proto, emulator/proto/tailweight/emulator/v1/streamer.proto)."""
import grpc

PING = "/fgrpc.PingServer/Ping"
TICKS = "/tailweight.emulator.v1.Streamer/Ticks"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def encode_varints(fields: dict) -> bytes:
    """A message of unsigned integer fields {number: value} (wire type 0)."""
    return b"".join(_varint(number << 3) + _varint(value) for number, value in fields.items())


def decode(message: bytes) -> dict:
    """{field number: value} of a message of varint (0), fixed64 (1) and length-delimited (2) fields."""
    fields, i = {}, 0

    def varint():
        nonlocal i
        value = shift = 0
        while True:
            byte = message[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(message):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields[number] = varint()
        elif wire == 1:
            fields[number] = message[i:i + 8]
            i += 8
        elif wire == 2:
            length = varint()
            fields[number] = message[i:i + length]
            i += length
        else:
            raise ValueError(f"wire type {wire} not expected")
    return fields


def channel(address: str) -> grpc.Channel:
    """A channel with its own subchannels: grpc-core otherwise shares them process-wide, with the
    reconnect backoff of an earlier channel to the same address."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def ping(ch: grpc.Channel, timeout_s: float = 10.0):
    """One Ping (an empty PingMessage); returns (response bytes, call)."""
    return ch.unary_unary(PING, request_serializer=None, response_deserializer=None).with_call(b"", timeout=timeout_s)


def ticks(ch: grpc.Channel, count: int, gap_ms: int, timeout_s: float = 20.0):
    stub = ch.unary_stream(TICKS, request_serializer=None, response_deserializer=None)
    return stub(encode_varints({1: count, 2: gap_ms}), timeout=timeout_s)
