"""Shared pieces of the interop harness: building the Java jar / Go binary / real-RocketMQ classpath
(cached under tests/interop/.build/), running the client CLIs, a tiny remoting probe, the rmq_ha
pair (processes from the one launcher, `rmq_jepsen.launch`, stopped by pid), and the assertions
every scenario shares.

Nothing here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_jepsen.launch import LOOPBACK, RMQ_HA, Proc, ReadyFile, wait_until

HERE = Path(__file__).resolve().parent
BUILD = HERE / ".build"
JAVA_DIR = HERE / "java"
GO_DIR = HERE / "go"
REAL_DIR = HERE / "real"
ROCKETMQ_VERSION = "5.5.0"  # tests/interop/real/pom.xml and java/pom.xml pin the same release
GO_CLIENT_VERSION = "v2.1.2"  # tests/interop/go/go.mod


# --------------------------------------------------------------------------- builds


def _digest(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(HERE)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _record_time(name: str, seconds: float, cached: bool) -> None:
    path = BUILD / "build-times.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault(name, []).append({"seconds": round(seconds, 2), "cached": cached})
    data[name] = data[name][-20:]
    path.write_text(json.dumps(data, indent=1))


_checked: dict[str, Path] = {}


def _cached_build(name: str, inputs: list[Path], output: Path, build: Any) -> Path:
    """Runs build() unless output exists and was built from inputs with the same digest (checked
    once per process)."""
    if name in _checked:
        return _checked[name]
    key = _digest(inputs)
    stamp = output.with_name(output.name + ".key")
    t0 = time.monotonic()
    with _build_lock():
        if output.exists() and stamp.exists() and stamp.read_text() == key:
            _record_time(name, time.monotonic() - t0, cached=True)
            _checked[name] = output
            return output
        build()
        stamp.write_text(key)
    _record_time(name, time.monotonic() - t0, cached=False)
    _checked[name] = output
    return output


def _run_build(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"build failed ({' '.join(cmd)}), exit {proc.returncode}:\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )


def java_jar() -> Path:
    """tests/interop/.build/interop-java.jar: the CLI on the real rocketmq-client (Maven)."""
    out = BUILD / "interop-java.jar"
    inputs = [JAVA_DIR / "pom.xml", *sorted((JAVA_DIR / "src").rglob("*.java"))]

    def build() -> None:
        _run_build(["mvn", "-q", "-B", "package"], JAVA_DIR)
        shutil.copyfile(BUILD / "java-target" / "interop-java.jar", out)

    return _cached_build("java", inputs, out, build)


def go_binary() -> Path:
    """tests/interop/.build/interop-go: the CLI on the real rocketmq-client-go/v2."""
    out = BUILD / "interop-go"
    inputs = [GO_DIR / "go.mod", GO_DIR / "go.sum", *sorted(GO_DIR.glob("*.go"))]

    def build() -> None:
        _run_build(
            ["go", "build", "-mod=readonly", "-o", str(out), "."],
            GO_DIR,
            {"GOFLAGS": "-buildvcs=false"},
        )

    return _cached_build("go", inputs, out, build)


def real_rocketmq_lib(version: str = ROCKETMQ_VERSION) -> Path:
    """tests/interop/.build/real-rocketmq/lib: rocketmq-namesrv + rocketmq-broker and their
    dependencies, copied from Maven Central by `mvn dependency:copy-dependencies`. Another
    released `version` (the bench's --rocketmq-version) gets a directory of its own,
    real-rocketmq-<version>/lib."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"RocketMQ version must look like 5.5.0, not {version!r}")
    name = "real-rocketmq" if version == ROCKETMQ_VERSION else f"real-rocketmq-{version}"
    lib = BUILD / name / "lib"
    marker = lib / ".complete"

    def build() -> None:
        if lib.exists():
            shutil.rmtree(lib)
        _run_build(
            [
                "mvn",
                "-q",
                "-B",
                "dependency:copy-dependencies",
                f"-DoutputDirectory={lib}",
                f"-Drocketmq.version={version}",
            ],
            REAL_DIR,
        )
        marker.write_text(version)

    _cached_build(name, [REAL_DIR / "pom.xml"], marker, build)
    return lib


def build_times() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((BUILD / "build-times.json").read_text())
        return data
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- remoting probe


def remoting_request(
    addr: str, code: int, ext: dict[str, str] | None = None, timeout: float = 3.0
) -> tuple[int, dict[str, str], bytes]:
    """One JSON-serialized request over a fresh connection: (response code, extFields, body)."""
    header = json.dumps(
        {
            "code": code,
            "language": "PYTHON",
            "version": 479,
            "opaque": 1,
            "flag": 0,
            "extFields": ext or {},
        },
        separators=(",", ":"),
    ).encode()
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(frame)
        head = _recv_exact(s, 4)
        (length,) = struct.unpack(">i", head)
        rest = _recv_exact(s, length)
    (mark,) = struct.unpack(">i", rest[:4])
    hlen = mark & 0xFFFFFF
    if (mark >> 24) & 0xFF != 0:
        raise ValueError("response not JSON-serialized")
    hdr = json.loads(rest[4 : 4 + hlen])
    return int(hdr["code"]), dict(hdr.get("extFields") or {}), rest[4 + hlen :]


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def lenient_json(body: bytes) -> Any:
    """RocketMQ bodies may carry fastjson's unquoted numeric map keys ({0:"a"}); quote them."""
    text = body.decode()
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(re.sub(r"([{,])\s*(-?\d+)\s*:", r'\1"\2":', text))


def cluster_brokers(namesrv: str) -> dict[str, dict[str, str]]:
    """GET_BROKER_CLUSTER_INFO (106): brokerName -> {brokerId: addr}; {} if not answerable."""
    try:
        code, _, body = remoting_request(namesrv, 106)
    except (OSError, ValueError):
        return {}
    if code != 0 or not body:
        return {}
    info = lenient_json(body)
    table = info.get("brokerAddrTable") or {}
    return {name: dict(bd.get("brokerAddrs") or {}) for name, bd in table.items()}


# --------------------------------------------------------------------------- clusters


@dataclass
class Cluster:
    """A running namesrv + single-master broker on loopback."""

    impl: str  # "real" | "rmq_ha"
    namesrv: str  # host:port
    broker: str  # host:port of the master
    broker_name: str
    workdir: Path
    procs: list[Proc] = field(default_factory=list)
    broken: str | None = None  # set when a smoke check failed (rmq_ha before it is ready)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop(grace_s=15.0)

    def logs(self) -> str:
        return "\n".join(f"--- {p.describe()}:\n{p.tail()}" for p in self.procs)


def start_rmq_ha(
    workdir: Path,
    timeout: float = 30.0,
    broker_conf: Iterable[str] = (),
    namesrv_conf: Iterable[str] = (),
) -> Cluster:
    """Starts `rmq-ha namesrv` and `rmq-ha broker -c broker.conf`; each writes host:port to its
    --ready-file once it listens. Ready when the namesrv lists the broker. `broker_conf`: more
    `key=value` lines for broker.conf; `namesrv_conf`: lines for a namesrv.conf (-c)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ns_ready = workdir / "namesrv.ready"
    br_ready = workdir / "broker.ready"
    procs: list[Proc] = []
    cluster = Cluster("rmq_ha", "", "", "broker-a", workdir, procs)
    try:
        ns_args = [*RMQ_HA, "namesrv", "--listen-port", "0", "--ready-file", str(ns_ready)]
        if namesrv_conf:
            (workdir / "namesrv.conf").write_text("\n".join([*namesrv_conf, ""]))
            ns_args += ["-c", str(workdir / "namesrv.conf")]
        ns = Proc(
            "rmq-ha namesrv",
            ns_args,
            workdir / "namesrv.log",
            ReadyFile(ns_ready),
            cwd=workdir,
            stdout="log",
            append_log=False,
        )
        procs.append(ns.start())
        namesrv = ns.wait_ready_sync(timeout)
        conf = workdir / "broker.conf"
        conf.write_text(
            "\n".join(
                [
                    "brokerClusterName=DefaultCluster",
                    "brokerName=broker-a",
                    "brokerId=0",
                    "listenPort=0",
                    f"namesrvAddr={namesrv}",
                    f"storePathRootDir={workdir / 'store'}",
                    "autoCreateTopicEnable=true",
                    "flushDiskType=ASYNC_FLUSH",
                    *broker_conf,
                    "",
                ]
            )
        )
        br = Proc(
            "rmq-ha broker",
            [*RMQ_HA, "broker", "-c", str(conf), "--ready-file", str(br_ready)],
            workdir / "broker.log",
            ReadyFile(br_ready),
            cwd=workdir,
            stdout="log",
            append_log=False,
        )
        procs.append(br.start())
        broker = br.wait_ready_sync(timeout)
        wait_until(
            "broker registered with the namesrv",
            lambda: cluster_brokers(namesrv).get("broker-a", {}).get("0"),
            timeout,
            procs,
        )
        cluster.namesrv, cluster.broker = namesrv, broker
        return cluster
    except BaseException:
        cluster.stop()
        raise


# --------------------------------------------------------------------------- client runs


@dataclass(frozen=True)
class Names:
    """A fresh topic and group per test, so tests never see each other's messages or offsets."""

    topic: str
    group: str

    @classmethod
    def for_test(cls, node_name: str) -> Names:
        base = re.sub(r"[^A-Za-z0-9_]", "_", node_name)[:80]
        tag = uuid.uuid4().hex[:8]
        return cls(f"T_{base}_{tag}", f"G_{base}_{tag}")


@dataclass
class ClientRun:
    client: str
    cmd: list[str]
    returncode: int
    data: dict[str, Any]
    stderr_log: Path
    seconds: float

    def describe(self) -> str:
        try:
            tail = "\n".join(self.stderr_log.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            tail = ""
        errors = self.data.get("errors")
        return (
            f"{self.client} {' '.join(self.cmd[-12:])}\nexit {self.returncode} in "
            f"{self.seconds:.1f}s, errors={errors}\nstderr tail:\n{tail}"
        )

    @property
    def sent(self) -> list[dict[str, Any]]:
        return list(self.data.get("sent") or [])

    @property
    def received(self) -> list[dict[str, Any]]:
        return list(self.data.get("received") or [])


def client_command(
    client: str,
    scenario: str,
    namesrv: str,
    workdir: Path,
    *,
    topic: str,
    group: str,
    count: int,
    serialize: str,
    timeout: int = 60,
    extra: Iterable[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one Java or Go CLI run. The header serialization is
    handed over the way the real clients take it: env ROCKETMQ_SERIALIZE_TYPE (read by the Java
    client itself; the Go CLI reads it and switches the Go client's codec)."""
    workdir.mkdir(parents=True, exist_ok=True)
    args = [
        scenario,
        "--namesrv",
        namesrv,
        "--topic",
        topic,
        "--group",
        group,
        "--count",
        str(count),
        "--timeout",
        str(timeout),
        *extra,
    ]
    home = workdir / f"{client}-home"
    home.mkdir(exist_ok=True)
    if client == "java":
        cmd = [
            "java",
            "-Xms64m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Duser.home={home}",
            "-jar",
            str(java_jar()),
            *args,
        ]
    elif client == "go":
        cmd = [str(go_binary()), *args]
    else:
        raise ValueError(client)
    env = {**os.environ, "ROCKETMQ_SERIALIZE_TYPE": serialize, "HOME": str(home)}
    return cmd, env


def parse_client_output(
    client: str,
    cmd: list[str],
    returncode: int,
    stdout: bytes,
    stderr_log: Path,
    seconds: float,
    serialize: str,
    check: bool,
) -> ClientRun:
    lines = [ln for ln in stdout.decode(errors="replace").splitlines() if ln.startswith("{")]
    data: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    run = ClientRun(client, cmd, returncode, data, stderr_log, seconds)
    if check:
        assert lines, f"no JSON result line\n{run.describe()}"
        assert returncode == 0 and not data.get("errors"), run.describe()
        assert data.get("serializeType") == serialize, (
            f"client used {data.get('serializeType')}, wanted {serialize}"
        )
    return run


def run_client(
    client: str,
    scenario: str,
    cluster: Cluster,
    workdir: Path,
    *,
    topic: str,
    group: str,
    count: int,
    serialize: str,
    timeout: int = 60,
    extra: Iterable[str] = (),
    check: bool = True,
) -> ClientRun:
    """Runs the Java or Go CLI once and waits for it."""
    cmd, env = client_command(
        client,
        scenario,
        cluster.namesrv,
        workdir,
        topic=topic,
        group=group,
        count=count,
        serialize=serialize,
        timeout=timeout,
        extra=extra,
    )
    stderr_log = workdir / f"{client}-{scenario}-{int(time.time() * 1000)}.stderr"
    t0 = time.monotonic()
    with open(stderr_log, "wb") as err:
        proc = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=timeout + 60,
            check=False,
        )
    return parse_client_output(
        client,
        cmd,
        proc.returncode,
        proc.stdout,
        stderr_log,
        time.monotonic() - t0,
        serialize,
        check,
    )


# --------------------------------------------------------------------------- checks


def offset_msg_id(broker_addr: str, commitlog_offset: int) -> str:
    """The broker-made message id: store host IPv4 (4 B) + port (4 B) + commitlog offset (8 B)."""
    host, port = broker_addr.rsplit(":", 1)
    raw = socket.inet_aton(host) + struct.pack(">iq", int(port), commitlog_offset)
    return raw.hex().upper()


def check_sent(
    run: ClientRun, count: int, *, with_results: bool = True, msg_ids: bool = True
) -> None:
    sent = run.sent
    assert len(sent) == count, f"sent {len(sent)} of {count}\n{run.describe()}"
    bodies = [s["body"] for s in sent]
    assert len(set(bodies)) == count, "duplicate bodies in the send log"
    if not with_results:
        return
    for s in sent:
        assert s["status"] == "SEND_OK", s
        assert s["msgId"] or not msg_ids, s
        assert re.fullmatch(r"[0-9A-F]{32}", s["offsetMsgId"] or ""), s
    check_queue_offsets_dense((s["queueId"], s["queueOffset"]) for s in sent)


def check_queue_offsets_dense(pairs: Iterable[tuple[int, int]]) -> None:
    """On a fresh topic, the offsets handed out in each queue are exactly 0..n-1."""
    per_queue: dict[int, list[int]] = defaultdict(list)
    for qid, off in pairs:
        per_queue[qid].append(off)
    for qid, offs in per_queue.items():
        assert sorted(offs) == list(range(len(offs))), f"queue {qid} offsets {sorted(offs)}"


def first_deliveries(received: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    first: dict[str, dict[str, Any]] = {}
    for r in received:
        first.setdefault(r["body"], r)
    return first


def check_received(
    cluster: Cluster,
    topic: str,
    sent: list[dict[str, Any]],
    received: list[dict[str, Any]],
    *,
    body_len: int | None = None,
) -> None:
    """Every sent body arrived, intact, at the queue/offset the broker acknowledged, with the
    client msgId (UNIQ_KEY), the broker offset msgId, keys, tag and user property preserved."""
    first = first_deliveries(received)
    missing = sorted({s["body"] for s in sent} - set(first))
    assert not missing, f"{len(missing)} bodies never received: {missing[:10]}"
    for s in sent:
        r = first[s["body"]]
        assert r["topic"] == topic, r
        assert r["bodyOk"], f"body corrupted: {r}"
        if body_len is not None:
            assert r["bodyLen"] == body_len, r
        assert r["tags"] == "TagA", r
        assert r["userProp"] == s["body"], r
        assert r["keys"] == s["key"], (s, r)
        assert r["reconsumeTimes"] == 0, r
        assert r["brokerName"] == cluster.broker_name, r
        assert r["offsetMsgId"] == offset_msg_id(cluster.broker, r["commitLogOffset"]), r
        if "queueId" in s:
            assert (r["queueId"], r["queueOffset"]) == (s["queueId"], s["queueOffset"]), (s, r)
        if s.get("msgId"):
            assert r["msgId"] == s["msgId"], (s, r)
        if s.get("offsetMsgId"):
            assert r["offsetMsgId"] == s["offsetMsgId"], (s, r)
    check_queue_offsets_dense({(r["queueId"], r["queueOffset"]) for r in first.values()})


def check_orderly_sent(sent: list[dict[str, Any]]) -> None:
    """Every key's messages went to one queue, at increasing offsets, in send order."""
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in sent:
        by_key[s["key"]].append(s)
    for key, msgs in by_key.items():
        assert len({m["queueId"] for m in msgs}) == 1, f"{key} spread over queues"
        offs = [m["queueOffset"] for m in msgs]
        assert offs == sorted(offs) and len(set(offs)) == len(offs), (key, offs)


def check_orderly_received(received: list[dict[str, Any]], keys: int, per_key: int) -> None:
    """Per key, deliveries came in exactly the sequence they were sent (0, 1, 2, ...)."""
    seqs: dict[str, list[int]] = defaultdict(list)
    for r in received:
        _, key, seq = r["body"].rsplit("-", 2)
        seqs[key].append(int(seq))
    assert len(seqs) == keys, sorted(seqs)
    for key, got in seqs.items():
        assert got == list(range(per_key)), f"{key} delivered as {got}"


# --------------------------------------------------------------------------- wire sniffer


class FrameSniffer:
    """A loopback TCP relay in front of one server that records the serialization type byte of
    every remoting frame in each direction (0 = JSON, 1 = ROCKETMQ)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.to_server: list[int] = []
        self.to_client: list[int] = []
        self._lock = threading.Lock()
        self._srv = socket.socket()
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind((LOOPBACK, 0))
        self._srv.listen(16)
        self._srv.settimeout(0.2)
        self.addr = f"{LOOPBACK}:{self._srv.getsockname()[1]}"
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        host, port = self.target.rsplit(":", 1)
        while not self._stop.is_set():
            try:
                client, _ = self._srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection((host, int(port)), timeout=5)
            server.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._socks += [client, server]
            for a, b, log in ((client, server, self.to_server), (server, client, self.to_client)):
                threading.Thread(target=self._pump, args=(a, b, log), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, log: list[int]) -> None:
        buf = b""
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                dst.sendall(chunk)
                buf += chunk
                while len(buf) >= 8:
                    (length,) = struct.unpack(">i", buf[:4])
                    if len(buf) < 4 + length:
                        break
                    with self._lock:
                        log.append(buf[4])
                    buf = buf[4 + length :]
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        self._srv.close()
        with self._lock:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.close()
        self._thread.join(timeout=2)
