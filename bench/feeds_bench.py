"""`make bench-feeds`: a published google-xml served at its feed URL by a real `firefeed api` process.

Builds a feed of --rows items with ../shared/feedgen (cached in --data-dir), publishes it as google-xml
with `firefeed run` (the product's own publish path; 1M items make about 1.3 GB), starts `firefeed api`
and measures:
  (a) `cat FILE > /dev/null` (page cache warm) against 4 concurrent full fetches of the feed URL (plain
      sockets read into 4 MiB buffers, one process each),
      their total throughput (target >= 0.5x of cat's), with the API's RSS sampled meanwhile (< 300 MB);
      The same 4 fetches from a bare sendfile server (`ceiling`: accept, read the request, sendfile the file on
      a thread per connection; no HTTP framework, no Python per byte, the kernel's socket defaults) are
      measured in the same rounds, and from a second one with the send buffer the API sets for a loopback
      peer (LOOPBACK_SNDBUF): `fetch_vs_ceiling` and `fetch_vs_ceiling_small_buffer` compare the API with
      them (docs/decisions.md: the socket settings, not the framework, set these figures);
  (b) 200 concurrent keep-alive clients sending If-None-Match for --seconds: 304 answers per second
      (target >= 2,000/s).
Prints the figures and writes them as JSON to bench/out/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _benchdb import create_database, drop_database, save_results  # noqa: E402
from pipeline_bench import feed_files, firefeed_run  # noqa: E402

from firefeed.feeds.http import LOOPBACK_SNDBUF  # noqa: E402

EXE = Path(sys.executable).with_name("firefeed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class RssSampler(threading.Thread):
    def __init__(self, pid: int, every_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.every_s, self.peak, self._halt = pid, every_s, 0.0, threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(self.every_s)

    def stop(self) -> float:
        self._halt.set()
        self.join()
        return self.peak


def cat_throughput(path: Path) -> float:
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    t = time.perf_counter()
    subprocess.run(f"cat '{path}' > /dev/null", shell=True, check=True)
    return path.stat().st_size / (time.perf_counter() - t)


def _fetch(args: tuple[int, str]) -> int:
    """One full GET on a plain socket read into a 4 MiB buffer (curl reads 16 KiB at a time: it would measure
    itself); the body's byte count."""
    port, path = args
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        buf = bytearray(4 << 20)
        view = memoryview(buf)
        got = b""
        while b"\r\n\r\n" not in got:
            n = sock.recv_into(view)
            if not n:
                raise SystemExit("the connection closed before the head")
            got += bytes(view[:n])
        head, _, rest = got.partition(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
            raise SystemExit(f"not a 200: {head[:200]!r}")
        body = len(rest)
        while n := sock.recv_into(view):
            body += n
        return body


def _bare_server(path: str, ready: Any, sndbuf: int = 0) -> None:
    """The ceiling's server: what any server in any language must at least do to send the file on loopback
    (with `sndbuf`, the connection's send buffer set as the API sets it for a loopback peer)."""
    size = os.path.getsize(path)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    ready.send(srv.getsockname()[1])

    def serve(conn: socket.socket) -> None:
        with conn:
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                got += chunk
            if sndbuf:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n".encode())
            fd = os.open(path, os.O_RDONLY)
            try:
                sent = 0
                while sent < size:
                    sent += os.sendfile(conn.fileno(), fd, sent, min(size - sent, 8 << 20))
            finally:
                os.close(fd)

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def fetch_throughput(port: int, path: str, size: int, clients: int) -> float:
    with multiprocessing.get_context("fork").Pool(clients) as pool:
        t = time.perf_counter()
        got = pool.map(_fetch, [(port, path)] * clients)
        elapsed = time.perf_counter() - t
    if any(g != size for g in got):
        raise SystemExit(f"a fetch was short: {got} of {size} bytes")
    return clients * size / elapsed


async def _client(host: str, port: int, request: bytes, deadline: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            counts[0 if status == 304 else 1] += 1
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
    finally:
        writer.close()


def _flood(args: tuple[str, int, bytes, float, int]) -> list[int]:
    host, port, request, seconds, clients = args
    counts = [0, 0]

    async def main() -> None:
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(_client(host, port, request, deadline, counts) for _ in range(clients)))

    asyncio.run(main())
    return counts


def not_modified_rate(port: int, path: str, etag: str, clients: int, seconds: float, procs: int) -> tuple[float, int]:
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nIf-None-Match: {etag}\r\nUser-Agent: feeds-bench\r\n\r\n"
    ).encode()
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    t = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        results = pool.map(_flood, [("127.0.0.1", port, request, seconds, n) for n in per])
    elapsed = time.perf_counter() - t
    ok, other = sum(r[0] for r in results), sum(r[1] for r in results)
    return ok / min(elapsed, seconds + 0.5), other


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/firefeed-bench"))
    ap.add_argument(
        "--admin-dsn",
        default=os.environ.get("FIREFEED_BENCH_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    ap.add_argument("--fetches", type=int, default=4, help="concurrent full fetches (a)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of (a), cat then the fetches; the median is kept")
    ap.add_argument("--clients", type=int, default=200, help="concurrent If-None-Match clients (b)")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long (b) runs")
    ap.add_argument("--client-procs", type=int, default=2, help="processes the (b) clients run in")
    args = ap.parse_args()

    db = f"firefeed_bench_feeds_{os.getpid()}"
    admin, dsn = create_database(args.admin_dsn, db)
    work = args.data_dir / f"feeds_{os.getpid()}"
    results: dict[str, Any] = {"rows": args.rows}
    api: subprocess.Popen[bytes] | None = None
    try:
        env = dict(
            os.environ,
            FIREFEED_DATABASE_URL=dsn,
            FIREFEED_EXPORT_DIR=str(work / "exports"),
            FIREFEED_DATA_DIR=str(work / "var"),
        )
        env.pop("FIREFEED_STORAGE_URL", None)
        env.pop("FIREFEED_BROKER_URL", None)
        feed, _ = feed_files(args.data_dir, args.rows)
        work.mkdir(parents=True, exist_ok=True)
        spec = args.data_dir / f"spec_feeds_{os.getpid()}.yaml"  # beside the feed: local sources are read from there
        doc = {
            "company": "bench",
            "project": "feeds",
            "sources": [{"name": "feed", "url": feed.name}],
            "exports": [{"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"}],
        }
        spec.write_text(yaml.safe_dump(doc))
        run = firefeed_run(spec, env)
        entry = run["report"]["exports"][0]
        path = work / "exports" / entry["path"]
        size = path.stat().st_size
        results |= {"file_bytes": size, "publish_run_s": round(run["wall_s"], 1)}
        print(f"published {size / 1e9:.2f} GB of google-xml ({args.rows} items) in {run['wall_s']:.0f} s", flush=True)

        port = free_port()
        api = subprocess.Popen(
            [str(EXE), "api", "--port", str(port), "--no-access-log"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        out = subprocess.run(
            [str(EXE), "feed-url", "feeds", "google"], env=env, capture_output=True, text=True, check=True
        ).stdout
        url_path = out.strip()
        url = f"http://127.0.0.1:{port}{url_path}"
        deadline = time.monotonic() + 30
        while True:
            try:
                probe = subprocess.run(
                    ["curl", "-sS", "-o", "/dev/null", "-D", "-", "-H", "Range: bytes=0-0", url],
                    capture_output=True,
                    text=True,
                )
                if " 206" in probe.stdout.split("\r\n", 1)[0]:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the API did not serve {url_path}: {probe.stdout[:300]} {probe.stderr[:300]}")
            time.sleep(0.2)
        etag = next(
            line.split(":", 1)[1].strip() for line in probe.stdout.splitlines() if line.lower().startswith("etag:")
        )
        idle_rss = rss_mib(api.pid)

        # cat and the fetches alternate, --repeat times: on a shared machine both see the same neighbours,
        # and the median of the rounds' ratios is the figure.
        bares, bare_ports = [], []
        for sndbuf in (0, LOOPBACK_SNDBUF):
            parent, child = multiprocessing.Pipe()
            bare = multiprocessing.get_context("fork").Process(
                target=_bare_server, args=(str(path), child, sndbuf), daemon=True
            )
            bare.start()
            bares.append(bare)
            bare_ports.append(parent.recv())
        sampler = RssSampler(api.pid)
        sampler.start()
        rounds = []
        for _ in range(args.repeat):
            round_cat = cat_throughput(path)
            round_fetched = fetch_throughput(port, url_path, size, args.fetches)
            round_bare, round_small = (fetch_throughput(p, "/", size, args.fetches) for p in bare_ports)
            rounds.append((round_fetched / round_cat, round_cat, round_fetched, round_bare, round_small))
            print(
                f"    round: cat {round_cat / 1e6:,.0f} MB/s, fetches {round_fetched / 1e6:,.0f} MB/s "
                f"= {round_fetched / round_cat:.2f}x, ceiling {round_bare / 1e6:,.0f} MB/s, "
                f"with the API's loopback buffer {round_small / 1e6:,.0f} MB/s",
                flush=True,
            )
        peak = sampler.stop()
        for bare in bares:
            bare.terminate()
        _, cat, fetched, ceiling, small = statistics.median_low(rounds)
        results |= {
            "cat_mb_s": round(cat / 1e6),
            "fetches": args.fetches,
            "rounds": [[round(r, 2), *(round(x / 1e6) for x in rest)] for r, *rest in rounds],
            "fetch_total_mb_s": round(fetched / 1e6),
            "fetch_vs_cat": round(fetched / cat, 2),
            "ceiling_mb_s": round(ceiling / 1e6),
            "ceiling_vs_cat": round(ceiling / cat, 2),
            "fetch_vs_ceiling": round(fetched / ceiling, 2),
            "ceiling_small_buffer_mb_s": round(small / 1e6),
            "fetch_vs_ceiling_small_buffer": round(fetched / small, 2),
            "api_rss_idle_mib": round(idle_rss),
            "api_rss_peak_mib": round(peak),
        }
        print(
            f"(a) cat {cat / 1e6:,.0f} MB/s; {args.fetches} concurrent fetches {fetched / 1e6:,.0f} MB/s in all "
            f"= {fetched / cat:.2f}x (target >= 0.5x); the bare sendfile ceiling {ceiling / 1e6:,.0f} MB/s "
            f"= {ceiling / cat:.2f}x of cat, the API {fetched / ceiling:.2f}x of it; with the API's loopback "
            f"send buffer {small / 1e6:,.0f} MB/s, the API {fetched / small:.2f}x of that; "
            f"API RSS peak {peak:.0f} MiB (idle {idle_rss:.0f}; target < 300)",
            flush=True,
        )

        rate, other = not_modified_rate(port, url_path, etag, args.clients, args.seconds, args.client_procs)
        results |= {"clients": args.clients, "not_modified_per_s": round(rate), "other_answers": other}
        print(f"(b) {args.clients} clients with If-None-Match: {rate:,.0f} 304s/s (target >= 2,000/s)", flush=True)
        if other:
            print(f"    {other} answers were not 304", flush=True)
    finally:
        if api is not None:
            api.terminate()
            api.wait(timeout=30)
        drop_database(admin, db)
        subprocess.run(["rm", "-rf", str(work), str(args.data_dir / f"spec_feeds_{os.getpid()}.yaml")], check=False)
    print(f"figures: {save_results('feeds', results)}")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
