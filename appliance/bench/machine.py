"""What machine a benchmark ran on: CPU model, cores, memory, kernel, Python, nats-server version."""

from __future__ import annotations

import os
import platform
import subprocess
import time

import psutil

from appliance.bench.scan import NATIVE
from appliance.bench.servers import nats_server_binary


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nats_server_version() -> str:
    binary = nats_server_binary()
    if binary is None:
        return "not installed"
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False)
    return done.stdout.strip() or done.stderr.strip()


def describe() -> dict[str, str]:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "memory_gib": f"{psutil.virtual_memory().total / 2**30:.0f}",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "nats_server": nats_server_version(),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "bench_scan": "C (appliance.bench._loadgen)" if NATIVE else "pure Python",
    }
