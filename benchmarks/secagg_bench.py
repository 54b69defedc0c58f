"""Benchmark of secagg against Flower's SecAgg+ primitives (flwr.common.secure_aggregation).

For n in {100, 500, 1000}, d = 3072 and 5 % of the clients dropping before the masked-input
round, on the k-regular graph (k from secagg.default_degree) and, for n <= 500, on the
complete graph, this measures

* ours: the full protocol through the real client/server state machines and the plain
  message dictionaries (per-client time = mean time spent in one client's four methods;
  server time = time spent in the server's methods; bytes sent per client = the payload of
  its messages; wall = the whole session in one process);
* Flower: the same per-client work done with flwr 1.42's primitives as its
  ``secaggplus_mod`` does it (P-384 key pairs, PyCryptodome Shamir via ``create_shares``,
  Fernet share encryption, ``pseudo_rand_gen`` masks, ``quantize``) on a sample of clients
  with real neighbours' keys, and the server's unmasking work (``combine_shares``,
  ``pseudo_rand_gen``) measured per secret and per mask and scaled to the run's counts
  (labelled "extrapolated").

Scale rows (``--scale``): d = 64 at n = 1000, 3000, 10 000 and 100 000 (``--scale-n``), d =
3072 at n = 1000 and 10 000 (``--scale-n-wide``), each of these without and with a roster
(identity keys: every client signs its round-0 keys and verifies its k neighbours'
signatures itself), (k, t) from ``secagg.choose_parameters(n, gamma=0.05, delta=0.05)``, each
row run (none extrapolated) in a fresh subprocess: wall and CPU time, peak resident memory
(``ru_maxrss``), and the ratio of the CPU time to the floor of its primitives (every X25519
agreement and AES-CTR keystream of the session, every client's Ed25519 key generation and
signatures and, with a roster, its n k Ed25519 verifications, each primitive timed alone on
this machine; :func:`primitive_floor`). Rows
with n <= 1000 keep the best of ``--scale-repeats`` (3) sessions and floors. Then the phases
and a cProfile of the largest d = 3072 row with n <= 3000. ``--scale-row N D R [--roster]``
runs one row (best of R) and prints it as JSON.
``--exact-complete [N]``: the complete graph at N = 1000 clients (t = 501, 2 dropouts, d = 4,
integer inputs), asserting that the decoded sum and the Z_2^64 ring sum are exact to the bit
(the suite checks the same at n = 150); about 2 M X25519 agreements, ~2 minutes of CPU.
``--params`` prints the (k, t) table of ``choose_parameters``. ``--ring`` compares the
Z_2^32 option with the Z_2^64 default on the same sessions (n = 100, 500, 1000; ``--quick``:
100): bytes per client (masked input, whole session) and times, best of 3.

Run: ``python benchmarks/secagg_bench.py [--quick | --scale | --params | --ring |
--exact-complete [N]]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small exact matmuls in Shamir

import time
from typing import Any

import numpy as np

from fa_hetdp.secagg import (
    SecAggClient,
    SecAggServer,
    choose_encoding,
    choose_parameters,
    crypto,
    default_degree,
    default_threshold,
    in_process_identities,
    run_in_process,
)
from fa_hetdp.secagg.identity import identity_payload

D = 3072
DROP = 0.05


def payload_bytes(message: dict[str, Any]) -> int:
    total = 0
    for value in message.values():
        if isinstance(value, bytes):
            total += len(value)
        elif isinstance(value, int):
            total += 8
        elif isinstance(value, np.ndarray):
            total += value.nbytes
        elif isinstance(value, list):
            total += sum(len(v) if isinstance(v, bytes) else 8 for v in value)
    return total


def run_ours(n: int, neighbours: Any, seed: int = 0, modulus_bits: int = 64) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    vectors = rng.uniform(-1.0, 1.0, size=(n, D))
    dropped = set(rng.choice(n, size=int(DROP * n), replace=False).tolist())
    threshold = default_threshold(n, neighbours)
    client_time = np.zeros(n)
    sent = np.zeros(n)
    sent_masked = np.zeros(n)  # the masked-input replies alone (m/8 bytes per coordinate)
    server_time = 0.0
    wall = time.perf_counter()
    cpu = time.process_time()

    def timed_client(i: int, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        start = time.perf_counter()
        reply = method(*args, **kwargs)
        client_time[i] += time.perf_counter() - start
        sent[i] += payload_bytes(reply)
        if method.__name__ == "masked_input":
            sent_masked[i] += payload_bytes(reply)
        return reply

    def timed_server(method: Any, *args: Any) -> Any:
        nonlocal server_time
        start = time.perf_counter()
        out = method(*args)
        server_time += time.perf_counter() - start
        return out

    server = timed_server(
        lambda: SecAggServer(range(n), threshold=threshold, neighbours=neighbours, rng=rng)
    )
    clients = [SecAggClient(i) for i in range(n)]
    setups = timed_server(server.setup_messages)
    for i, c in enumerate(clients):
        timed_server(server.receive_advertise_keys, timed_client(i, c.advertise_keys, setups[i]))
    directories = timed_server(server.key_directory)
    for i, c in enumerate(clients):
        timed_server(server.receive_share_keys, timed_client(i, c.share_keys, directories[i]))
    encoding = choose_encoding(n, np.ones(D), modulus_bits=modulus_bits)
    requests = timed_server(server.start_summation, encoding)
    streams = rng.spawn(n)
    for i, request in requests.items():
        if i not in dropped:
            reply = timed_client(i, clients[i].masked_input, request, vectors[i], rng=streams[i])
            timed_server(server.receive_masked_input, reply)
    unmask = timed_server(server.unmask_requests)
    for i in server.survivors:
        timed_server(server.receive_unmask, timed_client(i, clients[i].unmask, unmask[i]))
    result = timed_server(server.finish_summation)
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    keep = sorted(set(range(n)) - dropped)
    error = float(np.max(np.abs(result.sum - vectors[keep].sum(axis=0))))
    if error > float(np.max(result.max_error)):
        raise RuntimeError(f"wrong sum: error {error}")
    return {
        "client_s": float(client_time[keep].mean()),
        "server_s": server_time,
        "bytes": float(sent[keep].mean()),
        "masked_bytes": float(sent_masked[keep].mean()),
        "wall_s": wall,
        "cpu_s": cpu,
        "k": float(server.graph.degree),
        "t": float(threshold),
    }


def run_flower(n: int, k: int, t: int, sample: int) -> dict[str, Any]:
    from flwr.common import ndarray_to_bytes
    from flwr.common.secure_aggregation.crypto.shamir import combine_shares, create_shares
    from flwr.common.secure_aggregation.crypto.symmetric_encryption import (
        decrypt,
        encrypt,
        generate_shared_key,
    )
    from flwr.common.secure_aggregation.quantization import quantize
    from flwr.common.secure_aggregation.secaggplus_utils import (
        pseudo_rand_gen,
        share_keys_plaintext_concat,
    )
    from flwr.supercore.primitives.asymmetric import (
        bytes_to_private_key,
        bytes_to_public_key,
        generate_key_pairs,
        private_key_to_bytes,
        public_key_to_bytes,
    )

    mod_range = 1 << 32
    target_range = 1 << 22
    shapes = [(D,)]
    peers = []
    for _ in range(k):
        (_, p1), (_, p2) = generate_key_pairs(), generate_key_pairs()
        peers.append((public_key_to_bytes(p1), public_key_to_bytes(p2)))
    vector = [np.random.default_rng(0).uniform(-1, 1, D)]
    times, sizes = [], []
    shares_kept: dict[str, list[bytes]] = {}
    for _ in range(sample):
        start = time.perf_counter()
        sent = 0
        # stage 0: two key pairs
        sk1, pk1 = generate_key_pairs()
        sk2, pk2 = generate_key_pairs()
        sk1_b, pk1_b = private_key_to_bytes(sk1), public_key_to_bytes(pk1)
        sk2_b, pk2_b = private_key_to_bytes(sk2), public_key_to_bytes(pk2)
        sent += len(pk1_b) + len(pk2_b)
        # stage 1: share the seed and sk1 among k + 1 holders, encrypt to k neighbours
        rd_seed = os.urandom(32)
        b_shares = create_shares(rd_seed, t, k + 1)
        sk1_shares = create_shares(sk1_b, t, k + 1)
        ciphertexts = []
        for j, (_, peer_pk2) in enumerate(peers):
            key = generate_shared_key(bytes_to_private_key(sk2_b), bytes_to_public_key(peer_pk2))
            plain = share_keys_plaintext_concat(0, j + 1, b_shares[j + 1], sk1_shares[j + 1])
            ciphertexts.append((key, encrypt(key, plain)))
            sent += len(ciphertexts[-1][1]) + 8
        # stage 2: decrypt k incoming ciphertexts, quantise, add masks
        for key, blob in ciphertexts:
            decrypt(key, blob)
        quantized = quantize(vector, 1.0, target_range)
        masked = [quantized[0].astype(np.int64) + pseudo_rand_gen(rd_seed, mod_range, shapes)[0]]
        for j, (peer_pk1, _) in enumerate(peers):
            key = generate_shared_key(bytes_to_private_key(sk1_b), bytes_to_public_key(peer_pk1))
            mask = pseudo_rand_gen(key, mod_range, shapes)[0]
            masked[0] = masked[0] + mask if j % 2 else masked[0] - mask
        masked[0] = masked[0] % mod_range
        sent += len(ndarray_to_bytes(masked[0]))
        # stage 3: send one share per neighbour (+ own)
        sent += sum(len(s) + 8 for s in b_shares)
        times.append(time.perf_counter() - start)
        sizes.append(sent)
        shares_kept = {"seed": b_shares[:t], "sk1": sk1_shares[:t], "sk1_b": [sk1_b]}
    # server: per-secret and per-mask costs, scaled to the run's counts
    start = time.perf_counter()
    combine_shares(shares_kept["seed"])
    combine_seed = time.perf_counter() - start
    start = time.perf_counter()
    secret = combine_shares(shares_kept["sk1"])
    combine_sk = time.perf_counter() - start
    start = time.perf_counter()
    key = generate_shared_key(bytes_to_private_key(secret), bytes_to_public_key(peers[0][0]))
    pseudo_rand_gen(key, mod_range, shapes)
    pair_mask = time.perf_counter() - start
    start = time.perf_counter()
    pseudo_rand_gen(os.urandom(32), mod_range, shapes)
    prg = time.perf_counter() - start
    dropped = int(DROP * n)
    survivors = n - dropped
    server = survivors * (combine_seed + prg) + dropped * (combine_sk + k * pair_mask)
    return {
        "client_s": float(np.mean(times)),
        "server_s": server,
        "bytes": float(np.mean(sizes)),
        "sample": sample,
    }


_PHASES = {
    SecAggClient: ("advertise_keys", "share_keys", "masked_input", "unmask"),
    SecAggServer: (
        "setup_messages",
        "receive_advertise_keys",
        "key_directory",
        "receive_share_keys",
        "start_summation",
        "receive_masked_input",
        "unmask_requests",
        "receive_unmask",
        "finish_summation",
    ),
}


def _timed_phases() -> dict[str, float]:
    """Wrap the client's and server's round methods to add up their CPU time per phase."""
    spent: dict[str, float] = {}
    for cls, names in _PHASES.items():
        for name in names:
            method = getattr(cls, name)
            label = ("client " if cls is SecAggClient else "server ") + name

            def timed(*args: Any, _m: Any = method, _l: str = label, **kwargs: Any) -> Any:
                start = time.process_time()
                try:
                    return _m(*args, **kwargs)
                finally:
                    spent[_l] = spent.get(_l, 0.0) + time.process_time() - start

            setattr(cls, name, timed)
    return spent


def time_verification() -> float:
    """CPU seconds of one Ed25519 verification of a round-0 identity signature, timed alone.

    What a client does per key in its key directory (:func:`secagg.identity.check_identities`):
    load the claimed member's raw identity public key and verify the signature over the
    payload (roster digest, setup, id, member, the round-0 public keys), with real keys and
    a real payload; 50 repetitions, best of 3. The payload is built once: only the
    verification is timed.
    """
    identity, roster = in_process_identities(2)
    sk = crypto.generate_signing_key()
    payload = identity_payload(
        roster.digest,
        os.urandom(120),
        1,
        b"client-1",
        crypto.generate_keypair()[1],
        crypto.generate_keypair()[1],
        sk[1],
    )
    public = roster.members["client-1"]
    signature = crypto.sign(identity[1], payload)
    times = []
    for _ in range(3):
        start = time.process_time()
        for _ in range(50):
            if not crypto.verify_signature(public, payload, signature):
                raise RuntimeError("the timed signature does not verify")
        times.append((time.process_time() - start) / 50)
    return min(times)


def time_signing(signatures: int) -> float:
    """CPU seconds of one client's Ed25519 work as a signer, timed alone: one signing-key
    generation and ``signatures`` signatures of a 200-byte payload; 50 repetitions, best of 3.
    """
    payload = os.urandom(200)
    times = []
    for _ in range(3):
        start = time.process_time()
        for _ in range(50):
            private, _ = crypto.generate_signing_key()
            for _ in range(signatures):
                crypto.sign(private, payload)
        times.append((time.process_time() - start) / 50)
    return min(times)


def signatures_per_client(roster: bool) -> int:
    """Ed25519 signatures one client makes in the bench's sessions (semi-honest server, no
    consistency round): its shares' digests (share keys) and its unmasking reply, and with a
    roster its identity signature over its round-0 keys."""
    return 3 if roster else 2


def primitive_floor(
    n: int, k: int, d: int, dropped: int = 0, verifications: int = 0, signatures: int = 0
) -> float:
    """CPU seconds of the crypto the session (one summation) must do, timed alone.

    X25519 and AES-CTR: clients: 2 key generations each, k channel agreements each, and for
    the ``n - dropped`` that send an input k mask agreements and k + 1 AES-CTR keystreams of
    ``d`` words (the session's clients keep the key objects of round 0, so no agreement
    reloads a key). Server: one keystream per survivor (its self mask) and, per dropped
    client, its mask key checked against its public key, loaded, k agreements and k
    keystreams (the pairwise masks it removes). Each unit is timed on 50 repetitions with
    real keys, best of 3, scaled.

    Ed25519: ``verifications`` identity-signature verifications (:func:`time_verification`
    each). With a roster every client verifies, itself, the signature of every neighbour key
    advertisement its key directory shows: k per client on the k-regular graph (n k in the
    session, :func:`verifications_of`); the server verifies none; without a roster none. The
    signatures made: per client one Ed25519 signing-key generation and ``signatures``
    signatures (:func:`time_signing`, :func:`signatures_per_client`). The share digests
    (SHA-256) are not counted.
    """
    sk, _, loaded = crypto.generate_loaded_keypair()
    pks = [crypto.generate_keypair()[1] for _ in range(k)]
    keys = [os.urandom(32) for _ in range(k + 1)]

    def best(unit: Any) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            for _ in range(50):
                unit()
            times.append((time.process_time() - start) / 50)
        return min(times)

    keygens = best(lambda: (crypto.generate_loaded_keypair(), crypto.generate_loaded_keypair()))
    agreements = best(lambda: crypto.agree_many(loaded, pks, validated=True))
    streams = best(lambda: [crypto.mask_keystream(key, d) for key in keys])

    def recover_masks() -> None:  # a dropped client's mask key: check, load, agree
        crypto.public_from_private(sk)
        crypto.agree_many(sk, pks)

    recover = best(recover_masks)
    survivors = n - dropped
    clients = n * (keygens + agreements) + survivors * (agreements + streams)
    server = survivors * streams / (k + 1) + dropped * (recover + streams * k / (k + 1))
    checks = verifications * time_verification() if verifications else 0.0
    signing = n * time_signing(signatures) if signatures else 0.0
    return clients + server + checks + signing


def verifications_of(n: int, k: int, roster: bool) -> int:
    """Ed25519 verifications a session of ``n`` clients on a k-regular graph must do.

    With a roster: each of the n clients verifies the k neighbour keys its directory shows
    (its own entry it compares with what it signed); without one: none (the blame evidence
    is verified only when a reconstruction fails, never on the honest path).
    """
    return n * k if roster else 0


def scale_row(
    n: int, d: int, profile: bool = False, repeats: int = 1, roster: bool = False
) -> dict[str, Any]:
    """In-process sessions (one summation, 5 % dropouts) in this process: time and memory.

    With ``repeats > 1`` the session and the floor are each measured that many times and
    the best of each is kept (the machine's load only ever adds time); the phases are those
    of the first session. With ``roster`` every client holds an identity key on a roster
    (:func:`secagg.in_process_identities`, made before the clock starts) and signs its
    round-0 keys, and each verifies its neighbours' signatures itself (no cache shared
    between clients); the floor counts those verifications.
    """
    params = choose_parameters(n, gamma=0.05, delta=0.05)
    rng = np.random.default_rng(0)
    vectors = rng.uniform(-1.0, 1.0, size=(n, d))
    dropped = rng.choice(n, size=int(DROP * n), replace=False).tolist()
    keep = sorted(set(range(n)) - set(dropped))
    identities, members = in_process_identities(n) if roster else (None, None)
    spent = {} if profile else _timed_phases()  # the wrappers' clock calls would show
    phases: dict[str, float] = {}
    walls, cpus, floors = [], [], []
    top: list[str] = []
    for repeat in range(repeats):
        profiler = None
        if profile and repeat == 0:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        wall, cpu = time.perf_counter(), time.process_time()
        result = run_in_process(
            vectors,
            threshold=params.threshold,
            neighbours=params.degree,
            rng=np.random.default_rng(repeat),
            bounds=1.0,
            dropouts={"masked_input": dropped},
            identities=identities,
            roster=members,
        )
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        if profiler is not None:
            import pstats

            profiler.disable()
            stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
            rows = sorted(stats.items(), key=lambda item: -item[1][2])[:10]
            total = sum(v[2] for v in stats.values())
            top = [
                f"{100 * v[2] / total:5.1f} % {fn[2]} ({os.path.basename(fn[0])})" for fn, v in rows
            ]
        if repeat == 0:
            phases = dict(spent)
        error = np.max(np.abs(result.sum - vectors[keep].sum(axis=0)))
        if error > np.max(result.max_error):
            raise RuntimeError(f"wrong sum: error {error}")
        del result
        verifications = verifications_of(n, params.degree, roster)
        floors.append(
            primitive_floor(
                n, params.degree, d, len(dropped), verifications, signatures_per_client(roster)
            )
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    return {
        "n": n,
        "d": d,
        "k": params.degree,
        "t": params.threshold,
        "roster": roster,
        "verifications": verifications_of(n, params.degree, roster),
        "wall": min(walls),
        "cpu": min(cpus),
        "floor": min(floors),
        "repeats": repeats,
        "peak_mib": peak,
        "phases": phases,
        "top": top,
    }


def _run_row(
    n: int, d: int, profile: bool, repeats: int = 1, roster: bool = False
) -> dict[str, Any]:
    command = [sys.executable, __file__, "--scale-row", str(n), str(d), str(repeats)]
    command += (["--profile"] if profile else []) + (["--roster"] if roster else [])
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert isinstance(row, dict)
    return row


def print_scale(rows: list[tuple[int, int, bool]], repeats: int) -> None:
    """Print one measured row per ``(n, d, roster)``; rows with ``n <= 1000`` take the best of
    ``repeats`` sessions and floors (the ratio the speed target is about)."""
    print(
        "# scale: in-process session (run_in_process), 5 % dropouts, (k, t) for gamma = delta "
        f"= 0.05; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    header = (
        f"{'n':>6} {'d':>5} {'k':>4} {'t':>4} {'roster':>6} | {'wall s':>7} {'cpu s':>7} "
        f"{'floor s':>7} {'cpu/floor':>9} | {'peak MiB':>8}"
    )
    print(header)
    print("-" * len(header))
    done: list[dict[str, Any]] = []
    for n, d, roster in rows:
        row = _run_row(n, d, profile=False, repeats=repeats if n <= 1000 else 1, roster=roster)
        done.append(row)
        best = f" (best of {row['repeats']})" if row["repeats"] > 1 else ""
        print(
            f"{row['n']:>6} {row['d']:>5} {row['k']:>4} {row['t']:>4} "
            f"{'yes' if row['roster'] else 'no':>6} | {row['wall']:>7.2f} "
            f"{row['cpu']:>7.2f} {row['floor']:>7.2f} {row['cpu'] / row['floor']:>8.2f}x | "
            f"{row['peak_mib']:>8.0f}{best}  load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print(
        "floor s: CPU time of the crypto the session must do, each primitive timed alone "
        "(primitive_floor): every X25519 agreement and AES-CTR keystream (per client 2 key "
        "generations, k channel agreements, and for the senders k mask agreements and k + 1 "
        "keystreams of d words; the server's self-mask keystreams and dropped clients' masks) "
        "and, with a roster, one Ed25519 verification per neighbour key advertisement each "
        "client receives (n k; each client verifies for itself, nothing shared between "
        "clients; the server verifies none), and per client one Ed25519 key generation and "
        "its 2 signatures (3 with a roster), best of 3 x 50; not counted: the share digests "
        "(SHA-256), AES-GCM, Shamir. "
        "cpu/floor: the session's CPU time over that floor; peak MiB: the subprocess's "
        "maximum resident set (numpy and cryptography included); load: the 1-minute load "
        "average after the row."
    )
    if done:
        small = [r for r in done if r["n"] <= 3000] or done
        base = max(small, key=lambda r: (r["d"], r["n"], not r["roster"]))  # a profile
        profiled = _run_row(base["n"], base["d"], profile=True, roster=base["roster"])
        print(
            f"# where the time goes, n = {profiled['n']}, d = {profiled['d']}"
            f"{', roster' if profiled['roster'] else ''}: CPU s per phase (all clients / the "
            "server; the unprofiled row above), then cProfile's top functions by own time "
            "(share of the profiled total)"
        )
        phases = base["phases"]
        for label, seconds in sorted(phases.items(), key=lambda kv: -kv[1])[:8]:
            print(f"  {seconds:7.2f} s  {label}")
        for line in profiled["top"]:
            print(f"  {line}")


def exact_complete(n: int = 1000, d: int = 4) -> dict[str, Any]:
    """The complete graph at ``n`` clients: the decoded sum and the ring sum, exact to the bit.

    Integer inputs in [-1000, 1000] (exact at any power-of-two scale >= 1), threshold
    ``floor(n / 2) + 1``, clients 5 and 6 dropping before the masked input. Raises unless the
    survivors are all but 5 and 6, the decoded sum equals the float sum of their inputs and
    the raw sum in Z_2^64 equals the encoded inputs summed with Python integers. At n = 1000:
    about 2 M X25519 agreements (the suite checks the same at n = 150,
    tests/test_secagg_inprocess.py::test_exact_sum_complete_graph).
    """
    vectors = np.random.default_rng(8).integers(-1000, 1001, size=(n, d)).astype(np.float64)
    dropped = {5, 6}
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_in_process(
        vectors,
        threshold=n // 2 + 1,
        neighbours="complete",
        dropouts={"masked_input": dropped},
        rng=np.random.default_rng(8),
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    keep = sorted(set(range(n)) - dropped)
    kept = vectors[keep]
    if result.survivors != tuple(keep):
        raise RuntimeError(f"survivors {result.survivors[:8]}... are not all but {dropped}")
    if not np.array_equal(result.sum, kept.sum(axis=0)):
        raise RuntimeError(f"decoded sum {result.sum} != {kept.sum(axis=0)}")
    scales = len(keep) / np.asarray(result.max_error)  # max_error = survivors / scale
    ring = [sum(int(v * scales[j]) for v in kept[:, j]) % 2**64 for j in range(d)]
    if not np.array_equal(result.raw, np.array(ring, dtype=np.uint64)):
        raise RuntimeError("the ring sum in Z_2^64 is not the encoded inputs' sum")
    return {"n": n, "d": d, "t": n // 2 + 1, "survivors": len(keep), "wall": wall, "cpu": cpu}


def print_params() -> None:
    print("# (k, t) = secagg.choose_parameters(n, gamma, delta), sigma = 40, eta = 20")
    for gamma in (0.05, 0.125):
        for n in (100, 1000, 5000, 10_000, 100_000):
            p = choose_parameters(n, gamma=gamma, delta=gamma)
            print(
                f"gamma = delta = {gamma:<5} n = {n:>6}: k = {p.degree:>3}, t = {p.threshold:>3} "
                f"(privacy 2^{p.privacy_failure:.1f}, correctness 2^{p.correctness_failure:.1f})"
            )
    print(choose_parameters(1000, gamma=0.125, delta=0.125).guarantee())


def print_ring(sizes: list[int], repeats: int = 3) -> None:
    """Z_2^32 against Z_2^64 (issue 12): the same sessions, k-regular graph, best of ``repeats``.

    Bytes per client: the masked-input reply alone and the whole session (keys and shares
    included); times: a client's four methods (mean), the server's, the session's wall.
    """
    print(
        f"# secagg in Z_2^32 vs Z_2^64, d = {D}, {DROP:.0%} dropouts, k-regular, best of "
        f"{repeats}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        "| n | ring | masked input KiB/client | session KiB/client | client ms | server s "
        "| wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        for bits in (64, 32):
            runs = [run_ours(n, None, seed=r, modulus_bits=bits) for r in range(repeats)]
            best = {key: min(r[key] for r in runs) for key in ("client_s", "server_s", "wall_s")}
            print(
                f"| {n} | Z_2^{bits} | {runs[0]['masked_bytes'] / 1024:.1f} | "
                f"{runs[0]['bytes'] / 1024:.1f} | {1e3 * best['client_s']:.2f} | "
                f"{best['server_s']:.2f} | {best['wall_s']:.2f} |",
                flush=True,
            )
    print(f"load average now {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 100 only")
    parser.add_argument("--scale", action="store_true", help="the scale rows only")
    parser.add_argument(
        "--scale-n",
        type=int,
        nargs="*",
        default=[1000, 3000, 10_000, 100_000],
        help="d = 64 rows",
    )
    parser.add_argument(
        "--scale-n-wide", type=int, nargs="*", default=[1000, 10_000], help="d = 3072 rows"
    )
    parser.add_argument(
        "--scale-repeats", type=int, default=3, help="best of this many for rows with n <= 1000"
    )
    parser.add_argument("--scale-row", type=int, nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--roster",
        action="store_true",
        help="--scale-row only: identity keys and a roster (k verifications per client)",
    )
    parser.add_argument(
        "--exact-complete",
        type=int,
        nargs="?",
        const=1000,
        metavar="N",
        help="complete graph, N clients (default 1000): assert the sum is exact to the bit",
    )
    parser.add_argument("--params", action="store_true", help="the (k, t) table only")
    parser.add_argument(
        "--ring", action="store_true", help="Z_2^32 against Z_2^64: bytes and time per client"
    )
    args = parser.parse_args()
    if args.ring:
        print_ring([100] if args.quick else [100, 500, 1000])
        return
    if args.scale_row:
        n, d, repeats = args.scale_row
        row = scale_row(n, d, profile=args.profile, repeats=repeats, roster=args.roster)
        print(json.dumps(row))
        return
    if args.exact_complete:
        load = os.getloadavg()[0]
        out = exact_complete(args.exact_complete)
        print(
            f"# exact sum on the complete graph: n = {out['n']}, d = {out['d']}, t = {out['t']}, "
            f"2 dropped before the masked input: exact ({out['survivors']} survivors; decoded "
            f"sum and Z_2^64 ring sum equal bit for bit), {out['wall']:.1f} s wall, "
            f"{out['cpu']:.1f} s CPU; load average {load:.2f} before, "
            f"{os.getloadavg()[0]:.2f} after"
        )
        return
    if args.params:
        print_params()
        return
    if args.scale:
        rows = [(n, 64, False) for n in args.scale_n]
        rows += [(n, D, roster) for n in args.scale_n_wide for roster in (False, True)]
        print_scale(rows, args.scale_repeats)
        return
    configs: list[tuple[int, Any]] = [(100, None), (100, "complete")]
    if not args.quick:
        configs += [(500, None), (500, "complete"), (1000, None)]
    print(
        f"# secagg vs flwr SecAgg+ primitives, d = {D}, {DROP:.0%} dropouts before masked "
        f"input; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    header = (
        f"{'n':>5} {'graph':>10} {'k':>4} {'t':>4} | {'client ms':>9} {'flwr ms':>9} "
        f"{'ratio':>6} | {'server s':>8} {'flwr s*':>8} {'ratio':>6} | {'KiB/cl':>7} "
        f"{'flwr KiB':>8} | {'wall s':>6} {'cpu s':>6}"
    )
    print(header)
    print("-" * len(header))
    for n, neighbours in configs:
        ours = run_ours(n, neighbours)
        k, t = int(ours["k"]), int(ours["t"])
        sample = 1 if (neighbours == "complete" and n >= 500) else 3
        theirs = run_flower(n, k, t, sample)
        graph = "complete" if neighbours == "complete" else "k-regular"
        print(
            f"{n:>5} {graph:>10} {k:>4} {t:>4} | {1e3 * ours['client_s']:>9.2f} "
            f"{1e3 * theirs['client_s']:>9.1f} {theirs['client_s'] / ours['client_s']:>5.0f}x | "
            f"{ours['server_s']:>8.2f} {theirs['server_s']:>8.2f} "
            f"{theirs['server_s'] / ours['server_s']:>5.0f}x | {ours['bytes'] / 1024:>7.1f} "
            f"{theirs['bytes'] / 1024:>8.1f} | {ours['wall_s']:>6.2f} {ours['cpu_s']:>6.2f}",
            flush=True,
        )
    print(
        "flwr ms: measured on a sample of 3 clients (1 for complete n >= 500) with real "
        "neighbour keys; flwr s*: server unmasking extrapolated from one measured secret "
        "reconstruction and one mask per kind, scaled to the run's counts."
    )
    print(
        "wall s / cpu s: our whole session in one process (all n clients and the server); "
        f"target n = 1000, k-regular (k = {default_degree(1000)}): <= 5 s wall. Load average "
        f"now {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs."
    )


if __name__ == "__main__":
    main()
