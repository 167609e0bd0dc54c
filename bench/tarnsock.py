"""One request to a Tarn daemon straight over its socket (no client process): the
daemon's share of a command, for the bench scripts (clilat.sh, snaplist.sh).

request(socket_path, argv) sends {"argv": argv, "cwd": "/"}, reads the whole answer
and returns (microseconds from connect to the last byte read, the answer as a dict
with stdout, stderr and code). Exits the script when the command failed.
"""
import json
import socket
import sys
import time


def request(socket_path, argv):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    t0 = time.perf_counter()
    s.connect(socket_path)
    s.sendall(json.dumps({"argv": argv, "cwd": "/"}).encode() + b"\n")
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    us = (time.perf_counter() - t0) * 1e6
    s.close()
    a = json.loads(answer)
    if a["code"] != 0:
        sys.exit(f"{' '.join(argv)} failed: {a}")
    return us, a
