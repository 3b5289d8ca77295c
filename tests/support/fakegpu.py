"""Write the state of the fake NVML library (tests/fake_nvml) and build it.

The fake re-reads its folder ($FAKE_NVML_DIR) on every NVML call, so changing the simulated
GPUs is writing a file; the format is in tests/fake_nvml/README.md. Files are replaced
atomically (write a temporary name, then rename) so a concurrent NVML call never reads half a
file. Also a small command line for demos: `python tests/support/fakegpu.py --help`.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

FAKE_NVML_SRC = Path(__file__).resolve().parent.parent / "fake_nvml"
H200_MIB = 143771


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _per_gpu(value: int | Sequence[int], i: int) -> int:
    return value if isinstance(value, int) else value[i]


def gpu_uuid(index: int) -> str:
    """The UUID `write_gpus` gives GPU `index` (shaped like a real one)."""
    return f"GPU-{index:08x}-0000-4000-8000-{index:012x}"


def write_gpus(
    state_dir: str | os.PathLike[str],
    n: int = 8,
    total_mib: int = H200_MIB,
    *,
    base_mib: int | Sequence[int] = 0,
    util: int | Sequence[int] = 0,
    reserved_mib: int = 0,
    name: str = "NVIDIA H200",
    faults: Mapping[int, str] | None = None,
    clocks: Mapping[int, int] | None = None,
) -> list[str]:
    """Simulate `n` GPUs (indices 0..n-1); `base_mib`/`util` may be one value or one per GPU.

    Returns the UUIDs in index order. `reserved_mib` is driver-reserved memory: counted in
    memory-info v1's `used`, reported apart by v2. `faults` adds fault counters to a GPU's
    line, e.g. {3: "remap_pending=1"} or {2: "recovery=2 dbe=1"} (README: gpus). `clocks`
    sets a GPU's clock event reasons, e.g. {3: HW_THERMAL | HW_SLOWDOWN}.
    """
    uuids = [gpu_uuid(i) for i in range(n)]
    lines = [
        f"index={i} uuid={uuids[i]} name={name} total_mib={total_mib} "
        f"base_mib={_per_gpu(base_mib, i)} reserved_mib={reserved_mib} util={_per_gpu(util, i)}"
        + (f" {faults[i]}" if faults and i in faults else "")
        + (f" clocks_event_reasons={clocks[i]:#x}" if clocks and i in clocks else "")
        for i in range(n)
    ]
    _atomic_write(Path(state_dir) / "gpus", "".join(line + "\n" for line in lines))
    return uuids


# nvmlClocksEventReason* bits (nvml.h)
SW_POWER_CAP, HW_SLOWDOWN, HW_THERMAL, HW_POWER_BRAKE = 0x4, 0x8, 0x40, 0x80


def hold(state_dir: str | os.PathLike[str], pid: int, mib_by_gpu: Mapping[int, int]) -> None:
    """Make process `pid` hold `mib` on each GPU index while it is alive (replaces old holds)."""
    text = "".join(f"gpu={gpu} mib={mib}\n" for gpu, mib in mib_by_gpu.items())
    _atomic_write(Path(state_dir) / "procs" / str(pid), text)


def release(state_dir: str | os.PathLike[str], pid: int) -> None:
    """Process `pid` frees its GPU memory (it may stay alive)."""
    (Path(state_dir) / "procs" / str(pid)).unlink(missing_ok=True)


def set_faults(state_dir: str | os.PathLike[str], lines: Iterable[str]) -> None:
    """Replace the injected faults, e.g. ["func=* gpu=3 code=GPU_IS_LOST"]; [] clears them."""
    _atomic_write(Path(state_dir) / "faults", "".join(line + "\n" for line in lines))


def fail_every_call(state_dir: str | os.PathLike[str], code: str = "UNKNOWN") -> None:
    """From now on every NVML call answers `code` (a fresh nvmlInit too): the container's device
    access revoked under a running job (a device cgroup re-applied). set_faults(dir, []) ends it."""
    set_faults(state_dir, [f"func=* code={code}"])


def deny_init(state_dir: str | os.PathLike[str], code: str = "NO_PERMISSION") -> None:
    """A fresh nvmlInit fails with `code` (NO_PERMISSION: /dev/nvidiactl cannot be opened);
    a session initialised before keeps answering."""
    set_faults(state_dir, [f"func=nvmlInitWithFlags code={code}"])


def inject_event(
    state_dir: str | os.PathLike[str], gpu: int, xid: int, event_type: int = 0x8
) -> None:
    """Deliver one NVML event (default: an Xid critical error) to event sets that exist now."""
    path = Path(state_dir) / "events"
    with open(path, "a") as f:  # one short write: a concurrent reader sees the whole line
        f.write(f"gpu={gpu} type={event_type} data={xid}\n")


def inject_events(
    state_dir: str | os.PathLike[str], events: Iterable[tuple[int, int]], event_type: int = 0x8
) -> int:
    """Deliver many events at once, e.g. an Xid storm: [(gpu, xid), ...] appended in one write
    (the stand-in takes only whole lines, so a reader never sees half of one). Returns how many."""
    text = "".join(f"gpu={gpu} type={event_type} data={xid}\n" for gpu, xid in events)
    with open(Path(state_dir) / "events", "a") as f:
        f.write(text)
    return text.count("\n")


@functools.cache
def _make() -> None:
    subprocess.run(
        ["make", "-s", "-C", str(FAKE_NVML_SRC)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=60,
    )


def build_fake_nvml(*, old: bool = False) -> Path:
    """Build both flavours once per process; the folder holding libnvidia-ml.so.1.

    `old=True` is the driver without memory-info v2 and the v3 process list.
    """
    _make()
    return FAKE_NVML_SRC / ("build-old" if old else "build")


def fake_env(
    state_dir: str | os.PathLike[str],
    old: bool = False,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """An environment (from `base`, default os.environ) in which pynvml loads the fake.

    It must be given to a new process: glibc reads LD_LIBRARY_PATH once, at start.
    """
    env = dict(os.environ if base is None else base)
    lib = str(build_fake_nvml(old=old))
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    env["FAKE_NVML_DIR"] = str(Path(state_dir).resolve())
    return env


def _main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    gpus = sub.add_parser("gpus", help="write DIR/gpus and print the shell exports to use it")
    gpus.add_argument("dir")
    gpus.add_argument("-n", type=int, default=8)
    gpus.add_argument("--total-mib", type=int, default=H200_MIB)
    gpus.add_argument("--old", action="store_true", help="the driver without memory-info v2")
    faults = sub.add_parser("faults", help="replace DIR/faults with the given lines")
    faults.add_argument("dir")
    faults.add_argument("lines", nargs="*")
    xid = sub.add_parser("xid", help="inject an Xid event on a GPU of a running watcher")
    xid.add_argument("dir")
    xid.add_argument("gpu", type=int)
    xid.add_argument("xid", type=int)
    args = parser.parse_args(argv)
    if args.cmd == "gpus":
        write_gpus(args.dir, args.n, args.total_mib)
        env = fake_env(args.dir, old=args.old)
        for key in ("LD_LIBRARY_PATH", "FAKE_NVML_DIR"):
            print(f"export {key}={shlex.quote(env[key])}")
    elif args.cmd == "xid":
        inject_event(args.dir, args.gpu, args.xid)
    else:
        set_faults(args.dir, args.lines)


if __name__ == "__main__":
    _main()
